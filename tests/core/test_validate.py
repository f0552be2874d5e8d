"""Every public function rejects bad input with a TypeError/ValueError naming the function,
the argument, what was expected and what came; 0-size inputs give empty results.

The checks run before any kernel, so they are exercised on NumPy inputs everywhere and on
CuPy inputs too where a GPU is present.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cufuse
from cufuse._core.validate import AxisError

from ..conftest import GPU

XPS = ["numpy"] + (["cupy"] if GPU else [])


@pytest.fixture(params=XPS)
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def arr(xp, shape, dtype=np.float32):
    return xp.asarray(np.random.default_rng(1).standard_normal(shape).astype(dtype))


# ---- what is not an array --------------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    (None, r"softmax: argument 'x' expected an array or an array-like of numbers, got NoneType"),
    (object(), r"softmax: argument 'x' expected an array or an array-like of numbers, got object"),
    ("x", r"softmax: argument 'x' expected a float16, bfloat16, float32, float64 or integer array, got numpy.ndarray of dtype str32"),
    ([[1.0], [1.0, 2.0]], r"softmax: argument 'x' expected an array or an array-like"),
])
def test_softmax_rejects_what_is_not_an_array(bad, message):
    with pytest.raises(TypeError, match=message):
        cufuse.softmax(bad)


def test_array_likes_are_checked_like_arrays():
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'weight' expected shape \(3, N\) to match x's last axis"):
        cufuse.fused_linear_relu(np.ones((2, 3)), [[1.0]])
    q = np.ones((4, 8))
    with pytest.raises(ValueError, match=r"attention: argument 'v' expected at least 2 dimensions, got shape \(2,\)"):
        cufuse.attention(q, q, (1.0, 2.0))


@pytest.mark.skipif(not GPU, reason="no CUDA GPU present")
def test_mixed_host_and_gpu_rejected():
    import cupy

    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"fused_linear_relu: arguments must all be host arrays \(NumPy, array-likes\) "
                                        r"or all GPU arrays, got 'x' on the host, 'weight' on the GPU"):
        cufuse.fused_linear_relu(x, cupy.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match=r"softmax: argument 'out' expected a cupy.ndarray like the inputs, got numpy.ndarray"):
        cufuse.softmax(cupy.ones(3, np.float32), out=np.ones(3, np.float32))


@pytest.mark.skipif(not GPU or __import__("cupy").cuda.runtime.getDeviceCount() < 2, reason="needs two GPUs")
def test_arrays_on_different_devices_rejected():  # pragma: no cover - single-GPU machines
    import cupy

    with cupy.cuda.Device(1):
        weight = cupy.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"fused_linear_relu: arguments must be on one device"):
        cufuse.fused_linear_relu(cupy.ones((2, 3), np.float32), weight)


# ---- dtypes ------------------------------------------------------------------------

def test_mixed_dtypes_rejected(xp):
    x = arr(xp, (2, 3), np.float32)
    with pytest.raises(TypeError, match=r"fused_linear_relu: argument 'weight' expected dtype float32 \(the dtype of 'x'\), got float16"):
        cufuse.fused_linear_relu(x, arr(xp, (3, 4), np.float16))
    with pytest.raises(TypeError, match=r"fused_linear_relu: argument 'bias' expected dtype float32 \(the dtype of 'x'\), got float64"):
        cufuse.fused_linear_relu(x, arr(xp, (3, 4)), arr(xp, (4,), np.float64))
    q = arr(xp, (4, 8), np.float16)
    with pytest.raises(TypeError, match=r"attention: argument 'k' expected dtype float16 \(the dtype of 'q'\), got bfloat16"):
        cufuse.attention(q, arr(xp, (4, 8), ml_dtypes.bfloat16), q)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex64])
def test_linear_and_attention_reject_non_float(xp, dtype):
    x = xp.ones((2, 3), dtype=dtype)
    with pytest.raises(TypeError, match=r"fused_linear_relu: argument 'x' expected dtype float16, bfloat16, float32 or float64, got "):
        cufuse.fused_linear_relu(x, x.T)
    with pytest.raises(TypeError, match=r"attention: argument 'q' expected dtype float16, bfloat16, float32 or float64, got "):
        cufuse.attention(x, x, x)


def test_softmax_rejects_complex(xp):
    with pytest.raises(TypeError, match=r"softmax: argument 'x' expected a float16, bfloat16, float32, float64 or integer array, got .*complex64"):
        cufuse.softmax(xp.ones(3, dtype=np.complex64))
    with pytest.raises(TypeError, match=r"log_softmax: argument 'x' expected .* got .*complex128"):
        cufuse.log_softmax(xp.ones(3, dtype=np.complex128))


@pytest.mark.parametrize("dtype, result", [(np.int8, np.float16), (np.uint8, np.float16), (np.int16, np.float32),
                                           (np.uint16, np.float32), (np.int32, np.float64), (np.int64, np.float64)])
def test_softmax_integers_take_the_dtype_np_exp_gives_them(xp, dtype, result):
    """SciPy's rule (NumPy's np.exp result dtype), computed accurately in float32 / float64."""
    values = np.array([[0, 1, 1], [1, 0, 5]], dtype=dtype)
    for fn, oracle in ((cufuse.softmax, cufuse.reference.softmax), (cufuse.log_softmax, cufuse.reference.log_softmax)):
        got = fn(xp.asarray(values), axis=1)
        assert got.dtype == result
        expected = oracle(values.astype(np.float64), axis=1)
        tolerance = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}[result]
        np.testing.assert_allclose((xp.asnumpy(got) if xp is not np else got).astype(np.float64), expected,
                                   rtol=tolerance, atol=tolerance)


def test_softmax_rejects_bool_as_scipy_does(xp):
    with pytest.raises(TypeError, match=r"softmax: argument 'x' expected a float16, bfloat16, float32, float64 or "
                                        r"integer array, got .*bool"):
        cufuse.softmax(xp.asarray([True, False]))
    with pytest.raises(TypeError, match=r"log_softmax: argument 'x' expected"):
        cufuse.log_softmax(xp.asarray([[True]]), axis=1)


# ---- shapes and axes -------------------------------------------------------------------

def test_linear_shape_mismatches(xp):
    x = arr(xp, (5, 3))
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'weight' expected shape \(3, N\) to match x's last axis of 3, got \(4, 2\)"):
        cufuse.fused_linear_relu(x, arr(xp, (4, 2)))
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'weight' expected a 2-D array, got shape \(3,\)"):
        cufuse.fused_linear_relu(x, arr(xp, (3,)))
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'bias' expected shape \(2,\), \(1, 2\) or one value broadcast to every row \(\(\), \(1,\)\), got \(3,\)"):
        cufuse.fused_linear_relu(x, arr(xp, (3, 2)), arr(xp, (3,)))
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'x' expected at least 1 dimensions, got shape \(\)"):
        cufuse.fused_linear_relu(arr(xp, ()), arr(xp, (3, 2)))


def test_attention_shape_mismatches(xp):
    q = arr(xp, (2, 5, 8))
    with pytest.raises(ValueError, match=r"attention: argument 'k' expected last axis 8 \(q's head dim\), got shape \(2, 6, 4\)"):
        cufuse.attention(q, arr(xp, (2, 6, 4)), arr(xp, (2, 6, 4)))
    with pytest.raises(ValueError, match=r"attention: argument 'v' expected 6 keys \(k's axis -2\), got shape \(2, 7, 8\)"):
        cufuse.attention(q, arr(xp, (2, 6, 8)), arr(xp, (2, 7, 8)))
    with pytest.raises(ValueError, match=r"attention: arguments 'q', 'k', 'v' expected leading dims that broadcast \(grouped-query heads: enable_gqa=True\), got \(2,\), \(3,\), \(3,\)"):
        cufuse.attention(q, arr(xp, (3, 6, 8)), arr(xp, (3, 6, 8)))
    with pytest.raises(ValueError, match=r"attention: argument 'q' expected a head dim from 1 to 256, got 300"):
        cufuse.attention(arr(xp, (2, 300)), arr(xp, (2, 300)), arr(xp, (2, 4)))
    with pytest.raises(ValueError, match=r"attention: argument 'q' expected at least 2 dimensions, got shape \(8,\)"):
        cufuse.attention(arr(xp, (8,)), arr(xp, (2, 8)), arr(xp, (2, 8)))


def test_attention_bad_flags(xp):
    q = arr(xp, (4, 8))
    with pytest.raises(TypeError, match=r"attention: argument 'causal' expected a bool .*not a string.*, got 'yes'"):
        cufuse.attention(q, q, q, causal="yes")
    with pytest.raises(TypeError, match=r"attention: argument 'return_lse' expected a bool .*, got 'no'"):
        cufuse.attention(q, q, q, return_lse="no")
    with pytest.raises(ValueError, match=r"attention: argument 'causal' expected a bool \(or a value with an "
                                         r"unambiguous truth value\), got numpy.ndarray of dtype int64"):
        cufuse.attention(q, q, q, causal=np.array([1, 0]))
    with pytest.raises(ValueError, match=r"attention: argument 'scale' expected None or a finite real number, got nan"):
        cufuse.attention(q, q, q, scale=float("nan"))
    with pytest.raises(ValueError, match=r"attention: argument 'scale' expected None or a finite real number, got inf"):
        cufuse.attention(q, q, q, scale=np.inf)
    with pytest.raises(TypeError, match=r"attention: argument 'scale' expected None or a finite real number, got 'a'"):
        cufuse.attention(q, q, q, scale="a")


def test_truthy_flags_act_as_bool(xp):
    """Flags take what has a truth value, as SciPy takes them: 1, np.True_, a one-element array."""
    q = arr(xp, (4, 8))
    want, want_lse = cufuse.attention(q, q, q, causal=True, return_lse=True)
    for flag in (1, np.True_, np.array([1])):
        got, got_lse = cufuse.attention(q, q, q, causal=flag, return_lse=flag)
        assert xp.array_equal(got, want) and xp.array_equal(got_lse, want_lse)
    assert xp.array_equal(cufuse.attention(q, q, q, causal=0, return_lse=None), cufuse.attention(q, q, q))


def test_softmax_bad_axis(xp):
    x = arr(xp, (3, 4))
    with pytest.raises(AxisError, match=r"softmax: argument 'axis' expected values in \[-2, 1\] for a 2-D array, got 2"):
        cufuse.softmax(x, axis=2)
    with pytest.raises(ValueError, match=r"log_softmax: argument 'axis' expected distinct axes, got \(1, -1\)"):
        cufuse.log_softmax(x, axis=(1, -1))
    with pytest.raises(TypeError, match=r"softmax: argument 'axis' expected None, an int or a tuple of ints, got 1.5"):
        cufuse.softmax(x, axis=1.5)


# ---- out -------------------------------------------------------------------------------

def test_wrong_out(xp):
    x = arr(xp, (3, 4))
    with pytest.raises(ValueError, match=r"softmax: argument 'out' expected shape \(3, 4\), got \(4, 3\)"):
        cufuse.softmax(x, out=xp.empty((4, 3), np.float32))
    with pytest.raises(TypeError, match=r"softmax: argument 'out' expected dtype float32, got float64"):
        cufuse.softmax(x, out=xp.empty((3, 4), np.float64))
    with pytest.raises(ValueError, match=r"softmax: argument 'out' expected a C-contiguous array, got strides"):
        cufuse.softmax(x, axis=1, out=xp.empty((4, 3), np.float32).T)
    with pytest.raises(ValueError, match=r"softmax: argument 'out' must not overlap input 'x'"):
        cufuse.softmax(x, out=x)
    w = arr(xp, (4, 5))
    with pytest.raises(ValueError, match=r"fused_linear_relu: argument 'out' must not overlap input 'weight'"):
        cufuse.fused_linear_relu(x, w, out=w[:3])
    with pytest.raises(TypeError, match=r"attention: argument 'out' expected a (numpy|cupy).ndarray like the inputs, got list"):
        cufuse.attention(x, x, x, out=[0.0])
    with pytest.raises(ValueError, match=r"attention: argument 'out' expected shape \(3, 4\), got \(3, 5\)"):
        cufuse.attention(x, x, x, out=xp.empty((3, 5), np.float32))


def test_read_only_numpy_out_rejected():
    x = arr(np, (3, 4))
    out = np.empty((3, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(TypeError, match=r"softmax: argument 'out' expected a writeable array, got a read-only one"):
        cufuse.softmax(x, out=out)


def test_out_is_returned_and_filled(xp):
    x = arr(xp, (3, 4))
    out = xp.full((3, 4), np.nan, np.float32)
    assert cufuse.softmax(x, axis=1, out=out) is out
    np.testing.assert_allclose(out.sum(axis=1).tolist(), [1.0] * 3, rtol=1e-5)


# ---- 0-size inputs ---------------------------------------------------------------------

def test_zero_size_inputs_give_empty_results(xp):
    for shape, axis in (((0,), None), ((3, 0), 1), ((0, 4), 1), ((0, 4), 0), ((2, 0, 3), None)):
        result = cufuse.softmax(arr(xp, shape), axis=axis)
        assert result.shape == shape and result.dtype == np.float32
        assert cufuse.log_softmax(arr(xp, shape, np.float16), axis=axis).dtype == np.float16
    relu = cufuse.fused_linear_relu(arr(xp, (0, 3)), arr(xp, (3, 4)))
    assert relu.shape == (0, 4)
    relu = cufuse.fused_linear_relu(arr(xp, (2, 3)), arr(xp, (3, 0)))
    assert relu.shape == (2, 0)
    # K = 0: the product is empty, so the result is relu(bias) broadcast over rows.
    bias = arr(xp, (4,))
    relu = cufuse.fused_linear_relu(arr(xp, (2, 0)), arr(xp, (0, 4)), bias)
    expected = np.maximum(np.asarray(bias.tolist(), np.float32), 0)
    np.testing.assert_array_equal(np.asarray(relu.tolist()), np.broadcast_to(expected, (2, 4)))
    out, lse = cufuse.attention(arr(xp, (2, 0, 8)), arr(xp, (2, 5, 8)), arr(xp, (2, 5, 3)), return_lse=True)
    assert out.shape == (2, 0, 3) and lse.shape == (2, 0) and lse.dtype == np.float32
    out, lse = cufuse.attention(arr(xp, (3, 8)), arr(xp, (0, 8)), arr(xp, (0, 3)), return_lse=True)
    assert out.shape == (3, 3)
    assert np.all(np.asarray(out.tolist()) == 0) and np.all(np.asarray(lse.tolist()) == -np.inf)


# ---- device checks, without needing two GPUs -------------------------------------------

class _FakeDevice:
    def __init__(self, device_id):
        self.id = device_id


class _FakeGpuArray:
    """Stands in for a cupy.ndarray on a given device (the checks read .device.id only)."""

    def __init__(self, device_id, shape=(2, 3), dtype=np.float32):
        self.device, self.shape, self.dtype, self.size = _FakeDevice(device_id), shape, np.dtype(dtype), 6
        self.flags = type("Flags", (), {"c_contiguous": True, "writeable": True})()
        self.strides = (12, 4)


def test_arrays_on_two_devices_rejected(monkeypatch):
    from cufuse._core import validate as _validate

    fake_cupy = type("cupy", (), {"ndarray": _FakeGpuArray, "__name__": "cupy"})
    monkeypatch.setattr(_validate, "_cupy", lambda: fake_cupy)
    with pytest.raises(ValueError, match=r"attention: arguments must be on one device, got 'q' on device 0, 'k' on device 1"):
        _validate.as_arrays("attention", q=_FakeGpuArray(0), k=_FakeGpuArray(1))


def test_out_on_another_device_rejected():
    from cufuse._core import validate as _validate

    fake_cupy = type("cupy", (), {"ndarray": _FakeGpuArray, "__name__": "cupy", "may_share_memory": staticmethod(lambda a, b: False)})
    with pytest.raises(ValueError, match=r"softmax: argument 'out' expected an array on device 0, got device 1"):
        _validate.check_out("softmax", _FakeGpuArray(1), shape=(2, 3), dtype=np.float32, xp=fake_cupy, inputs={"x": _FakeGpuArray(0)})
