"""The span rows (softmax_rows_span) against the register rows on narrow rows (issue 24).

Run: ``python3 experiments/softmax/sweep_span.py [--wide] [substring]`` (stdout only). For each shape and
dtype: the default (``select.choose``), the register-rows rung that held the row before the span
kernel (``choose_rows``), and span variants (tile bytes, lanes a row), all through
``cufuse.softmax(..., config=)``, timed as ``sweep_softmax.py`` times them (fraction of a
device copy of the same bytes; ``grep '=>'`` gives the decision table). ``--wide``: rows of
257-1023 elements (``WIDE_LENGTHS``), the default against 32-lane span rungs past the ladder
and sub-warp register rows.
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
from cufuse.ops.softmax.layout import SoftmaxProblem, vector_size  # noqa: E402
from cufuse.ops.softmax.rows import RowsConfig, SpanRowsConfig  # noqa: E402
from sweep_softmax import DTYPES, _alternatives, run_case  # noqa: E402

# Misaligned lengths (the span's default) and aligned ones (the register rows' default).
SHAPES = ((671088, 100), (2097152, 7), (262144, 129), (262144, 255), (1048576, 33), (2097152, 9),
          (1048576, 32), (262144, 128), (2097152, 8))


# Rows past the ladder's 256 elements (session 19): 32 lanes a row, p elements a lane, the
# fewest-register launch bound that does not spill (sm_90a ptxas: 2-byte p24 at 6 blocks an SM
# 40 registers, p32 at 4 63; float32 p24 spills at 6, p32 at 4: 4 and 3).
WIDE_SPAN = {2: ((12, 6), (16, 6), (24, 6), (32, 4)), 4: ((12, 6), (16, 6), (24, 4), (32, 3))}
# 257-1023 elements, most off the vector (512 and 768 whole vectors); ~128 MiB of float16 a shape.
WIDE_LENGTHS = (257, 300, 390, 501, 512, 601, 700, 768, 777, 900, 1001, 1023)


def wide_variants(rows, length, dtype, dev):
    problem = SoftmaxProblem(rows, length, 1, length, 1, 0, np.dtype(dtype), False)
    default = S.choose(problem, dev)
    out = [("default", default)]
    if isinstance(default, RowsConfig) and default.exp_once:
        out.append(("default, exps not kept", dataclasses.replace(default, exp_once=False)))
    itemsize = np.dtype(dtype).itemsize
    # The warp rows that held these rows before session 20 (128 threads, the first of 2, 3, 4, 5,
    # 6, 8 vectors a lane that holds the row from the boundary below).
    warp_vecs = next((v for v in (2, 3, 4, 5, 6, 8) if 32 * v >= problem.vectors + 1), None)
    if warp_vecs is not None:
        out.append(("warp rows", S.with_exp_once(RowsConfig(128, 32, warp_vecs), dtype)))
    for per_lane, blocks in WIDE_SPAN.get(itemsize, ()):
        if 32 * per_lane >= length:
            span = SpanRowsConfig(256, 32, per_lane, blocks, S._SPAN_TILE_BYTES[itemsize])
            out += [(f"span g32 p{per_lane} b{blocks}", span),
                    (f"span g32 p{per_lane} b{blocks} tile 2x", dataclasses.replace(span, tile_bytes=2 * span.tile_bytes))]
    # Sub-warp register rows: fewer lanes a row, more vectors a lane in flight (the warp rows
    # hold a 257-element float16 row in one vector a lane).
    vectors = problem.vectors + 1  # a row off the vector spans one more
    for group in (16, 8):
        vecs = -(-vectors // group)
        if vecs <= 8:
            out += [(f"rows t{t} g{group} v{vecs}", RowsConfig(t, group, vecs, True)) for t in (128, 256)]
    return out


def variants(rows, length, dtype, dev):
    if length > S.span_ladder(dtype)[-1].capacity_elements:
        return wide_variants(rows, length, dtype, dev)
    problem = SoftmaxProblem(rows, length, 1, length, 1, 0, np.dtype(dtype), False)
    default = S.choose(problem, dev)
    out = [("default", default), ("register rows", S.choose_rows(length, rows, dtype, dev, vector_size(dtype) - 1))]
    span = next(c for c in S.span_ladder(dtype) if c.capacity_elements >= length)
    out += [(f"span g{span.group} p{span.per_lane} tile {b // 1024}K", dataclasses.replace(span, tile_bytes=b))
            for b in (8192, 16384, 32768)]
    if span.group > 1:
        wider = SpanRowsConfig(span.threads, span.group // 2, span.per_lane * 2, span.blocks_per_sm)
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
    wide = "--wide" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--wide"]
    only = args[0] if args else ""
    dev = current_device_info()
    shapes = tuple(((1 << 26) // n, n) for n in WIDE_LENGTHS) if wide else SHAPES
    cases = [(r, n, d) for r, n in shapes for d in DTYPES if not only or only in f"{r}x{n} {d}"]
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
