"""The Dask path's cost on one GPU, a table printed last.

    python3 experiments/dask/measure_dask.py [OUT.json] [threads|LocalCUDACluster ...]

1. Rows whole in each chunk: ``cufuse.dask.softmax`` over 4 and 32 GiB of float16 in chunks of
   256 MiB and 2 GiB, data persisted first, with Dask's threaded scheduler in this process and
   on a dask-cuda worker (LocalCUDACluster, this GPU), against one direct ``cufuse.softmax`` of
   the same bytes in this process: direct time / Dask time. Also the empty graph's round trip
   (``persist`` of an array already computed), the scheduler's fixed cost.
2. Rows across chunks: 2048 rows of float16 (4 and 32 GiB) in 4 column chunks: two reads and
   one write (``cufuse.traffic.softmax(..., split_rows=True)``), as TB/s and as a fraction of
   the device copy, on both schedulers.
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

SIZES = (4 << 30, 32 << 30)  # bytes of float16 input per case
CHUNKS_MIB = (256, 2048)
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
    # an eighth of the rows drawn, then tiled: a 32 GiB float16 array without 64 GiB of float32
    x = cupy.tile(cupy.random.standard_normal((shape[0] // 8, shape[1]), dtype=np.float32).astype(np.float16), (8, 1))

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


def _timed(run_dask, scheduler):
    """Median seconds of ``run_dask`` (it computes and waits) on ``scheduler``."""
    if scheduler == "threads":
        with dask.config.set(scheduler="threads"):
            return median_seconds(lambda: (run_dask(), cupy.cuda.runtime.deviceSynchronize()))
    return median_seconds(run_dask)


def _persisted(shape, chunks, scheduler):
    from distributed import wait

    x = on_gpu(shape, chunks)
    if scheduler == "threads":
        with dask.config.set(scheduler="threads"):
            return x.persist()
    x = x.persist()
    wait(x)
    return x


def _softmax_run(x, scheduler):
    from distributed import wait

    def run():
        y = cd.softmax(x, axis=1).persist()
        if scheduler != "threads":
            wait(y)

    return run


def _identity_run(x, scheduler):
    """The same graph shape with no GPU work (each task returns its block): Dask's own cost,
    the floor under any function mapped over these chunks."""
    from distributed import wait

    def run():
        y = x.map_blocks(_identity, dtype=x.dtype, meta=x._meta).persist()
        if scheduler != "threads":
            wait(y)

    return run


def _identity(block):
    return block


def call_overhead_us():
    """Host time of one cufuse.softmax call on a small array (validation, plan lookup, launch)."""
    x = cupy.ones((8, COLUMNS), dtype=np.float16)
    cufuse.softmax(x, axis=1)
    start = time.perf_counter()
    for _ in range(1000):
        cufuse.softmax(x, axis=1)
    seconds = (time.perf_counter() - start) / 1000
    cupy.cuda.runtime.deviceSynchronize()
    return seconds * 1e6


def main(out_path=None, *schedulers):
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    copy = copy_tbps(4 << 30)
    direct = {size: direct_seconds((size // (2 * COLUMNS), COLUMNS)) for size in SIZES}
    results = {"copy_TBps": copy, "direct_ms": {str(k): v * 1e3 for k, v in direct.items()},
               "call_overhead_us": call_overhead_us(), "rows": []}
    with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        for scheduler in schedulers or ("threads", "LocalCUDACluster"):
            for size in SIZES:
                rows = size // (2 * COLUMNS)
                for chunk_mib in CHUNKS_MIB:
                    x = _persisted((rows, COLUMNS), (chunk_mib * 2**20 // (2 * COLUMNS), COLUMNS), scheduler)
                    seconds = _timed(_softmax_run(x, scheduler), scheduler)
                    floor = _timed(_identity_run(x, scheduler), scheduler)
                    results["rows"].append({"case": "whole rows", "scheduler": scheduler, "GiB": size >> 30,
                                            "chunk_MiB": chunk_mib, "ms": seconds * 1e3, "floor_ms": floor * 1e3,
                                            "direct_over_dask": direct[size] / seconds,
                                            "bound": direct[size] / max(direct[size], floor)})
                    del x
                length = size // (2 * 2048)
                x = _persisted((2048, length), (2048, length // 4), scheduler)
                seconds = _timed(_softmax_run(x, scheduler), scheduler)
                model = traffic.softmax((2048, length), "float16", split_rows=True).min_bytes
                results["rows"].append({"case": "rows across 4 chunks", "scheduler": scheduler, "GiB": size >> 30,
                                        "chunk_MiB": size >> 22, "ms": seconds * 1e3, "TBps": model / seconds / 1e12,
                                        "of_copy": model / seconds / 1e12 / copy})
                del x
    if out_path:
        with open(out_path, "w") as handle:
            json.dump(results, handle, indent=1)
    print(f"copy {copy:.2f} TB/s; direct cufuse.softmax of float16: "
          + ", ".join(f"{k >> 30} GiB {v * 1e3:.2f} ms" for k, v in direct.items()))
    print(f"one cufuse.softmax call costs the host {results['call_overhead_us']:.1f} us")
    print("floor = the same graph mapping an identity (Dask's own cost); bound = direct / max(direct, floor)")
    print(f"{'case':22s} {'scheduler':17s} {'GiB':>4s} {'chunk MiB':>9s} {'ms':>8s} {'floor ms':>8s} "
          f"{'direct/dask':>11s} {'bound':>5s} {'of copy':>7s}")
    for r in results["rows"]:
        ratio = f"{r['direct_over_dask']:11.2f}" if "direct_over_dask" in r else " " * 11
        floor = f"{r['floor_ms']:8.2f}" if "floor_ms" in r else " " * 8
        bound = f"{r['bound']:5.2f}" if "bound" in r else " " * 5
        of_copy = f"{r['of_copy']:7.2f}" if "of_copy" in r else ""
        print(f"{r['case']:22s} {r['scheduler']:17s} {r['GiB']:4d} {r['chunk_MiB']:9d} {r['ms']:8.2f} {floor} "
              f"{ratio} {bound} {of_copy}")


if __name__ == "__main__":
    main(*sys.argv[1:])
