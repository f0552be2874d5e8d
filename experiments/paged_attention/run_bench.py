"""GPU session script (issue 18): time the paged grid of cufuse.bench.cases and print each
case's ratios and every class's minima.

    python experiments/paged_attention/run_bench.py [--quick] [--json FILE]

Ratios: cufuse paged's rate over the copy of the bytes actually read (K and V of each
sequence's keys once per KV head, q, out), over cufuse's dense attention on the same lengths,
and over SDPA FLASH / CUDNN on the dense caches.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cufuse.bench.cases import paged_cases, paged_class  # noqa: E402
from cufuse.bench.runner import Ceilings, measure  # noqa: E402

PEERS = ("cufuse dense", "sdpa flash", "sdpa cudnn")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--budget-ms", type=float, default=150.0)
    args = parser.parse_args()
    ceilings = Ceilings()
    rows, minima = [], {}
    for case in paged_cases(args.quick):
        result = measure(case, ceilings, budget_ms=args.budget_ms)
        paged_ms = result.ms["cufuse"]
        row = {"case": case.label, "status": result.status, "ms": result.ms,
               "tbps": result.rate("cufuse") if paged_ms else None,
               "of_copy": result.fraction_of_ceiling() if paged_ms else None}
        for peer in PEERS:
            row[peer] = result.ms[peer] / paged_ms if paged_ms and result.ms.get(peer) else None
        rows.append(row)
        cls = minima.setdefault(paged_class(case), {})
        for key in ("of_copy", *PEERS):
            if row[key] is not None:
                cls[key] = min(cls.get(key, float("inf")), row[key])
        peers = "  ".join(f"{p} {row[p]:.2f}x" if row[p] else f"{p} -" for p in PEERS)
        print(f"{case.label:58s} {row['tbps'] or 0:5.2f} TB/s  of copy {row['of_copy'] or 0:.2f}  {peers}"
              f"  {'' if all(v == 'ok' for v in result.status.values()) else result.status}", flush=True)
    print("\nclass minima (paged speed-up over each; of copy = fraction of the measured copy rate)")
    for cls, values in minima.items():
        print(f"  {cls:14s} " + "  ".join(f"{k} {v:.2f}" for k, v in values.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "minima": minima, "ceilings": ceilings.as_dict()},
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
