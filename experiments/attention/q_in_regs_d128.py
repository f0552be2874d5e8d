"""The D128 8-warp 128-key mma prefill tile with Q in registers (255 registers: spills since the
window's mask joined its loop) against Q from shared memory (the default), on
the calls that take it on the H200: small grids that split their keys, and strided operands.

    python experiments/attention/q_in_regs_d128.py [--budget-ms 20]
"""
from __future__ import annotations

import argparse
import dataclasses

import cupy as cp
import ml_dtypes
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse.bench.timing import time_cuda_budget
from cufuse.ops.attention import select


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-ms", type=float, default=20.0)
    args = parser.parse_args()
    dev = current_device_info()
    dtype = np.dtype(ml_dtypes.bfloat16)
    rng = cp.random.default_rng(0)
    print(f"{'case':34} {'Q regs ms':>9} {'Q smem ms':>9} {'regs/smem':>9}")
    for batch, heads, n, causal, strided in ((1, 32, 4096, True, False), (1, 32, 8192, False, False),
                                              (2, 16, 4096, True, True), (4, 16, 2048, False, True)):
        shape = (batch, n, heads, 128) if strided else (batch, heads, n, 128)
        q, k, v = (rng.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in range(3))
        if strided:  # (B, N, H, D) storage read as (B, H, N, D)
            q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
        tile = select.prefill_tiles(128, dev)[0]
        tile = select.split_keys(tile, n, n, batch * heads, dev)
        times = []
        for q_in_regs in (True, False):
            config = dataclasses.replace(tile, q_in_regs=q_in_regs)
            times.append(time_cuda_budget(lambda: cufuse.attention(q, k, v, causal=causal, config=config), [()],
                                          budget_ms=args.budget_ms))
        label = f"B{batch} H{heads} N{n} {'causal' if causal else 'full'}{' strided' if strided else ''} s{tile.splits}"
        print(f"{label:34} {times[0]:9.3f} {times[1]:9.3f} {times[0] / times[1]:9.2f}", flush=True)


if __name__ == "__main__":
    main()
