"""The grouped-query decode grid on the GPU: every cases.gqa_decode_cases() shape with
its SDPA FLASH and CUDNN peers, the table, the per-class minima (of copy, vs each peer) and
the JSON (argument 1, optional).

    python experiments/attention/gqa_decode_run.py [OUT.json] [--quick]
"""
from __future__ import annotations

import collections
import json
import sys

from cufuse.bench.cases import gqa_decode_cases, gqa_decode_class
from cufuse.bench.runner import Ceilings, format_table, measure


def class_minima(results) -> list:
    """(class, min of copy, min vs FA2, min vs cuDNN, points) per class, None where unmeasured."""
    by_class = collections.defaultdict(list)
    for result in results:
        by_class[gqa_decode_class(result.case)].append(result)

    def least(values):
        values = [x for x in values if x is not None]
        return min(values) if values else None

    return [(name, least(r.fraction_of_ceiling() for r in rs), least(r.speedup("sdpa flash") for r in rs),
             least(r.speedup("sdpa cudnn") for r in rs), len(rs)) for name, rs in by_class.items()]


def main(argv) -> None:
    quick = "--quick" in argv
    paths = [a for a in argv if not a.startswith("--")]
    ceilings, results = Ceilings(), []
    for case in gqa_decode_cases(quick):
        results.append(measure(case, ceilings, budget_ms=100.0))
        r = results[-1]
        print(case.label, {k: v for k, v in r.ms.items()}, "of copy", r.fraction_of_ceiling(),
              "vs FA2", r.speedup("sdpa flash"), "vs cuDNN", r.speedup("sdpa cudnn"), flush=True)
    print(format_table(results))
    print(f"{'class':18} {'of copy':>8} {'vs FA2':>7} {'vs cuDNN':>8} points")
    for name, copy, fa2, cudnn, n in class_minima(results):
        cells = [f"{x:.2f}" if x is not None else "-" for x in (copy, fa2, cudnn)]
        print(f"{name:18} {cells[0]:>8} {cells[1]:>7} {cells[2]:>8} {n}")
    if paths:
        with open(paths[0], "w") as f:
            json.dump([r.to_dict() for r in results], f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
