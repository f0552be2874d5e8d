"""Row lengths off the capacity ladder's rungs (the target: "any row length at the rate of its
aligned neighbours"): for each length of a geometric grid of 300..150000 elements (none a
power of two, most not whole 16-byte vectors), the default and block-row geometries sized to
the row; with ``--split``, the split rows' blocks a row on the long and very long classes.
Every candidate goes through ``cufuse.softmax(..., config=)``.

Run: ``python3 experiments/softmax/sweep_lengths.py [--split] [--dtypes fp16,fp32] [--mib 96]
[--lengths 4096,6500] [--default-only] [substring]``
(stdout only). Candidates, by the row's vectors counted from the boundary below its start:

- ``warp x v``: ``softmax_rows``, a warp a row, v vectors a lane (rows of up to 256 vectors);
- ``rows t x v``: ``softmax_block_rows`` with a block of t threads (t a multiple of 32, the fewest
  that hold the row at v vectors a lane), v in 2..8;
- ``stashed t x v + s / b``: ``softmax_rows_stashed``, t threads x v vectors in registers and s
  such tiles in shared memory, b blocks an SM, t the fewest that hold the row;
- ``split bB``: the persistent ``softmax_rows_split`` with B = 1 or 2 blocks a row (rows
  past 1024 vectors that fit on chip);
- ``split bB wW cost`` (--split): ``softmax_rows_split`` with B blocks a row, W waves of the resident
  grid, W x chunk elements a block (for each wave count the least, kept where it beats every
  fewer-wave config by 1 %).

Each line is timed as ``sweep_softmax.py`` times it (fraction of a device copy of the same
bytes, output checked against float64); ``grep '=>'`` gives the best per shape.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
from cufuse._core.device import SMEM_RESERVED_PER_BLOCK, current_device_info  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse.ops.softmax import select as S  # noqa: E402
from cufuse.ops.softmax.problem import SoftmaxProblem, vector_size  # noqa: E402
from cufuse.ops.softmax.rows import RowsConfig, StashedRowsConfig  # noqa: E402
from cufuse.ops.softmax.split import SplitConfig  # noqa: E402
from sweep_softmax import DTYPES, run_case  # noqa: E402

LENGTHS = (300, 520, 777, 1000, 1500, 2100, 3000, 4097, 5000, 6000, 7777, 10000, 12288, 16500, 20000, 25000,
           33331, 40000, 50000, 65000, 100000, 150000)
# Split rows (--split): (rows, length) of the long and very long classes and neighbours.
SPLIT_SHAPES = ((671, 100000), (335, 200000), (134, 500000), (250, 262144), (97, 300007), (64, 1000000), (22, 3000000),
                (4, 4194304), (1, 12000000))


def _problem(rows, length, dtype):
    return SoftmaxProblem(rows, length, 1, length, 1, 0, np.dtype(dtype), False)


def _unique(named):
    seen, unique = set(), []
    for name, config in named:
        if config not in seen:
            seen.add(config)
            unique.append((name, config))
    return unique


def _threads(vectors: int, per_thread: int) -> int:
    return -(-vectors // (per_thread * 32)) * 32


def variants(rows, length, dtype, dev):
    problem = _problem(rows, length, dtype)
    vectors = -(-(length + problem.max_row_misalignment) // vector_size(dtype))
    out = [("default", S.choose(problem, dev))]
    if vectors <= 256:  # the warp rows' rungs that hold the row
        out += [(f"warp x {v}", S.with_exp_once(RowsConfig(threads=128, group=32, vecs=v), dtype))
                for v in (2, 3, 4, 5, 6, 8) if 32 * v >= vectors]
    for v in (2, 3, 4, 5, 6, 8):
        t = _threads(vectors, v)
        if 64 <= t <= (1024 if v <= 4 else 512):
            out.append((f"rows {t} x {v}", S.with_exp_once(RowsConfig(threads=t, group=t, vecs=v), dtype)))
    for bpr in (1, 2):  # the persistent split kernel, rows on chip in one or two blocks
        split = split_with_blocks(length, rows, dtype, dev, bpr)
        if vectors > 1024 and split is not None and split.blocks_per_row == bpr:
            out.append((f"split b{bpr}", split))
    reserve = SMEM_RESERVED_PER_BLOCK + S._ROW_STATIC_SMEM
    for v in (4, 8):
        for s in (1, 2, 3, 5, 7):
            t = _threads(vectors, v * (s + 1))
            if t < 128 or t > (512 if v == 4 else 256):
                continue
            smem = s * t * v * 16
            for b in (2, 1):
                if smem + reserve <= dev.max_smem_per_block and b * (smem + reserve) <= dev.smem_per_sm:
                    out.append((f"stashed {t} x {v} + {s} / {b}",
                                StashedRowsConfig(threads=t, vecs=v, stash_tiles=s, blocks_per_sm=b)))
                    break
    return _unique(out)


def split_with_blocks(length, rows, dtype, dev, blocks_per_row):
    """choose_rows_split's geometry with ``blocks_per_row`` forced (rows of a wave: what the
    resident grid holds), or None where a chunk would not fit on chip."""
    held = length + _problem(rows, length, dtype).max_row_misalignment
    vs = vector_size(dtype)
    tile = S._SPLIT_THREADS * S._SPLIT_VECS * vs
    resident = dev.sm_count * S._SPLIT_BLOCKS_PER_SM
    max_smem_tiles = S._split_smem_per_block(dev) // (S._SPLIT_THREADS * S._SPLIT_VECS * 16)
    chunk = -(-(-(-held // blocks_per_row)) // vs) * vs
    blocks_per_row = -(-held // chunk)
    tiles = -(-chunk // tile)
    if blocks_per_row > resident or tiles - 1 > max_smem_tiles:
        return None
    rows_per_wave = min(rows, resident // blocks_per_row)
    return SplitConfig(threads=S._SPLIT_THREADS, vecs=S._SPLIT_VECS, blocks_per_sm=S._SPLIT_BLOCKS_PER_SM,
                       blocks_per_row=blocks_per_row, grid=rows_per_wave * blocks_per_row,
                       chunk=chunk, smem_tiles=tiles - 1, streams=False, pipelined=np.dtype(dtype) in S._SPLIT_PIPELINED)


def split_variants(rows, length, dtype, dev):
    out = [("default", S.choose(_problem(rows, length, dtype), dev))]
    best = {}  # waves: (waves x chunk, blocks a row, config)
    for bpr in range(1, dev.sm_count * S._SPLIT_BLOCKS_PER_SM + 1):
        config = split_with_blocks(length, rows, dtype, dev, bpr)
        if config is not None and config.blocks_per_row == bpr:
            waves = -(-rows // (config.grid // bpr))
            if waves not in best or waves * config.chunk < best[waves][0]:
                best[waves] = (waves * config.chunk, bpr, config)
    floor = None
    for waves in sorted(best):
        cost, bpr, config = best[waves]
        if floor is None or cost < 0.99 * floor:
            out.append((f"split b{bpr} w{waves} {cost / 1e3:.0f}K", config))
            floor = cost
    return _unique(out[:9])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="fp16,fp32")
    parser.add_argument("--mib", type=float, default=96.0, help="bytes of x a case, about (not --split)")
    parser.add_argument("--split", action="store_true", help="the split rows' blocks a row (SPLIT_SHAPES)")
    parser.add_argument("--lengths", help="comma-separated row lengths instead of LENGTHS")
    parser.add_argument("--default-only", action="store_true", help="time the default config alone")
    parser.add_argument("only", nargs="?", default="")
    args = parser.parse_args()
    dev = current_device_info()
    make = split_variants if args.split else variants
    if args.default_only:
        make = lambda rows, length, dtype, dev: [("default", S.choose(_problem(rows, length, dtype), dev))]  # noqa: E731
    lengths = tuple(int(n) for n in args.lengths.split(",")) if args.lengths else LENGTHS
    cases = []
    for dname in args.dtypes.split(","):
        itemsize = np.dtype(DTYPES[dname]).itemsize
        shapes = SPLIT_SHAPES if args.split else [(max(1, int(args.mib * 2**20 / (n * itemsize))), n) for n in lengths]
        cases += [(rows, length, dname) for rows, length in shapes if not args.only or args.only in f"{rows}x{length} {dname}"]
    t0 = time.time()
    specs = [c.spec(DTYPES[d], False) for r, n, d in cases for _, c in make(r, n, DTYPES[d], dev)]
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(set(specs))} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}", flush=True)
    for spec, error in failures:
        print(spec.expression, error[:400])
    for rows, length, dname in cases:
        run_case(rows, length, -1, dname, make(rows, length, DTYPES[dname], dev))
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"sweep done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
