"""The promises of the API contract that a NumPy user checks first: SciPy's edge cases
(empty logsumexp, integer shifts and dtypes, truthy flags, 0-d scalars), in-place arguments
that refuse what they cannot write back, a plain ``fused_linear`` by default, the lse in the
accumulator dtype, index array-likes, and error messages that read as written."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special

import cufuse
from cufuse import reference


def scipy_call(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return getattr(scipy.special, fn)(*args, **kwargs)


# ---- logsumexp of an empty reduction ---------------------------------------------------

@pytest.mark.parametrize("shape, kwargs", [
    ((0,), {}), ((0,), {"axis": 0}), ((3, 0), {"axis": -1}), ((3, 0), {"axis": 1, "keepdims": True}),
    ((0,), {"b": np.zeros(0)}), ((3, 0), {"axis": -1, "b": np.ones((3, 0))}), ((2, 0, 4), {"axis": 1}),
    ((3, 0), {"axis": -1, "return_sign": True}), ((0,), {"keepdims": True, "return_sign": True}),
], ids=str)
def test_logsumexp_of_an_empty_reduction_is_minus_inf(shape, kwargs):
    a = np.zeros(shape)
    got, want = cufuse.logsumexp(a, **kwargs), scipy_call("logsumexp", a, **kwargs)
    for g, w in zip(got, want) if kwargs.get("return_sign") else ((got, want),):
        assert type(g) is type(w) and np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)
    assert np.all(np.asarray(got[0] if kwargs.get("return_sign") else got) == -np.inf)


def test_logsumexp_empty_rows_keep_their_dtype():
    got = cufuse.logsumexp(np.zeros((0, 3), np.float32), axis=0)
    assert got.dtype == np.float32 and np.array_equal(got, np.full(3, -np.inf, np.float32))


# ---- integers as SciPy takes them ------------------------------------------------------

@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_large_int64_values_keep_their_differences(fn):
    x = np.array([2**62, 2**62 + 1])
    got, want = getattr(cufuse, fn)(x), scipy_call(fn, x)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(cufuse.softmax(x), [0.2689414213699951, 0.7310585786300049], rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_integers_are_shifted_in_their_own_dtype(rng, fn, dtype):
    """Rows near the top of the dtype's range (the float conversion alone would lose their
    differences in int64): the shifted float64 computation, rounded to np.exp's dtype."""
    info = np.iinfo(dtype)
    x = (info.max - rng.integers(0, 40, (5, 9))).astype(dtype)
    got = getattr(cufuse, fn)(x, axis=1)
    shifted = (x.astype(object) - x.max(axis=1, keepdims=True).astype(object)).astype(np.float64)
    want = getattr(reference, fn)(shifted, 1)
    assert got.dtype == np.exp(np.zeros(1, dtype)).dtype
    tol = {2: 2e-3, 4: 1e-6, 8: 1e-12}[got.dtype.itemsize]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_integer_rows_spanning_the_whole_range_do_not_wrap():
    """SciPy's ``x - x.max()`` wraps around here (int8: -128 - 127 is 1); cufuse shifts exactly."""
    for dtype in (np.int8, np.int64):
        info = np.iinfo(dtype)
        got = cufuse.softmax(np.array([info.min, info.max], dtype=dtype))
        np.testing.assert_array_equal(got, [0.0, 1.0])


def test_logsumexp_integers_are_float64_and_shifted(rng):
    for dtype in (np.int8, np.uint8, np.int16, np.int64, bool):
        a = rng.integers(0, 2, (4, 7)).astype(dtype)
        got, want = cufuse.logsumexp(a, axis=1), scipy_call("logsumexp", a, axis=1)
        assert got.dtype == want.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-14)
    a = np.array([2**62, 2**62 + 1])
    assert cufuse.logsumexp(a) == scipy_call("logsumexp", a)
    # The shift is the largest entry with a nonzero weight: a zero-weighted 1000 must not
    # underflow the others.
    a, b = np.array([[0, 1000], [5, -3]]), np.array([1, 0])
    np.testing.assert_allclose(cufuse.logsumexp(a, axis=1, b=b), [0.0, 5.0], rtol=1e-15)


# ---- flags, 0-d results ----------------------------------------------------------------

