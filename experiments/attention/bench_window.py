"""The sliding-window and soft-capping classes on the GPU: windowed prefill against full
attention of the same shape, in TFLOP/s counting only the pairs a row sees (4 x pairs x D), the
softcap's cost, and windowed decode against unwindowed decode over the same keys. Prints one
line a point, then the class minima (windowed TFLOP/s / full TFLOP/s; the target is 0.9).

    python experiments/attention/bench_window.py [--budget-ms 20] [--quick] [--json OUT]
"""
from __future__ import annotations

import argparse
import collections
import json

import cupy as cp
import ml_dtypes
import numpy as np

import cufuse
from cufuse.bench.timing import time_cuda_budget
from cufuse.ops.attention.select import mean_visible_keys

HEADS = 16
TOKENS = 65536  # B x N a point (B = TOKENS / N)


def pairs(n_q, n_k, causal, window) -> float:
    """(query, key) pairs the rows see, a head."""
    sides = tuple(-1 if s is None else s for s in window) if window else (-1, -1)
    return mean_visible_keys(n_q, n_k, causal, sides) * n_q


def inputs(batch, n, d, dtype, seed=0):
    rng = cp.random.default_rng(seed)
    return [rng.standard_normal((batch, HEADS, n, d), dtype=cp.float32).astype(dtype) for _ in range(3)]


def time_call(fn, arrays, budget_ms) -> float:
    out = cp.empty_like(arrays[0])
    return time_cuda_budget(lambda q, k, v: fn(q, k, v, out), [tuple(arrays)], budget_ms=budget_ms)


def prefill_points(quick):
    ns = (4096,) if quick else (4096, 16384)
    for d in (64, 128):
        for n in ns:
            for causal in (True, False):
                for width in (256, 1024, 4096):
                    if width < n:
                        yield d, n, causal, (width, 0 if causal else width)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    dtype = np.dtype(ml_dtypes.bfloat16)
    rows, full_cache = [], {}
    for d, n, causal, window in prefill_points(args.quick):
        batch = TOKENS // n
        arrays = inputs(batch, n, d, dtype)
        key = (d, n, causal)
        if key not in full_cache:
            ms = time_call(lambda q, k, v, o: cufuse.attention(q, k, v, causal=causal, out=o), arrays, args.budget_ms)
            full_cache[key] = 4 * batch * HEADS * pairs(n, n, causal, None) * d / ms / 1e9
        ms = time_call(lambda q, k, v, o: cufuse.attention(q, k, v, causal=causal, window=window, out=o), arrays,
                       args.budget_ms)
        tflops = 4 * batch * HEADS * pairs(n, n, causal, window) * d / ms / 1e9
        ratio = tflops / full_cache[key]
        rows.append({"class": f"window {window[0]}", "d": d, "n": n, "causal": causal, "window": window, "ms": ms,
                     "tflops": tflops, "full_tflops": full_cache[key], "ratio": ratio})
        print(f"D{d} N{n} B{batch} {'causal' if causal else 'full'} window {window}: {ms:.3f} ms, {tflops:.0f} "
              f"TFLOP/s, full {full_cache[key]:.0f}, ratio {ratio:.2f}", flush=True)

    for d in (64, 128):  # softcap: the same call with and without
        n, batch = 4096, TOKENS // 4096
        arrays = inputs(batch, n, d, dtype)
        times = [time_call(lambda q, k, v, o, c=c: cufuse.attention(q, k, v, causal=True, softcap=c, out=o), arrays,
                           args.budget_ms) for c in (None, 30.0)]
        rows.append({"class": "softcap", "d": d, "n": n, "causal": True, "ms": times[1], "ratio": times[0] / times[1]})
        print(f"D{d} N{n} causal softcap 30: {times[1]:.3f} ms against {times[0]:.3f} ms, ratio "
              f"{times[0] / times[1]:.2f}", flush=True)

    for n_k, width in ((65536, 4096), (262144, 4096), (131072, 1024)):  # decode: window against its keys
        batch, d = 8, 128
        q = inputs(batch, 1, d, dtype)[0]
        k, v = inputs(batch, n_k, d, dtype, seed=1)[:2]
        ks, vs = k[:, :, -(width + 1):], v[:, :, -(width + 1):]
        windowed = time_call(lambda q_, k_, v_, o: cufuse.attention(q_, k_, v_, causal=True, window=(width, 0), out=o),
                             [q, k, v], args.budget_ms)
        dense = time_call(lambda q_, k_, v_, o: cufuse.attention(q_, k_, v_, causal=True, out=o),
                          [q, cp.ascontiguousarray(ks), cp.ascontiguousarray(vs)], args.budget_ms)
        rows.append({"class": "decode window", "d": d, "n": n_k, "window": (width, 0), "ms": windowed,
                     "ratio": dense / windowed})
        print(f"decode B{batch} Nk{n_k} window {width}: {windowed * 1e3:.1f} us against {dense * 1e3:.1f} us over "
              f"its {width + 1} keys alone, ratio {dense / windowed:.2f}", flush=True)

    minima = collections.defaultdict(lambda: float("inf"))
    for row in rows:
        minima[row["class"]] = min(minima[row["class"]], row["ratio"])
    print(f"{'class':16} {'min ratio':>9}")
    for name, value in minima.items():
        print(f"{name:16} {value:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
