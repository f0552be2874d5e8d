"""What the ops take, as NumPy / SciPy users expect: array-likes on the NumPy path, GPU
arrays of other libraries (``__cuda_array_interface__``, DLPack) zero-copy on the GPU path,
SciPy's 0-d and axis rules, flags that are bools, ``config`` checked on both paths, a bias
that broadcasts, the 4-D grouped-query layout, and empty inputs on the GPU."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import cufuse
from cufuse import reference
from cufuse._core import validate
from cufuse._core.validate import AxisError
from cufuse.ops.attention.mma import FlashMmaTile
from cufuse.ops.linear.simt import SIMT_SMALL, SimtConfig
from cufuse.ops.softmax.rows import RowsConfig

from ..conftest import GPU


class HasArray:
    """An object NumPy converts through ``__array__`` (pandas, xarray, ... do this)."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


@pytest.mark.parametrize("value", [[1.0, 2.0, 3.5], (1.0, -2.0), 3.0, HasArray([[0.5, 1.5], [2.0, -1.0]])])
def test_array_likes_run_the_numpy_path(value):
    for fn, scipy_fn in ((cufuse.softmax, scipy.special.softmax), (cufuse.log_softmax, scipy.special.log_softmax)):
        got = fn(value)
        assert type(got) is (np.float64 if np.ndim(value) == 0 else np.ndarray) and got.dtype == np.float64
        np.testing.assert_allclose(got, scipy_fn(np.asarray(value, dtype=np.float64)), rtol=1e-12)
    x = [[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]]
    w = HasArray(np.arange(6.0).reshape(3, 2) - 2.0)
    np.testing.assert_allclose(cufuse.fused_linear_relu(x, w, [0.5, -0.5]),
                               reference.fused_linear_relu(np.asarray(x), np.asarray(w), np.array([0.5, -0.5])))
    np.testing.assert_allclose(cufuse.attention(x, x, x), reference.attention(np.asarray(x), np.asarray(x), np.asarray(x)))


def test_zero_d_inputs_take_axis_0_minus_1_and_none():
    for axis in (None, 0, -1):
        assert cufuse.softmax(np.array(3.0), axis=axis) == 1.0 == scipy.special.softmax(np.array(3.0), axis=axis)
        assert cufuse.log_softmax(np.float32(3.0), axis=axis) == 0.0
    assert cufuse.softmax(np.array(-np.inf)).dtype == np.float64 and np.isnan(cufuse.softmax(np.array(-np.inf)))
    with pytest.raises(AxisError, match=r"softmax: argument 'axis' expected 0, -1 or None for a 0-d array, got 1"):
        cufuse.softmax(np.array(3.0), axis=1)


@pytest.mark.parametrize("axis", [True, False, (0, True), np.bool_(True)])
def test_a_bool_is_not_an_axis(axis):
    with pytest.raises(TypeError, match=r"softmax: argument 'axis' expected None, an int or a tuple of ints"):
        cufuse.softmax(np.ones((2, 3)), axis=axis)


@pytest.mark.parametrize("call", [
    lambda: cufuse.softmax(np.ones(3), config="bogus"),
    lambda: cufuse.log_softmax(np.ones(3), config=FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2)),
    lambda: cufuse.fused_linear_relu(np.ones((2, 3)), np.ones((3, 4)), config="mma"),
    lambda: cufuse.attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)),
                             config=RowsConfig(threads=256, group=1, vecs=1)),
])
def test_config_is_checked_on_the_numpy_path(call):
    with pytest.raises(TypeError, match=r"argument 'config' expected None or one of"):
        call()


def test_a_valid_config_is_ignored_on_the_numpy_path():
    x = np.random.default_rng(0).standard_normal((5, 7))
    np.testing.assert_array_equal(cufuse.softmax(x, axis=1, config=RowsConfig(threads=256, group=8, vecs=1)),
                                  cufuse.softmax(x, axis=1))
    w = np.ones((7, 3))
    np.testing.assert_array_equal(cufuse.fused_linear_relu(x, w, config=SimtConfig(tile=SIMT_SMALL)),
                                  cufuse.fused_linear_relu(x, w))


@pytest.mark.parametrize("bias", [np.float32(0.5), 0.5, np.array(0.5, np.float32), np.full(1, 0.5, np.float32),
                                  np.full((1, 4), 0.5, np.float32), np.full((1, 1), 0.5, np.float32)])
def test_a_bias_that_broadcasts_the_same_to_every_row(bias):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    got = cufuse.fused_linear_relu(x, w, bias)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.maximum(x.astype(np.float64) @ w + 0.5, 0), rtol=1e-6, atol=1e-6)


def test_a_bias_that_differs_by_row_is_refused():
    x, w = np.ones((3, 5), np.float32), np.ones((5, 4), np.float32)
    with pytest.raises(ValueError, match=r"argument 'bias' expected shape \(4,\), \(1, 4\) or one value broadcast to "
                                         r"every row \(\(\), \(1,\)\), got \(3, 4\)"):
        cufuse.fused_linear_relu(x, w, np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match=r"argument 'bias' expected dtype float32 \(the dtype of 'x'\), got float64"):
        cufuse.fused_linear_relu(x, w, np.ones(4))