def test_logsumexp_flags_take_any_truth_value(rng):
    a = rng.standard_normal((3, 4))
    want = scipy_call("logsumexp", a, axis=1, keepdims=True, return_sign=True)
    for flag in (1, np.True_, np.array([1]), 2.0):
        got = cufuse.logsumexp(a, axis=1, keepdims=flag, return_sign=flag)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-14)
    assert cufuse.logsumexp(a, axis=1, keepdims=0, return_sign=None).shape == (3,)
    with pytest.raises(ValueError, match=r"^logsumexp: argument 'keepdims' expected a bool .*truth value.*, got "
                                         r"numpy.ndarray of dtype int64 and shape \(2,\)"):
        cufuse.logsumexp(a, keepdims=np.array([1, 0]))


@pytest.mark.parametrize("value", [np.float64(3.0), np.array(3.0, np.float32), np.float16(-1.0), np.int8(3), 3,
                                   np.array(np.int16(7)), -np.inf], ids=repr)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_zero_d_numpy_input_gives_scipys_scalar(fn, value):
    got, want = getattr(cufuse, fn)(value), scipy_call(fn, value)
    assert type(got) is type(want) and repr(got) == repr(want)
    out = np.empty((), np.asarray(want).dtype)
    assert getattr(cufuse, fn)(np.asarray(value), out=out) is out  # a given out stays the array


# ---- in place means in place -----------------------------------------------------------

def _pool(rng, dtype=np.float32):
    k_pages = rng.standard_normal((4, 2, 4, 8)).astype(dtype)
    v_pages = rng.standard_normal((4, 2, 4, 8)).astype(dtype)
    k_new, v_new = (rng.standard_normal((2, 2, 1, 8)).astype(dtype) for _ in range(2))
    return k_pages, v_pages, k_new, v_new, np.array([[0, 1], [2, 3]], np.int32), np.array([3, 5], np.int32)


@pytest.mark.parametrize("name", ["k_pages", "v_pages"])
def test_kv_append_refuses_pages_it_cannot_write_back(rng, name):
    args = dict(zip(("k_pages", "v_pages", "k_new", "v_new", "block_table", "seq_lens"), _pool(rng)))
    before = {n: a.copy() for n, a in args.items()}
    args[name] = args[name].tolist()
    with pytest.raises(TypeError, match=rf"^kv_append: argument '{name}' is written in place and expected a NumPy "
                                        r"or GPU array, got list"):
        cufuse.kv_append(**args)
    args[name] = before[name].copy()
    args[name].flags.writeable = False
    with pytest.raises(TypeError, match=rf"^kv_append: argument '{name}' is written in place and expected a "
                                        r"writeable array, got a read-only numpy.ndarray"):
        cufuse.kv_append(**args)
    other = "v_pages" if name == "k_pages" else "k_pages"
    np.testing.assert_array_equal(args[other], before[other])  # nothing written


def test_kv_append_takes_index_lists_and_writes_in_place(rng):
    k_pages, v_pages, k_new, v_new, table, lens = _pool(rng)
    want_k, want_v = k_pages.copy(), v_pages.copy()
    reference.kv_append(want_k, want_v, k_new, v_new, table, lens)
    assert cufuse.kv_append(k_pages, v_pages, k_new, v_new, table.tolist(), lens.tolist()) is None
    np.testing.assert_array_equal(k_pages, want_k)
    np.testing.assert_array_equal(v_pages, want_v)


def test_paged_index_lists_convert_to_int32(rng):
    k_pages, v_pages, *_ = _pool(rng, np.float64)
    q = rng.standard_normal((2, 4, 1, 8))
    table, lens = np.array([[0, 1], [2, 3]], np.int32), np.array([3, 5], np.int32)
    want = cufuse.attention_paged(q, k_pages, v_pages, table, lens)
    np.testing.assert_array_equal(cufuse.attention_paged(q, k_pages, v_pages, table.tolist(), tuple(lens)), want)
    with pytest.raises(ValueError, match=r"^attention_paged: argument 'seq_lens' expected int32 values \(from "
                                         r"-2147483648 to 2147483647\), got values from 3 to 4294967296"):
        cufuse.attention_paged(q, k_pages, v_pages, table, [3, 2**32])
    with pytest.raises(TypeError, match=r"^attention_paged: argument 'block_table' expected dtype int32, got int64"):
        cufuse.attention_paged(q, k_pages, v_pages, table.astype(np.int64), lens)  # an array: as written


