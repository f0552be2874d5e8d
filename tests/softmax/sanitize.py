"""Every softmax kernel path on a small grid, for compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 1 python tests/softmax/sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python tests/softmax/sanitize.py

Exits non-zero when a result differs from the float64 oracle. Kernels are compiled (or taken
from the disk cache) on first use; run ``python -m cufuse precompile`` first to keep the
sanitized run short. A script, not a test module (pytest does not collect it).
"""
from __future__ import annotations

import sys
from dataclasses import replace

import cupy as cp
import numpy as np

import cufuse
from cufuse import reference
from cufuse._core.device import H200
from cufuse.ops.softmax import select
from cufuse.ops.softmax.cols import ColsVecConfig
from cufuse.ops.softmax.rows import ClusterConfig, StashedRowsConfig
from cufuse.ops.softmax.split import SplitConfig

TOL = {np.dtype(np.float16): (2e-3, 1e-2), np.dtype(np.float32): (3e-5, 2e-5)}


def _cases():
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    yield "sub-warp rows", (37, 8), f16, (1,), None
    yield "sub-warp rows, 16 lanes", (37, 96), f16, (1,), None
    yield "span rows (default)", (37, 5), f16, (1,), None
    yield "span rows, several tiles", (301, 100), f16, (1,), replace(next(c for c in select.span_ladder(f16) if c.capacity_elements >= 100), tile_bytes=64)
    yield "span rows, fp32 default", (1001, 255), f32, (1,), None
    yield "warp rows", (19, 1000), f32, (1,), None
    # Session 20: 2-byte rows past 256 elements on 8 and 16 lanes a row, from misaligned starts.
    yield "wide sub-warp rows, 8 lanes", (37, 257), f16, (1,), None
    yield "wide sub-warp rows, 16 lanes", (21, 777), f16, (1,), None
    yield "block rows, ragged tail", (5, 3001), f32, (1,), None
    yield "block rows, fp16", (3, 20003), f16, (1,), None
    # Session 18: block rows sized to the row (96 x 6 at 4097 elements, from a misaligned start)
    # and stashed rows of 352 threads x 2 tiles.
    yield "block rows, sized to the row", (7, 4097), f16, (1,), None
    yield "stashed rows, sized to the row", (3, 33331), f16, (1,), None
    yield "stashed rows (default)", (3, 30001), f32, (1,), None
    yield "stashed rows (default), fp16", (3, 40001), f16, (1,), None
    # 7 rows on 3 persistent clusters (3, 2, 2 rows each): the partials' parity buffers.
    yield "cluster rows, persistent", (7, 32763), f32, (1,), ClusterConfig(256, 8, 4, 3)
    yield "split rows, registers only", (3, 140001), f32, (1,), None
    # The same launch again: the arrival counters left at zero by the first are reused.
    yield "split rows, scratch reused", (3, 140001), f32, (1,), None
    yield "split rows, several waves", (300, 140001 // 8), f32, (1,), SplitConfig(256, 4, 2, 2, 8, 8752, 2, False)
    # 25000-element chunks = 7 register tiles: 1 in registers, 2 in shared memory, 4 streamed.
    yield "split rows, streamed", (2, 50000), f32, (1,), SplitConfig(256, 4, 2, 2, 4, 25000, 2, True)
    # v5 candidates (config overrides): the pipelined split (streamed: per-tile groups),
    # 16-byte column vectors with and without a cluster.
    yield "split rows, pipelined", (3, 140001), f32, (1,), SplitConfig(256, 4, 2, 2, 4, 70004, 7, True, True)
    yield "split rows, pipelined, streamed", (3, 50000), f16, (1,), SplitConfig(256, 4, 2, 2, 4, 25000, 1, True, True)
    # Session 5: one block a row with shared-memory tiles (ragged: the last tiles partial / empty).
    yield "stashed rows", (5, 40003), f16, (1,), StashedRowsConfig(448, 4, 4, 2)
    yield "stashed rows, wide", (3, 50001), f32, (1,), StashedRowsConfig(512, 4, 7, 1)
    # Stashed clusters (statistics pushed through distributed shared memory): a sweep's c4.
    yield "stashed cluster rows, c4", (3, 200003), f16, (1,), StashedRowsConfig(256, 8, 3, 2, 4)
    yield "columns, 16-byte vectors", (3001, 36), f32, (0,), ColsVecConfig(256, 4, 4, 1)
    yield "columns, 16-byte vectors, cluster", (2049, 40), f16, (0,), ColsVecConfig(256, 4, 4, 8)
    yield "columns (axis 0), no aligned vectors: scalar cluster", (3000, 70), f32, (0,), None
    # The persistent column split (parts exchanging through global memory):
    # several strips a block (refills, the partials' parity), ragged strips; a register tile
    # and a middle axis (outer > 1).
    split = select.choose_cols_split
    yield "columns split, several strips a block", (1031, 200), f16, (0,), replace(split(1031, 200, f16, H200), strips_per_wave=1)
    yield "columns split, middle axis", (3, 3001, 40), f32, (1,), replace(
        split(3001, 120, f32, H200), blocks_per_strip=6, part=512, smem_tiles=4
    )
    yield "columns split, register tile", (3, 3001, 40), f32, (1,), replace(
        select.cols_split_config(3001, 120, f32, H200, (256, 8, 8, True, 2)), blocks_per_strip=6, part=512, smem_tiles=1
    )
    # Defaults: the column split; float32 columns longer than it holds (16-byte vectors, 8 lanes,
    # cluster 8); float32 block rows.
    yield "columns, default (column split)", (2100, 64), f32, (0,), None
    yield "columns past the column split, 16-byte vectors, default", (202753, 8), f32, (0,), None
    yield "block rows, fp32 default", (3, 9001), f32, (1,), None
    yield "columns, middle axis", (3, 501, 40), f16, (1,), None
    # Session 20: short columns off the vector, a thread a shifted vector (axis 0; a middle axis
    # whose outer indices end inside warps; an inner axis of one vector and a partial one), and
    # 9 to 16 rows a thread a column.
    yield "short columns, shifted", (6, 3001), f16, (0,), None
    yield "short columns, shifted, middle axis", (3, 5, 701), f32, (1,), None
    yield "short columns, shifted, narrow inner axis", (40, 7, 13), f16, (1,), None
    yield "short columns off the vector, 13 rows", (13, 1001), f16, (0,), None
    yield "strided rows", "strided", f32, (1,), None
    yield "copy path (axes 0, 2)", (6, 7, 300), f32, (0, 2), None


def main() -> int:
    rng = np.random.default_rng(1234)
    failures = 0
    for name, shape, dtype, axes, config in _cases():
        if shape == "strided":
            x = cp.asarray((rng.standard_normal((33, 4100)) * 3).astype(dtype))[:, 1::2]
        else:
            host = (rng.standard_normal(shape) * 3).astype(dtype)
            host.reshape(-1)[::97] = -np.inf  # a few -inf entries, and one NaN row below
            host.reshape(host.shape[0], -1)[0, 0] = np.nan
            x = cp.asarray(host)
        for log in (False, True):
            fn = cufuse.log_softmax if log else cufuse.softmax
            out = cp.empty(x.shape, dtype=x.dtype)
            out.view(cp.uint8).fill(0xFF)
            fn(x, axis=axes, out=out, config=config)
            expected = (reference.log_softmax if log else reference.softmax)(cp.asnumpy(x).astype(np.float64), axes)
            rtol, log_atol = TOL[x.dtype]
            try:
                np.testing.assert_allclose(
                    cp.asnumpy(out).astype(np.float64), expected, rtol=rtol, atol=log_atol if log else 1e-6, equal_nan=True
                )
                print(f"ok    {name} {'log_softmax' if log else 'softmax'}")
            except AssertionError as error:
                failures += 1
                print(f"FAIL  {name} {'log_softmax' if log else 'softmax'}: {error}")
    cp.cuda.Device().synchronize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
