"""The Dask path's cost on one GPU (issue 21's benchmarks), a table printed last.

    python3 experiments/dask/measure_dask.py [OUT.json]

1. Rows whole in each chunk: ``cufuse.dask.softmax`` over 4 GiB of float16 in chunks of 256 MiB,
   1 GiB and 2 GiB, data persisted on a dask-cuda worker (LocalCUDACluster, this GPU), against
   one direct ``cufuse.softmax`` of the same 4 GiB in this process: direct time / Dask time.
   The same with Dask's threaded scheduler in this process (no worker process).
2. Rows across chunks: 2048 rows of 1M float16 (4 GiB) in 4 column chunks: two reads and one
   write (``cufuse.traffic.softmax(..., split_rows=True)``), as TB/s and as a fraction of the
   device copy of the same 4 GiB.
Wall-clock medians of 5 runs after a warm-up (each run ends when the result is computed and
the GPU synchronised), so the Dask figures include its scheduling.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import cupy
import dask
import dask.array as da
import numpy as np

import cufuse
import cufuse.dask as cd
from cufuse import traffic

TOTAL = 4 << 30  # bytes of float16 input per case
COLUMNS = 4096


def median_seconds(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def on_gpu(shape, chunks):
    rng = da.random.RandomState(RandomState=cupy.random.RandomState)
    return rng.standard_normal(shape, chunks=chunks, dtype=np.float32).astype(np.float16)


def direct_seconds(shape):
    x = cupy.random.standard_normal(shape, dtype=np.float32).astype(np.float16)

    def run():
        cufuse.softmax(x, axis=1)
        cupy.cuda.runtime.deviceSynchronize()

    seconds = median_seconds(run)
    del x
    cupy.get_default_memory_pool().free_all_blocks()
    return seconds


def copy_tbps(nbytes):
    a = cupy.empty(nbytes // 2, dtype=np.float16)
    b = cupy.empty_like(a)

    def run():
        cupy.copyto(b, a)
        cupy.cuda.runtime.deviceSynchronize()

    return 2 * nbytes / median_seconds(run) / 1e12


def main(out_path=None):
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait

    rows = TOTAL // (2 * COLUMNS)
    direct = direct_seconds((rows, COLUMNS))
    copy = copy_tbps(TOTAL)
    results = {"copy_TBps": copy, "direct_ms": direct * 1e3, "whole_rows": [], "split_rows": None}
    with dask.config.set(scheduler="threads"):
        for chunk_mib in (256, 1024, 2048):
            x = on_gpu((rows, COLUMNS), (chunk_mib * 2**20 // (2 * COLUMNS), COLUMNS)).persist()
            seconds = median_seconds(lambda: (cd.softmax(x, axis=1).persist(), cupy.cuda.runtime.deviceSynchronize()))
            results["whole_rows"].append({"scheduler": "threads", "chunk_MiB": chunk_mib, "ms": seconds * 1e3,
                                          "direct_over_dask": direct / seconds})
            del x
    with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        for chunk_mib in (256, 1024, 2048):
            x = on_gpu((rows, COLUMNS), (chunk_mib * 2**20 // (2 * COLUMNS), COLUMNS)).persist()
            wait(x)

            def run():
                y = cd.softmax(x, axis=1).persist()
                wait(y)

            seconds = median_seconds(run)
            results["whole_rows"].append({"scheduler": "LocalCUDACluster", "chunk_MiB": chunk_mib, "ms": seconds * 1e3,
                                          "direct_over_dask": direct / seconds})
            del x
        length = TOTAL // (2 * 2048)
        x = on_gpu((2048, length), (2048, length // 4)).persist()
        wait(x)

        def split():
            y = cd.softmax(x, axis=1).persist()
            wait(y)

        seconds = median_seconds(split)
        model = traffic.softmax((2048, length), "float16", split_rows=True).min_bytes
        results["split_rows"] = {"shape": [2048, length], "column_chunks": 4, "ms": seconds * 1e3,
                                 "TBps": model / seconds / 1e12, "of_copy": model / seconds / 1e12 / copy}
    if out_path:
        with open(out_path, "w") as handle:
            json.dump(results, handle, indent=1)
    print(f"copy {copy:.2f} TB/s; direct cufuse.softmax of 4 GiB float16 ({rows}x{COLUMNS}): {direct * 1e3:.2f} ms")
    print(f"{'scheduler':18s} {'chunk MiB':>9s} {'ms':>8s} {'direct/dask':>11s}")
    for r in results["whole_rows"]:
        print(f"{r['scheduler']:18s} {r['chunk_MiB']:9d} {r['ms']:8.2f} {r['direct_over_dask']:11.2f}")
    s = results["split_rows"]
    print(f"rows across 4 chunks {s['shape']}: {s['ms']:.2f} ms, {s['TBps']:.2f} TB/s over 2 reads + 1 write "
          f"= {s['of_copy']:.2f} of the copy")


if __name__ == "__main__":
    main(*sys.argv[1:2])
