"""The classes of softmax shapes on the GPU, one line a case and the class minima:
cufuse as a fraction of a device copy of the same bytes, against torch.softmax, and for
views against a CuPy copy of the same view (cufuse.bench.cases.SOFTMAX_CLASSES).

    python experiments/softmax/bench_classes.py [--dtypes float16,float32] [--classes narrow,...]
                                                [--log] [--budget-ms 40] [--json FILE]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from cufuse.bench.cases import COPY_OF_VIEW, SOFTMAX_CLASSES, softmax_class_cases
from cufuse.bench.runner import Ceilings, measure

PEERS = ("cufuse", "torch.softmax", COPY_OF_VIEW)


def _fmt(value) -> str:
    return "   -" if value is None or value == _NONE else f"{value:4.2f}"


_NONE = 1e9  # a class minimum nothing was measured for


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--classes", default=",".join(SOFTMAX_CLASSES))
    parser.add_argument("--log", action="store_true", help="log_softmax instead of softmax")
    parser.add_argument("--budget-ms", type=float, default=40.0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    cases = softmax_class_cases(args.classes.split(","), tuple(args.dtypes.split(",")), args.log)
    cases = [dataclasses.replace(c, impls=tuple(i for i in c.impls if i.name in PEERS)) for c in cases]
    ceilings = Ceilings()
    rows, minima = [], {}
    for case in cases:
        result = measure(case, ceilings, budget_ms=args.budget_ms)
        frac = result.fraction_of_ceiling()
        torch_x = result.speedup("torch.softmax")
        view = result.rate(COPY_OF_VIEW) if COPY_OF_VIEW in result.ms else None
        of_view = result.rate("cufuse") / view if view and result.rate("cufuse") else None
        klass = case.label.split(":")[0]
        line = dict(case=case.key, ms=result.ms["cufuse"], of_copy=frac, vs_torch=torch_x, of_view_copy=of_view,
                    status=result.status)
        rows.append(line)
        m = minima.setdefault((klass, case.dtype), [_NONE, _NONE, _NONE])
        for k, v in enumerate((frac, torch_x, of_view)):
            if v is not None:
                m[k] = min(m[k], v)
        print(f"{case.key:62s} {_fmt(frac)} of copy  {_fmt(torch_x)}x torch  {_fmt(of_view)} of view copy"
              + ("" if result.status["cufuse"] == "ok" else f"  {result.status['cufuse']}"), flush=True)
    print("\nclass minima (of copy, x torch, of the view's copy):")
    for (klass, dtype), (a, b, c) in minima.items():
        print(f"  {klass:30s} {dtype:9s} {_fmt(a)}  {_fmt(b)}x  {_fmt(c)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(copy=ceilings.as_dict(), rows=rows), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
