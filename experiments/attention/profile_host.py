"""Host cost of one decode call (the 128 MiB grouped-query points measured host-bound): µs a call of
``attention(..., enable_gqa=True, out=out)`` and of ``attention_paged`` on tiny shapes (the GPU
work is a few µs, so back-to-back calls time the host), then cProfile's top functions.

    python experiments/attention/profile_host.py [CALLS]
"""
import cProfile
import pstats
import sys
import time

import cupy
import numpy as np

import cufuse


def per_call_us(fn, calls):
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main(calls):
    rng = cupy.random.default_rng(0)
    bf16 = np.float16
    q = rng.standard_normal((1, 64, 1, 128), dtype=np.float32).astype(bf16)
    k = rng.standard_normal((1, 8, 4096, 128), dtype=np.float32).astype(bf16)
    v = rng.standard_normal((1, 8, 4096, 128), dtype=np.float32).astype(bf16)
    out = cupy.empty_like(q)
    pages = 4096 // 16
    k_pages = rng.standard_normal((pages, 16, 8, 128), dtype=np.float32).astype(bf16).transpose(0, 2, 1, 3)
    v_pages = rng.standard_normal((pages, 16, 8, 128), dtype=np.float32).astype(bf16).transpose(0, 2, 1, 3)
    table = cupy.arange(pages, dtype=np.int32).reshape(1, pages)
    lens = cupy.asarray([4096], dtype=np.int32)
    calls_of = {
        "attention gqa out=": lambda: cufuse.attention(q, k, v, enable_gqa=True, out=out),
        "attention gqa": lambda: cufuse.attention(q, k, v, enable_gqa=True),
        "attention_paged": lambda: cufuse.attention_paged(q, k_pages, v_pages, table, lens),
        "empty launch (cupy add)": lambda: cupy.add(q, q, out=out),
    }
    for name, fn in calls_of.items():
        print(f"{name:28} {per_call_us(fn, calls):8.1f} us a call", flush=True)
    for name in ("attention gqa out=", "attention_paged"):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            calls_of[name]()
        profile.disable()
        print(f"== {name}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
