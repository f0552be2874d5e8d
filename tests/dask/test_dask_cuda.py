"""cufuse.dask on dask-cuda's LocalCUDACluster: real worker processes, one a GPU, CuPy chunks
made on the workers; softmax rows split across chunks and attention keys split across chunks,
against the float64 reference. Skips without a GPU or without dask-cuda."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import reference

from ..conftest import GPU

dask_cuda = pytest.importorskip("dask_cuda")
distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")


@pytest.fixture(scope="module")
def client():
    if not GPU:
        pytest.skip("no CUDA GPU present")
    with dask_cuda.LocalCUDACluster(threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def _on_workers(host, chunks):
    import cupy

    return da.from_array(host, chunks=chunks).map_blocks(cupy.asarray, dtype=host.dtype,
                                                         meta=cupy.empty((0,) * host.ndim, dtype=host.dtype))


def test_softmax_across_chunks_on_workers(client):
    import cupy

    import cufuse.dask as cd

    rng = np.random.default_rng(11)
    x = rng.standard_normal((300, 5000)).astype(np.float32)
    x[7, 4000] = np.inf
    for chunks in ((100, 5000), (75, (1000, 2500, 1500))):
        for log, oracle in ((False, reference.softmax), (True, reference.log_softmax)):
            got = (cd.log_softmax if log else cd.softmax)(_on_workers(x, chunks), axis=1).compute()
            assert isinstance(got, cupy.ndarray)
            np.testing.assert_allclose(cupy.asnumpy(got), oracle(x.astype(np.float64), 1), rtol=2e-5, atol=1e-5,
                                       equal_nan=True)


def test_attention_keys_across_chunks_on_workers(client):
    import cupy

    import cufuse.dask as cd

    rng = np.random.default_rng(12)
    q = rng.standard_normal((2, 8, 256, 64)).astype(np.float16)
    k = rng.standard_normal((2, 8, 1000, 64)).astype(np.float16)
    v = rng.standard_normal((2, 8, 1000, 64)).astype(np.float16)
    for causal in (False, True):
        out, lse = cd.attention(_on_workers(q, (1, 8, 128, 64)), _on_workers(k, (1, 8, (300, 700), 64)),
                                _on_workers(v, (1, 8, (300, 700), 64)), causal=causal, return_lse=True)
        got, got_lse = out.compute(), lse.compute()
        expected, expected_lse = reference.attention(q, k, v, causal=causal, return_lse=True)
        np.testing.assert_allclose(cupy.asnumpy(got).astype(np.float32), expected, atol=3e-3)
        np.testing.assert_allclose(cupy.asnumpy(got_lse), expected_lse, rtol=1e-3, atol=1e-3)
