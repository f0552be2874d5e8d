"""The data behind the tile / split-K / wave model of the Hopper GEMM path (issue 23, item 1):
every TMA tile at several K splits on projection shapes from 128 to 4096 rows, bf16, weight as
PyTorch's (N, K).T, against cuBLASLt's fused epilogue (``torch._addmm_activation``) and the
default selection, in one run.

    python3 experiments/linear/sweep_waves.py OUT.json

Times: medians of CUDA-event batches, inputs rotated through several times the L2 (the
benchmark's rules). Each row of the table printed last: the shape, torch's time, the
default's config and time, the fastest measured config and time.
"""
from __future__ import annotations

import json
import sys

import cupy
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse._core.dtypes import BFLOAT16
from cufuse.bench.cases import to_torch
from cufuse.bench.timing import rotation_count, time_cuda
from cufuse.ops.linear import select
from cufuse.ops.linear.wgmma import TMA_TILES, TmaConfig

ROWS = (128, 256, 384, 512, 768, 1024, 2048, 4096)
PROJECTIONS = ((4096, 4096), (4096, 11008), (11008, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (5120, 13824))
SPLITS = (1, 2, 3, 4, 6)


def label(config) -> str:
    return f"{config.tile.bm}x{config.tile.bn} s{config.splits}" if hasattr(config, "tile") else type(config).__name__


def main(path: str) -> None:
    import torch

    dev = current_device_info()
    rng = cupy.random.default_rng(0)
    rows = []
    for k, n in PROJECTIONS:
        w_full = (rng.standard_normal((n, k), dtype=np.float32) / np.sqrt(k)).astype(BFLOAT16)
        bias = rng.standard_normal(n, dtype=np.float32).astype(BFLOAT16)
        for m in ROWS:
            sets = rotation_count(2 * (m * k + n * k + m * n))
            xs = [rng.standard_normal((m, k), dtype=np.float32).astype(BFLOAT16) for _ in range(min(sets, 4))]
            # distinct weights (rows permuted) so that the rotation leaves L2 too
            ws = [cupy.ascontiguousarray(w_full[cupy.asarray(np.random.permutation(n))]).T if i else w_full.T
                  for i in range(len(xs))]
            out = cupy.empty((m, n), dtype=BFLOAT16)
            args = [(x, w) for x, w in zip(xs, ws)]
            times = {}
            for tile in TMA_TILES:
                for splits in SPLITS:
                    config = TmaConfig(tile, splits)
                    try:
                        cufuse.fused_linear_relu(xs[0], ws[0], bias, out=out, config=config)
                    except ValueError:
                        continue
                    times[label(config)] = time_cuda(
                        lambda x, w: cufuse.fused_linear_relu(x, w, bias, out=out, config=config), args, repeat=15)
            default = select._choose(m, n, k, np.dtype(BFLOAT16), True, dev, True, True)
            default_ms = time_cuda(lambda x, w: cufuse.fused_linear_relu(x, w, bias, out=out), args, repeat=15)
            tx, tw, tb = [to_torch(x) for x in xs], [to_torch(w) for w in ws], to_torch(bias)
            targs = list(zip(tx, tw))
            torch_ms = time_cuda(lambda x, w: torch._addmm_activation(tb, x, w), targs, repeat=15)
            best = min(times, key=times.get)
            rows.append({"m": m, "k": k, "n": n, "torch_ms": torch_ms, "default": label(default),
                         "default_ms": default_ms, "best": best, "best_ms": times[best], "times": times})
            print(f"{m:5d} x {k:5d} x {n:5d}  torch {torch_ms:7.3f}  default {label(default):12s} {default_ms:7.3f} "
                  f"({torch_ms / default_ms:4.2f}x)  best {best:12s} {times[best]:7.3f} ({torch_ms / times[best]:4.2f}x)",
                  flush=True)
            del xs, ws, tx, tw, args, targs
            cupy.get_default_memory_pool().free_all_blocks()
    with open(path, "w") as handle:
        json.dump({"device": dev.name if hasattr(dev, "name") else str(dev), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
