"""The data behind the tile / split-K / wave model of the Hopper GEMM path:
every TMA tile at several K splits on projection shapes from 128 to 4096 rows, bf16, weight as
PyTorch's (N, K).T, against cuBLASLt's fused epilogue (``torch._addmm_activation``) and the
default selection, in one run.

    python3 experiments/linear/sweep_waves.py OUT.json [--rows 128,512] [--splits 1,2,4] [--gated] [--pingpong]

--gated sweeps fused_gated_linear's TMA tiles instead (silu; N of each weight, so the tiles
cover 2N columns), against one cuBLASLt GEMM on [w_gate | w_up] + torch's silu and multiply.
--pingpong adds the ping-pong kernel's tiles (PINGPONG_TILES) and, at the end, fits their cost
(a k tile, a block) by least squares over the shapes where they fill the grid
(``pingpong.pingpong_time``: busiest block's tiles x k tiles x a + b), against the predicted cost.

Times: medians of CUDA-event batches after ~100 ms of warm-up a config (``time_cuda_budget``),
inputs rotated through several times the L2 (the benchmark's rules). Each row printed: the
shape, torch's time, the default's config and time, the fastest measured config and time.
"""
from __future__ import annotations

import argparse
import json
import math

import cupy
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse._core.dtypes import BFLOAT16
from cufuse.bench.cases import to_torch
from cufuse.bench.timing import rotation_count, time_cuda_budget
from cufuse.ops.linear import select
from cufuse.ops.linear.operands import gated_problem, linear_problem
from cufuse.ops.linear.pingpong import PINGPONG_TILES, GatedPingPongConfig, PingPongConfig, pingpong_tiles_fill
from cufuse.ops.linear.tiling import tile_count
from cufuse.ops.linear.wgmma import GATED_TMA_TILES, TMA_TILES, GatedTmaConfig, TmaConfig

