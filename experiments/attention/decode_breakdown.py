"""Where a decode call's time goes: each launch of its plan (forward, merge) timed alone with
CUDA events, for the default selection and for forced key splits / ring depths (the grouped-query
single-KV-head, long-cache points: 1M keys at 2.2-2.9 TB/s against 3.5-4.0 at 1024 heads).

    python experiments/attention/decode_breakdown.py [OUT.json]

Rates count K and V once (bytes of the forward); the merge's share is its time over the sum.
Last, the mma.sync prefill tiles (the A100 defaults, the H200's fallback) on three full
attention shapes, in TFLOP/s (4 B H N^2 D), since they share the K/V loader.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys

import cupy
import numpy as np

from cufuse._core.device import device_info
from cufuse._core.plans import BoundPlan
from cufuse.ops.attention.plan import plan_attention
from cufuse.ops.attention.select import prefill_tile, choose_by_sizes, split_keys

# (G, Nq, D, B, Hkv, Nk)
SHAPES = (
    (1, 1, 128, 1, 1, 1 << 20),
    (8, 1, 128, 1, 1, 1 << 20),
    (16, 1, 128, 1, 1, 1 << 20),
    (8, 1, 128, 1, 8, 32768),
    (8, 1, 128, 128, 8, 1024),
    (1, 1, 128, 128, 8, 1024),
    (16, 8, 128, 4, 8, 4096),
)

PREFILL = ((64, 16, 16, 2048), (128, 16, 16, 2048), (128, 4, 16, 8192))  # (D, B, H, N)


def time_launch(launch, arrays, temps, repeat=20):
    stream = cupy.cuda.get_current_stream()
    for _ in range(3):
        launch(arrays, (), temps, stream)
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        launch(arrays, (), temps, stream)
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def variants(default):
    yield "default", default
    if hasattr(default, "key_warps"):
        for splits in (132, 264, 1024):
            yield f"splits {splits}", splits
        for stages in (2, 4):
            yield f"stages {stages}", dataclasses.replace(default, stages=stages)
    else:
        for splits in (132, 264, 1024):
            yield f"splits {splits}", splits


def with_splits(tile, splits, n_k):
    granule = tile.stage_keys if hasattr(tile, "stage_keys") else tile.group_keys
    keys = -(-(-(-n_k // splits)) // granule) * granule
    splits = -(-n_k // keys)
    return dataclasses.replace(tile, splits=splits, keys_per_split=keys if splits > 1 else 0)


def main(argv):
    dev = device_info(0)
    dtype = np.dtype("float16")
    rng = np.random.default_rng(0)
    rows = []
    for group, n_q, d, b, hkv, n_k in SHAPES:
        q = cupy.asarray(rng.standard_normal((b, hkv, group, n_q, d), dtype=np.float32)).astype(dtype)
        k = cupy.asarray(rng.standard_normal((b, hkv, 1, n_k, d), dtype=np.float32)).astype(dtype)
        v = cupy.asarray(rng.standard_normal((b, hkv, 1, n_k, d), dtype=np.float32)).astype(dtype)
        out = cupy.empty((b, hkv, group, n_q, d), dtype=dtype)
        strides = [tuple(s // 2 for s in a.strides) for a in (q, k, v)]
        default = choose_by_sizes(n_q, n_k, d, d, b * hkv * group, dtype, dev, kv_rows_16b=True, group=group)
        kv_bytes = 2 * k.nbytes
        for name, cfg in variants(default):
            if isinstance(cfg, int):
                cfg = with_splits(default, cfg, n_k)
            plan = plan_attention(q.shape, strides[0], k.shape, strides[1], v.shape, strides[2], dtype, False,
                                  1 / np.sqrt(d), False, (True, True, True), dev, cfg)
            bound = BoundPlan(plan, dev)
            temps = tuple(cupy.empty(shape, dtype=dt) for dt, shape in plan.temporaries)
            arrays = {"q": q, "k": k, "v": v, "out": out, "lse": None}
            ms = [time_launch(launch, arrays, temps) for launch in bound.launches]
            total = sum(ms)
            row = dict(shape=f"G{group} Nq{n_q} D{d} B{b} Hkv{hkv} Nk{n_k}", variant=name,
                       kernel=type(cfg).__name__, splits=cfg.splits, grid=plan.launches[0].grid[0],
                       forward_us=ms[0] * 1e3, merge_us=(ms[1] * 1e3 if len(ms) > 1 else 0.0),
                       forward_tbps=kv_bytes / ms[0] / 1e9, total_tbps=kv_bytes / total / 1e9)
            rows.append(row)
            print(row, flush=True)
        del q, k, v, out
        cupy.get_default_memory_pool().free_all_blocks()
    prefill_rows = []
    for d, b, h, n in PREFILL:
        q, k, v = (cupy.asarray(rng.standard_normal((b, h, n, d), dtype=np.float32)).astype(dtype) for _ in range(3))
        out = cupy.empty_like(q)
        strides = tuple(s // 2 for s in q.strides)
        tile = split_keys(prefill_tile(d, dev, n, n, False), n, n, b * h, dev)
        plan = plan_attention(q.shape, strides, k.shape, strides, v.shape, strides, dtype, False, 1 / np.sqrt(d),
                              False, (True, True, True), dev, tile)
        bound = BoundPlan(plan, dev)
        temps = tuple(cupy.empty(shape, dtype=dt) for dt, shape in plan.temporaries)
        ms = sum(time_launch(launch, {"q": q, "k": k, "v": v, "out": out, "lse": None}, temps)
                 for launch in bound.launches)
        prefill_rows.append(dict(shape=f"prefill D{d} B{b} H{h} N{n}", tile=str(tile), us=ms * 1e3,
                                 tflops=4 * b * h * n * n * d / ms / 1e9))
        print(prefill_rows[-1], flush=True)
    src = cupy.empty(1 << 29, dtype=np.uint8)
    dst = cupy.empty_like(src)
    copy_ms = time_launch(lambda *a: dst.__setitem__(Ellipsis, src), {}, ())
    print(f"copy 512 MiB: {2 * src.nbytes / copy_ms / 1e9:.2f} TB/s (read + write)")
    print(f"{'shape':34} {'variant':12} {'grid':>6} {'fwd us':>8} {'merge us':>8} {'fwd TB/s':>8} {'all TB/s':>8}")
    for r in rows:
        print(f"{r['shape']:34} {r['variant']:12} {r['grid']:>6} {r['forward_us']:8.1f} {r['merge_us']:8.1f} "
              f"{r['forward_tbps']:8.2f} {r['total_tbps']:8.2f}")
    for r in prefill_rows:
        print(f"{r['shape']:34} mma tile {r['us']:8.1f} us {r['tflops']:6.1f} TFLOP/s")
    if argv:
        with open(argv[0], "w") as f:
            json.dump({"decode": rows, "prefill": prefill_rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