@pytest.mark.parametrize("call", [
    lambda x, out: cufuse.softmax(x, out=out),
    lambda x, out: cufuse.log_softmax(x, axis=0, out=out),
    lambda x, out: cufuse.fused_linear(x, np.eye(4), out=out),
    lambda x, out: cufuse.fused_linear_relu(x, np.eye(4), out=out),
    lambda x, out: cufuse.fused_gated_linear(x, np.eye(4), np.eye(4), out=out),
    lambda x, out: cufuse.attention(x, x, x, out=out),
    lambda x, out: cufuse.attention_paged(x[None, None, :1], x.reshape(1, 1, 4, 4), x.reshape(1, 1, 4, 4),
                                          [[0]], [4], out=out[None, None, :1] if isinstance(out, np.ndarray) else out),
], ids=["softmax", "log_softmax", "fused_linear", "fused_linear_relu", "fused_gated_linear", "attention",
        "attention_paged"])
def test_every_out_refuses_what_it_cannot_write_back(rng, call):
    x = rng.standard_normal((4, 4))
    out = np.empty((4, 4))
    assert call(x, out) is out or call(x, out).base is out
    with pytest.raises(TypeError, match=r"argument 'out' expected a numpy.ndarray like the inputs, got list"):
        call(x, out.tolist())
    out.flags.writeable = False
    with pytest.raises(TypeError, match=r"argument 'out' expected a writeable array, got a read-only one"):
        call(x, out)


# ---- a plain linear layer by default ---------------------------------------------------

def test_fused_linear_is_plain_linear_by_default(rng):
    np.testing.assert_array_equal(cufuse.fused_linear([[-1.0]], [[1.0]]), [[-1.0]])
    x, w, b = rng.standard_normal((5, 16)), rng.standard_normal((16, 8)), rng.standard_normal(8)
    got = cufuse.fused_linear(x, w, b)
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-12, atol=1e-12)
    assert (got < 0).any()
    np.testing.assert_allclose(reference.fused_linear(x, w, b), x @ w + b, rtol=1e-12, atol=1e-12)


# ---- attention's lse in the accumulator dtype ------------------------------------------

def test_attention_lse_is_float64_for_float64(rng):
    q, k, v = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 7, 8)), rng.standard_normal((2, 7, 8))
    _, lse = cufuse.attention(q, k, v, return_lse=True)
    _, want = reference.attention(q, k, v, return_lse=True)
    assert lse.dtype == np.float64
    np.testing.assert_allclose(lse, want, rtol=1e-15)
    assert cufuse.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                            return_lse=True)[1].dtype == np.float32
    k_pages, v_pages, *_ = _pool(rng, np.float64)
    _, lse = cufuse.attention_paged(rng.standard_normal((2, 4, 1, 8)), k_pages, v_pages, [[0, 1], [2, 3]], [3, 5],
                                    return_lse=True)
    assert lse.dtype == np.float64


# ---- error messages --------------------------------------------------------------------

def test_head_dim_mismatch_reads_as_written(rng):
    k_pages, v_pages, k_new, v_new, table, lens = _pool(rng)
    with pytest.raises(ValueError, match=r"^attention_paged: argument 'k_pages' expected last axis 16 \(q's head dim\), "):
        cufuse.attention_paged(np.ones((2, 4, 1, 16), np.float32), k_pages, v_pages, table, lens)
    with pytest.raises(ValueError, match=r"^kv_append: argument 'k_pages' expected last axis 6 \(k_new's head dim\), "):
        cufuse.kv_append(k_pages, v_pages, k_new[..., :6], v_new, table, lens)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -np.inf])
def test_a_non_finite_scale_is_a_value_error(scale):
    q = np.ones((1, 2, 1, 8))
    with pytest.raises(ValueError, match=r"^attention: argument 'scale' expected None or a finite real number"):
        cufuse.attention(q, q, q, scale=scale)
    with pytest.raises(ValueError, match=r"^attention_paged: argument 'scale' expected None or a finite real number"):
        cufuse.attention_paged(q, np.ones((2, 2, 4, 8)), np.ones((2, 2, 4, 8)), [[0]], [1], scale=scale)
