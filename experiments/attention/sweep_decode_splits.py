"""Key splits of the packed decode tile on the 128 MiB grouped-query points (GPU-bound
since the driver launch path): whole calls (forward + merge) back to back, CUDA events around
200 calls, for a range of splits per KV head; the default's first.

    python experiments/attention/sweep_decode_splits.py

The split counts it measured are in docs/attention.md; the last variant of each
shape, a 2-stage ring at 3 blocks an SM, was added after it and has not run.
"""
import dataclasses

import cupy
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse.ops.attention.select import choose_by_sizes, split_packed_decode_keys

SHAPES = ((8, 1, 8, 32768), (4, 1, 8, 32768), (16, 1, 8, 32768), (8, 8, 8, 4096), (8, 1, 8, 65536))  # G, B, Hkv, Nk


def per_call_us(fn, calls=200):
    for _ in range(5):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / calls * 1e3


def main():
    dev = current_device_info()
    rng = cupy.random.default_rng(0)
    for group, b, hkv, n_k in SHAPES:
        d = 64 if n_k == 65536 else 128
        q = rng.standard_normal((b, hkv * group, 1, d), dtype=np.float32).astype(np.float16)
        k, v = (rng.standard_normal((b, hkv, n_k, d), dtype=np.float32).astype(np.float16) for _ in range(2))
        out = cupy.empty_like(q)
        default = choose_by_sizes(1, n_k, d, d, b * hkv * group, np.float16, dev, True, False, True, group)
        tiles = [("default", None)] + [
            (f"{s} splits", split_packed_decode_keys(dataclasses.replace(default, splits=1), group, n_k, b * hkv, dev, s))
            for s in (8, 16, 24, 33, 48, 64, 96)]
        # 3 blocks an SM: a 2-stage ring (74 KB) and registers capped at 168 (16 B of spill
        # locally, sm_90a): more warps an SM against fewer bytes in flight a block (not yet run)
        three = dataclasses.replace(default, splits=1, keys_per_split=0, stages=2, min_blocks=3)
        tiles.append(("2st x 3/SM", split_packed_decode_keys(three, group, n_k, b * hkv, dev)))
        for name, cfg in tiles:
            us = per_call_us(lambda: cufuse.attention(q, k, v, enable_gqa=True, out=out, config=cfg))
            splits = (cfg or default).splits
            print(f"G{group} B{b} Hkv{hkv} Nk{n_k} D{d} {name:10} (splits {splits:3}, blocks {splits * b * hkv:5}): "
                  f"{us:7.1f} us {2 * k.nbytes / us / 1e6:5.2f} TB/s", flush=True)
        del q, k, v, out
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
