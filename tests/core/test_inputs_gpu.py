"""On the GPU: PyTorch tensors, JAX arrays and Numba device arrays taken zero-copy (inputs
and ``out``), the 4-D grouped-query layout, SciPy's dtype and 0-d rules, a broadcast bias,
empty inputs as on the NumPy path, and arrays on a second GPU (skipped with one)."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse import reference
from cufuse._core import validate

from ..conftest import GPU

BF16 = np.dtype("bfloat16")


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    return torch


def test_torch_tensors_in_and_out_without_a_copy(cp):
    torch = _torch()
    x = torch.randn(64, 1000, device="cuda", dtype=torch.float16)
    view = validate.as_arrays("softmax", x=x)[1]["x"]
    assert view.data.ptr == x.data_ptr() and view.dtype == np.float16 and view.shape == (64, 1000)
    result = cufuse.softmax(x, axis=-1)
    assert isinstance(result, cp.ndarray)
    torch.cuda.synchronize()
    expected = torch.softmax(x.float(), dim=-1)
    np.testing.assert_allclose(cp.asnumpy(result).astype(np.float32), expected.cpu().numpy(), rtol=2e-3, atol=2e-5)
    out = torch.full((64, 1000), float("nan"), device="cuda", dtype=torch.float16)
    cufuse.log_softmax(x, axis=-1, out=out)  # written in place through CuPy's view
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_allclose(out.float().cpu().numpy(), torch.log_softmax(x.float(), -1).cpu().numpy(),
                               rtol=2e-3, atol=3e-3)
    w = torch.randn(256, 1000, device="cuda", dtype=torch.bfloat16)  # PyTorch's (N, K) Linear weight
    xb = x.to(torch.bfloat16)
    h = cufuse.fused_linear_relu(xb, w.T, torch.zeros(256, device="cuda", dtype=torch.bfloat16))
    expected = torch.relu(xb.float() @ w.float().T).cpu().numpy()
    np.testing.assert_allclose(cp.asnumpy(h.astype(cp.float32)), expected, rtol=2e-2, atol=2e-2)
    q = torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.float16)
    kv = torch.randn(2, 2, 256, 64, device="cuda", dtype=torch.float16)
    got = cufuse.attention(q, kv, kv, causal=True, enable_gqa=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=False, enable_gqa=True,
                                                            attn_mask=_bottom_right(torch, 128, 256))
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float32), sdpa.float().cpu().numpy(), rtol=1e-2, atol=2e-3)


def _bottom_right(torch, n_q, n_k):
    return torch.ones(n_q, n_k, device="cuda", dtype=torch.bool).tril(diagonal=n_k - n_q)


def test_jax_arrays_without_a_copy(cp):
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX without a GPU")
    x = jax.device_put(np.random.default_rng(0).standard_normal((32, 777)).astype(np.float32), jax.devices("gpu")[0])
    x.block_until_ready()
    view = validate.as_arrays("softmax", x=x)[1]["x"]
    assert view.data.ptr == x.unsafe_buffer_pointer()
    np.testing.assert_allclose(cp.asnumpy(cufuse.softmax(x, axis=1)), reference.softmax(np.asarray(x), 1), rtol=1e-5,
                               atol=1e-7)


def test_numba_device_arrays_without_a_copy(cp):
    cuda = pytest.importorskip("numba.cuda")
    host = np.random.default_rng(1).standard_normal((16, 300))
    device_array = cuda.to_device(host)
    view = validate.as_arrays("softmax", x=device_array)[1]["x"]
    assert view.data.ptr == device_array.device_ctypes_pointer.value
    np.testing.assert_allclose(cp.asnumpy(cufuse.log_softmax(device_array, axis=0)), reference.log_softmax(host, 0),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("n_q, causal", [(1, False), (4, True), (200, True), (300, False)])
def test_grouped_query_heads_on_the_gpu(cp, dtype, n_q, causal):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 32, n_q, 128)).astype(dtype)
    k, v = rng.standard_normal((2, 8, 1000, 128)).astype(dtype), rng.standard_normal((2, 8, 1000, 128)).astype(dtype)
    out, lse = cufuse.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal, enable_gqa=True,
                                return_lse=True)
    expected, expected_lse = cufuse.attention(q, k, v, causal=causal, enable_gqa=True, return_lse=True)
    assert out.shape == (2, 32, n_q, 128) and lse.shape == (2, 32, n_q)
    np.testing.assert_allclose(cp.asnumpy(out).astype(np.float32), expected.astype(np.float32), rtol=2e-2, atol=1e-2)
    np.testing.assert_allclose(cp.asnumpy(lse), expected_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_no_keys_gives_zeros_and_minus_inf_as_on_the_numpy_path(cp, dtype):
    q = cp.ones((2, 3, 5, 64), dtype=dtype)
    kv = cp.ones((2, 3, 0, 64), dtype=dtype)
    out = cp.full((2, 3, 5, 64), np.nan, dtype=dtype)
    result, lse = cufuse.attention(q, kv, kv, causal=True, return_lse=True, out=out)
    assert result is out and not cp.any(out) and bool(cp.all(lse == -cp.inf))


def test_empty_inputs_match_the_numpy_path(cp):
    for shape, axis in (((0,), None), ((3, 0), 1), ((0, 4), 0)):
        assert cufuse.softmax(cp.ones(shape, np.float32), axis=axis).shape == shape
    bias = np.array([0.5, -1.0, 2.0], np.float32)
    got = cufuse.fused_linear_relu(cp.ones((4, 0), np.float32), cp.ones((0, 3), np.float32), cp.asarray(bias))
    np.testing.assert_array_equal(cp.asnumpy(got), np.broadcast_to(np.maximum(bias, 0), (4, 3)))
    assert cufuse.fused_linear_relu(cp.ones((0, 8), np.float16), cp.ones((8, 3), np.float16)).shape == (0, 3)
    assert cufuse.attention(cp.ones((2, 0, 8), np.float16), cp.ones((2, 4, 8), np.float16),
                            cp.ones((2, 4, 8), np.float16)).shape == (2, 0, 8)


@pytest.mark.parametrize("dtype, result", [(np.int8, np.float16), (np.uint16, np.float32), (np.int64, np.float64)])
def test_integer_softmax_dtype_on_the_gpu(cp, dtype, result):
    values = np.random.default_rng(4).integers(-5, 100, (7, 300)).astype(dtype)
    got = cufuse.softmax(cp.asarray(values), axis=1)
    assert got.dtype == result
    expected = reference.softmax(values.astype(np.float64), 1)
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), expected, rtol=2e-3 if result == np.float16 else 1e-6,
                               atol=1e-6)


def test_zero_d_and_broadcast_bias_on_the_gpu(cp):
    for axis in (None, 0, -1):
        assert float(cufuse.softmax(cp.asarray(3.0, np.float32), axis=axis)) == 1.0
    x = cp.asarray(np.random.default_rng(5).standard_normal((65, 256)).astype(np.float16))
    w = cp.asarray(np.random.default_rng(6).standard_normal((256, 512)).astype(np.float16))
    expected = cufuse.fused_linear_relu(x, w, cp.full(512, 0.25, np.float16))
    for bias in (0.25, cp.asarray(0.25, np.float16), cp.full((1, 512), 0.25, np.float16)):
        cp.testing.assert_array_equal(cufuse.fused_linear_relu(x, w, bias), expected)


@pytest.mark.skipif(not GPU or __import__("cupy").cuda.runtime.getDeviceCount() < 2, reason="needs two GPUs")
def test_every_op_on_a_second_gpu_alternating_with_the_first():  # pragma: no cover - one-GPU machines
    import cupy

    rng = np.random.default_rng(7)
    x = rng.standard_normal((33, 4096)).astype(np.float16)
    w = rng.standard_normal((4096, 512)).astype(np.float16)
    q = rng.standard_normal((2, 8, 64, 64)).astype(np.float16)
    for device in (1, 0, 1):
        with cupy.cuda.Device(device):
            got = cufuse.softmax(cupy.asarray(x), axis=1)
            assert got.device.id == device
            np.testing.assert_allclose(cupy.asnumpy(got).astype(np.float32), reference.softmax(x, 1), atol=2e-3)
            h = cufuse.fused_linear_relu(cupy.asarray(x), cupy.asarray(w))
            np.testing.assert_allclose(cupy.asnumpy(h).astype(np.float32), reference.fused_linear_relu(x, w), rtol=2e-2,
                                       atol=0.5)
            o = cufuse.attention(*(cupy.asarray(a) for a in (q, q, q)), causal=True)
            np.testing.assert_allclose(cupy.asnumpy(o).astype(np.float32), reference.attention(q, q, q, causal=True),
                                       atol=1e-2)
    with cupy.cuda.Device(1):
        on_one = cupy.asarray(w)
    with pytest.raises(ValueError, match=r"fused_linear_relu: arguments must be on one device"):
        cufuse.fused_linear_relu(cupy.asarray(x), on_one)