def _gqa_reference(q, k, v, **kwargs):
    group = q.shape[-3] // k.shape[-3]
    return reference.attention(q, np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3), **kwargs)


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_heads_on_the_numpy_path(causal):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 8, 5, 16))
    k, v = rng.standard_normal((2, 2, 7, 16)), rng.standard_normal((2, 2, 7, 12))
    out, lse = cufuse.attention(q, k, v, causal=causal, enable_gqa=True, return_lse=True)
    expected, expected_lse = _gqa_reference(q, k, v, causal=causal, return_lse=True)
    assert out.shape == (2, 8, 5, 12) and lse.shape == (2, 8, 5) and lse.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-6)
    given = np.full((2, 8, 5, 12), np.nan)
    assert cufuse.attention(q, k, v, causal=causal, enable_gqa=True, out=given) is given
    np.testing.assert_allclose(given, expected, rtol=1e-12)
    # the 5-D broadcast form computes the same
    np.testing.assert_allclose(cufuse.attention(q.reshape(2, 2, 4, 5, 16), k[:, :, None], v[:, :, None], causal=causal)
                               .reshape(2, 8, 5, 12), expected, rtol=1e-12)


def test_grouped_query_heads_are_checked():
    q, k = np.ones((1, 6, 3, 8)), np.ones((1, 4, 3, 8))
    with pytest.raises(ValueError, match=r"argument 'k' expected a head count on axis -3 that divides q's 6"):
        cufuse.attention(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match=r"argument 'v' expected 4 heads on axis -3 \(k's, enable_gqa=True\)"):
        cufuse.attention(np.ones((1, 8, 3, 8)), k, np.ones((1, 2, 3, 8)), enable_gqa=True)
    with pytest.raises(ValueError, match=r"argument 'q' expected at least 3 dimensions"):
        cufuse.attention(np.ones((3, 8)), np.ones((3, 8)), np.ones((3, 8)), enable_gqa=True)
    with pytest.raises(ValueError, match=r"argument 'out' expected shape \(1, 8, 3, 8\)"):
        cufuse.attention(np.ones((1, 8, 3, 8)), k, k, enable_gqa=True, out=np.empty((1, 2, 4, 3, 8)))


# ---- GPU arrays of other libraries, seen through a fake CuPy (no GPU needed) ----------

class FakeCudaArray:
    """An object exposing ``__cuda_array_interface__``, as PyTorch, JAX and Numba arrays do."""

    __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (0x1000, False), "version": 3}


class FakeDlpackCuda:
    def __dlpack__(self, stream=None):
        raise AssertionError("a fake: from_dlpack is patched")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


class FakeDlpackHost(FakeDlpackCuda):
    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


class FakeGpuArray:
    def __init__(self, source, device_id=0):
        self.source, self.device = source, type("Device", (), {"id": device_id})()


@pytest.fixture
def fake_cupy(monkeypatch):
    calls = []
    module = type("cupy", (), {
        "ndarray": FakeGpuArray, "__name__": "cupy",
        "asarray": staticmethod(lambda value: calls.append(("asarray", value)) or FakeGpuArray(value)),
        "from_dlpack": staticmethod(lambda value: calls.append(("from_dlpack", value)) or FakeGpuArray(value)),
    })
    monkeypatch.setattr(validate, "_cupy", lambda: module)
    return module, calls


def test_cuda_array_interface_objects_are_taken_without_a_copy(fake_cupy):
    module, calls = fake_cupy
    source = FakeCudaArray()
    xp, arrays = validate.as_arrays("softmax", x=source)
    assert xp is module and isinstance(arrays["x"], FakeGpuArray) and arrays["x"].source is source
    assert calls == [("asarray", source)]  # CuPy's view of the same memory: one call, no copy
    dl = FakeDlpackCuda()
    xp, arrays = validate.as_arrays("attention", q=dl, k=FakeGpuArray(None))
    assert xp is module and calls[-1] == ("from_dlpack", dl)


def test_host_and_gpu_inputs_do_not_mix(fake_cupy):
    with pytest.raises(TypeError, match=r"fused_linear_relu: arguments must all be host arrays \(NumPy, array-likes\) "
                                        r"or all GPU arrays, got 'x' on the host, 'weight' on the GPU"):
        validate.as_arrays("fused_linear_relu", x=np.ones((2, 3)), weight=FakeCudaArray())
    with pytest.raises(ValueError, match=r"attention: arguments must be on one device, got 'q' on device 0, 'k' on device 1"):
        validate.as_arrays("attention", q=FakeGpuArray(None, 0), k=FakeGpuArray(None, 1))


def test_gpu_arrays_need_cupy(monkeypatch):
    monkeypatch.setattr(validate, "_cupy", lambda: None)
    with pytest.raises(TypeError, match=r"softmax: argument 'x' is a GPU array \(FakeCudaArray\), which needs CuPy"):
        cufuse.softmax(FakeCudaArray())


def test_host_dlpack_objects_run_the_numpy_path(monkeypatch):
    monkeypatch.setattr(np, "from_dlpack", lambda value: np.arange(4.0))
    xp, arrays = validate.as_arrays("softmax", x=FakeDlpackHost())
    assert xp is np
    np.testing.assert_array_equal(arrays["x"], np.arange(4.0))
