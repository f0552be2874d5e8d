"""The span rows (softmax_rows_span) against the register rows on narrow rows.

Run: ``python3 experiments/softmax/sweep_span.py [substring]`` (stdout only). For each shape and
dtype: the default (``select.choose``), the register-rows rung that held the row before the span
kernel (``choose_rows``), and span variants (tile bytes, lanes a row), all through
``cufuse.softmax(..., config=)``, timed as ``sweep_softmax.py`` times them (fraction of a
device copy of the same bytes; ``grep '=>'`` gives the decision table).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
from cufuse._core.device import current_device_info  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse.ops.softmax import select as S  # noqa: E402
from cufuse.ops.softmax.problem import SoftmaxProblem, vector_size  # noqa: E402
from cufuse.ops.softmax.rows import SpanRowsConfig  # noqa: E402
from sweep_softmax import DTYPES, _alternatives, run_case  # noqa: E402

# Misaligned lengths (the span's default) and aligned ones (the register rows' default).
SHAPES = ((671088, 100), (2097152, 7), (262144, 129), (262144, 255), (1048576, 33), (2097152, 9),
          (1048576, 32), (262144, 128), (2097152, 8))


def variants(rows, length, dtype, dev):
    problem = SoftmaxProblem(rows, length, 1, length, 1, 0, np.dtype(dtype), False)
    default = S.choose(problem, dev)
    out = [("default", default), ("register rows", S.choose_rows(length, rows, dtype, dev, vector_size(dtype) - 1))]
    span = next(c for c in S.span_ladder(dtype) if c.capacity_elements >= length)
    out += [(f"span g{span.group} p{span.per_lane} tile {b // 1024}K", dataclasses.replace(span, tile_bytes=b))
            for b in (8192, 16384, 32768)]
    if span.group > 1:
        wider = SpanRowsConfig(threads=span.threads, group=span.group // 2, per_lane=span.per_lane * 2,
                               blocks_per_sm=span.blocks_per_sm)
        out.append((f"span g{wider.group} p{wider.per_lane}", wider))
    if length % vector_size(dtype) == 0:  # the register rows' own alternatives (sweep_softmax.py)
        out += _alternatives(rows, length, next(k for k, d in DTYPES.items() if d == dtype), -1, dev)
    seen, unique = set(), []
    for name, config in out:
        if config not in seen:
            seen.add(config)
            unique.append((name, config))
    return unique


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    dev = current_device_info()
    cases = [(r, n, d) for r, n in SHAPES for d in DTYPES if not only or only in f"{r}x{n} {d}"]
    t0 = time.time()
    specs = [c.spec(DTYPES[d], False) for r, n, d in cases for _, c in variants(r, n, DTYPES[d], dev)]
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(set(specs))} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}")
    for spec, error in failures:
        print(spec.expression, error[:400])
    for rows, length, dname in cases:
        run_case(rows, length, -1, dname, variants(rows, length, DTYPES[dname], dev))


if __name__ == "__main__":
    main()
