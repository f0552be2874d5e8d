"""cufuse over Dask arrays on every GPU of this machine (dask-cuda: one worker a GPU).

    pip install -e ".[dask]"                       # CPU, from a clone of cufuse
    pip install -e ".[cuda13,dask,dask-cuda]"      # GPUs (dask-cuda's LocalCUDACluster)
    python examples/dask_softmax_attention.py

Makes its data on the workers (CuPy chunks), runs a softmax whose rows span chunks and an
attention whose keys span chunks, and checks both against cufuse's float64 NumPy path on a
sample. Without a GPU it runs the same on NumPy chunks with Dask's threaded scheduler.
"""
from __future__ import annotations

import numpy as np

import cufuse
import cufuse.dask as cd  # first: without Dask it says how to install the extra

import dask.array as da  # noqa: E402


def main():
    try:
        import cupy
        from dask_cuda import LocalCUDACluster
        from distributed import Client

        gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        gpu = False
    if not gpu:
        return run(np.random.RandomState)
    with LocalCUDACluster(dashboard_address=None) as cluster, Client(cluster) as client:
        print(f"{len(client.scheduler_info()['workers'])} GPU workers")
        return run(cupy.random.RandomState)


def run(random_state):
    rng = da.random.RandomState(RandomState=random_state)
    x = rng.standard_normal((4096, 65536), chunks=(1024, 16384)).astype(np.float32)  # rows across 4 chunks
    p = cd.softmax(x, axis=1)
    q = rng.standard_normal((2, 8, 512, 64), chunks=(1, 8, 512, 64)).astype(np.float16)
    kv = rng.standard_normal((2, 8, 8192, 64), chunks=(1, 8, 2048, 64)).astype(np.float16)
    o = cd.attention(q, kv, kv, causal=True)  # keys across 4 chunks
    host = _to_host(x[:4].compute())
    np.testing.assert_allclose(_to_host(p[:4].compute()), cufuse.softmax(host.astype(np.float64), axis=1), rtol=1e-4,
                               atol=1e-9)
    expected = cufuse.attention(*(_to_host(a[:1].compute()).astype(np.float64) for a in (q, kv, kv)), causal=True)
    np.testing.assert_allclose(_to_host(o[:1].compute()).astype(np.float64), expected, atol=5e-3)
    print(f"softmax {p.shape} in {p.npartitions} chunks and attention {o.shape} over {kv.numblocks[2]} key chunks: "
          "both match the float64 reference")


def _to_host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


if __name__ == "__main__":
    main()
