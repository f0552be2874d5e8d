"""fused_linear's activations and fused_gated_linear against their peers on a few points
(cufuse.bench.cases.linear_act_case / gated_case), and the float32 / float64 split-K and gemv
paths; a short table on stdout, every measurement as JSON in the file given as argument.

    python experiments/linear/measure_activations.py out.json
"""
from __future__ import annotations

import json
import sys

from cufuse.bench import cases as bench_cases
from cufuse.bench.runner import Ceilings, format_table, measure, release_memory

CASES = (
    [bench_cases.linear_act_case(m, 4096, 11008, "bfloat16", act, "nk") for m in (16, 4096)
     for act in ("relu", "gelu", "gelu_tanh", "silu")]
    + [bench_cases.linear_act_case(m, k, n, "bfloat16", "gelu", layout) for m, k, n, layout in (
        (1, 4096, 14336, "nk"), (128, 4096, 11008, "nk"), (512, 4096, 11008, "kn"), (512, 4096, 11008, "nk"))]
    + [bench_cases.gated_case(m, k, n, "bfloat16", "silu", layout) for m, k, n, layout in (
        (1, 4096, 11008, "nk"), (16, 4096, 14336, "nk"), (16, 4096, 14336, "kn"), (128, 4096, 11008, "nk"),
        (512, 4096, 11008, "nk"), (4096, 4096, 11008, "nk"))]
    + [bench_cases.linear_case(64, 8192, 8192, "float32"), bench_cases.linear_case(16, 8192, 4096, "float64"),
       bench_cases.linear_case(1, 8192, 8192, "float32")]
)


def main(path: str) -> int:
    ceilings, results = Ceilings(), []
    for case in CASES:
        results.append(measure(case, ceilings, budget_ms=150.0))
        release_memory()
    with open(path, "w") as handle:
        json.dump({"ceilings": ceilings.as_dict(), "results": [r.to_dict() for r in results]}, handle, indent=1)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
