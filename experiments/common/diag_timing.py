"""Times benchmark cases three ways in one process, interleaved, twice in alternating order.

    python3 experiments/common/diag_timing.py [CASE_KEY_PREFIX ...]

  ev/call  -- one pair of CUDA events around each call, median (the CLI's former
              method);
  ev/batch -- one pair of events around a batch of back-to-back calls (>= 1 ms), / calls
              (``python -m cufuse.bench`` now);
  wall/bat -- perf_counter around the batch ending in a synchronisation, / calls (the rounds
              of ``pytest bench/``);
plus host: the Python time to enqueue one call (no synchronisation). Where host is close
to the GPU time (unfused compositions of small kernels) the per-call figure also charges
the launch latency and jitter; that is why the harnesses now both time batches.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import cupy  # noqa: E402

from cufuse.bench.cases import cases_for  # noqa: E402
from cufuse.bench.runner import input_sets, release_memory  # noqa: E402
from cufuse.bench.timing import time_cuda  # noqa: E402

KEYS = sys.argv[1:] or ["linear 16x8192x8192 float16", "linear 512x4096x4096 float16",
                        "linear 16384x4096x4096 bfloat16", "attention B16 H16 N2048 D128 full bfloat16"]
NAMES = ["cufuse", "cupy unfused", "torch addmm_relu", "torch unfused", "sdpa flash"]


def batch_events(fn, sets, calls, rounds=15):
    stream = cupy.cuda.get_current_stream()
    out = []
    for r in range(rounds):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record(stream)
        for i in range(calls):
            fn(*sets[(r * calls + i) % len(sets)])
        b.record(stream)
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b) / calls)
    return statistics.median(out)


def batch_wall(fn, sets, calls, rounds=15):
    dev = cupy.cuda.Device()
    out = []
    dev.synchronize()
    for r in range(rounds):
        t = time.perf_counter()
        for i in range(calls):
            fn(*sets[(r * calls + i) % len(sets)])
        dev.synchronize()
        out.append((time.perf_counter() - t) * 1e3 / calls)
    return statistics.median(out)


def host_only(fn, sets, calls=5):
    dev = cupy.cuda.Device()
    dev.synchronize()
    t = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    host = (time.perf_counter() - t) * 1e3 / calls
    dev.synchronize()
    return host


def main():
    cases = [c for c in cases_for("all") if any(c.key == k or c.key.startswith(k) for k in KEYS)]
    print(f"{'case':44s} {'impl':18s} {'ev/call':>8s} {'ev/batch':>8s} {'wall/bat':>8s} {'host':>7s}  ms")
    for case in cases:
        sets = input_sets(case)
        for name in NAMES:
            impl = case.impl(name)
            if impl is None or not impl.available():
                continue
            prepared = [impl.prepare(s) for s in sets]
            fn = impl.call
            probe = time_cuda(fn, prepared, warmup=3, repeat=5)
            calls = max(1, math.ceil(1.0 / probe))
            rows = []
            for order in (0, 1):
                methods = [lambda: time_cuda(fn, prepared, warmup=1, repeat=30),
                           lambda: batch_events(fn, prepared, calls),
                           lambda: batch_wall(fn, prepared, calls)]
                res = [None] * 3
                for i in (range(3) if order == 0 else reversed(range(3))):
                    res[i] = methods[i]()
                rows.append(res)
            host = host_only(fn, prepared)
            for res in rows:
                print(f"{case.key:44s} {name:18s} {res[0]:8.4f} {res[1]:8.4f} {res[2]:8.4f} {host:7.4f}", flush=True)
            del prepared
        del sets
        release_memory()


if __name__ == "__main__":
    main()