ROWS = (128, 256, 384, 512, 768, 1024, 2048, 4096)
PROJECTIONS = ((4096, 4096), (4096, 11008), (11008, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (5120, 13824))
SPLITS = (1, 2, 3, 4, 6)


def label(config) -> str:
    if isinstance(config, PingPongConfig):
        return f"pingpong {config.tile.bm}x{config.tile.bn} s{config.tile.stages}"
    return f"{config.tile.bm}x{config.tile.bn} s{config.splits}" if hasattr(config, "tile") else type(config).__name__


def fit_pingpong(rows, dev, gated: bool) -> None:
    """Least-squares (a, b) of each ping-pong tile's time = tiles a block x k tiles x a + b (us)."""
    for tile in PINGPONG_TILES:
        name = label((GatedPingPongConfig if gated else PingPongConfig)(tile=tile))
        points = [(math.ceil(tile_count(r["m"], r["columns"], tile) / dev.sm_count) * math.ceil(r["k"] / tile.bk),
                   1e3 * r["times"][name]) for r in rows
                  if name in r["times"] and pingpong_tiles_fill(r["m"], r["columns"], tile, dev)]
        if len(points) < 2:
            print(f"{name}: {len(points)} shapes fill the grid, no fit")
            continue
        units, us = np.array(points).T
        (a, b), *_ = np.linalg.lstsq(np.stack([units, np.ones_like(units)], axis=1), us, rcond=None)
        worst = np.max(np.abs(units * a + b - us) / us)
        print(f"{name}: fitted a = {a:.4f} us a k tile, b = {b:.2f} us (predicted {tile.cost}); "
              f"{len(points)} shapes, worst residual {100 * worst:.1f} %")


def main(argv=None) -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)))
    parser.add_argument("--gated", action="store_true")
    parser.add_argument("--pingpong", action="store_true", help="also the ping-pong tiles, and fit their cost")
    parser.add_argument("--budget-ms", type=float, default=25.0, help="timing budget a config (after its warm-up)")
    args = parser.parse_args(argv)
    rows_m = [int(v) for v in args.rows.split(",")]
    splits_list = [int(v) for v in args.splits.split(",")]
    dev = current_device_info()
    rng = cupy.random.default_rng(0)
    tiles, make = (GATED_TMA_TILES, GatedTmaConfig) if args.gated else (TMA_TILES, TmaConfig)
    rows = []
    for k, n in PROJECTIONS:
        w_full = (rng.standard_normal((n, k), dtype=np.float32) / np.sqrt(k)).astype(BFLOAT16)
        bias = rng.standard_normal(n, dtype=np.float32).astype(BFLOAT16)
        for m in rows_m:
            sets = rotation_count(2 * (m * k + (2 if args.gated else 1) * n * k + m * n))
            xs = [rng.standard_normal((m, k), dtype=np.float32).astype(BFLOAT16) for _ in range(min(sets, 4))]
            # distinct weights (rows permuted) so that the rotation leaves L2 too
            ws = [cupy.ascontiguousarray(w_full[cupy.asarray(np.random.permutation(n))]).T if i else w_full.T
                  for i in range(len(xs))]
            ups = [cupy.ascontiguousarray(w.T[::-1]).T for w in ws] if args.gated else ws  # another (N, K).T weight
            out = cupy.empty((m, n), dtype=BFLOAT16)
            call_args = [(x, w, u) for x, w, u in zip(xs, ws, ups)]
            if args.gated:
                def run(x, w, u, config=None):
                    return cufuse.fused_gated_linear(x, w, u, activation="silu", out=out, config=config)
            else:
                def run(x, w, u, config=None):
                    return cufuse.fused_linear_relu(x, w, bias, out=out, config=config)
            times = {}
            configs = [make(tile=tile, splits=splits) for tile in tiles for splits in splits_list]
            if args.pingpong:
                configs += [(GatedPingPongConfig if args.gated else PingPongConfig)(tile=tile) for tile in PINGPONG_TILES]
            for config in configs:
                try:
                    run(*call_args[0], config=config)
                except ValueError:
                    continue
                times[label(config)] = time_cuda_budget(lambda x, w, u: run(x, w, u, config), call_args,
                                                        budget_ms=args.budget_ms)
            # The default selection's facts of these calls: bf16, (N, K).T weights, TMA-eligible.
            if args.gated:
                facts = gated_problem(m, k, 1, 0, k, n, (1, k), 0, (1, k), 0, None, BFLOAT16, dev, 4, "fused_gated_linear")
            else:
                facts = linear_problem(m, k, 1, 0, k, n, (1, k), 0, 1, None, BFLOAT16, dev)
            default = select.choose(facts, dev)
            default_ms = time_cuda_budget(lambda x, w, u: run(x, w, u), call_args, budget_ms=args.budget_ms)
            tx, tw, tu, tb = [to_torch(x) for x in xs], [to_torch(w) for w in ws], [to_torch(u) for u in ups], \
                to_torch(bias)
            if args.gated:
                both = [torch.cat((w, u), dim=1) for w, u in zip(tw, tu)]

                def peer(x, wu):
                    h = x @ wu
                    return torch.nn.functional.silu(h[:, :n]) * h[:, n:]
                torch_ms = time_cuda_budget(peer, list(zip(tx, both)), budget_ms=args.budget_ms)
                del both
            else:
                torch_ms = time_cuda_budget(lambda x, w: torch._addmm_activation(tb, x, w), list(zip(tx, tw)),
                                            budget_ms=args.budget_ms)
            best = min(times, key=times.get)
            rows.append({"m": m, "k": k, "n": n, "columns": 2 * n if args.gated else n, "torch_ms": torch_ms, "default": label(default),
                         "default_ms": default_ms, "best": best, "best_ms": times[best], "times": times})
            print(f"{m:5d} x {k:5d} x {n:5d}  torch {torch_ms:7.3f}  default {label(default):12s} {default_ms:7.3f} "
                  f"({torch_ms / default_ms:4.2f}x)  best {best:12s} {times[best]:7.3f} ({torch_ms / times[best]:4.2f}x)",
                  flush=True)
            del xs, ws, ups, tx, tw, tu, call_args
            cupy.get_default_memory_pool().free_all_blocks()
            with open(args.out, "w") as handle:
                json.dump({"device": str(dev), "gated": args.gated, "rows": rows}, handle, indent=1)
    if args.pingpong:
        fit_pingpong(rows, dev, args.gated)


if __name__ == "__main__":
    main()
