"""The NumPy path against scipy.special.logsumexp: every argument form, the non-finite
patterns, dtypes and the errors."""
from __future__ import annotations

import itertools
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.special

import cufuse
from cufuse._core.validate import AxisError

from .oracle import assert_close

AXES = [None, 0, 1, -1, 2, (0, 2), (1, 2), (0, 1, 2), (-1, 0)]


def scipy_lse(*args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return scipy.special.logsumexp(*args, **kwargs)


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_axis_forms_match_scipy(rng, axis, keepdims):
    a = rng.standard_normal((3, 5, 7)) * 4
    got = cufuse.logsumexp(a, axis=axis, keepdims=keepdims)
    want = scipy_lse(a, axis=axis, keepdims=keepdims)
    assert type(got) is type(want) and np.shape(got) == np.shape(want)
    assert_close(got, want, np.float64)


@pytest.mark.parametrize("b_shape", [(3, 5, 7), (7,), (5, 1), (3, 1, 1), (), (2, 3, 5, 7)])
def test_weights_broadcast_with_a(rng, b_shape):
    a = rng.standard_normal((3, 5, 7))
    b = rng.standard_normal(b_shape)
    if b.ndim:
        b[..., :1] = 0  # zero weights drop their entries
    for axis in (None, -1, 0):
        got = cufuse.logsumexp(a, axis=axis, b=b, return_sign=True)
        want = scipy_lse(a, axis=axis, b=b, return_sign=True)
        for g, w in zip(got, want):
            assert np.shape(g) == np.shape(w)
            assert_close(g, w, np.float64)
        assert_close(cufuse.logsumexp(a, axis=axis, b=b), scipy_lse(a, axis=axis, b=b), np.float64)


def test_every_non_finite_pattern_matches_scipy():
    values = [np.nan, np.inf, -np.inf, 0.5, -1.0, 2.0]
    weights = [0.0, 1.0, -1.0, 2.0, -0.5, np.inf, -np.inf, np.nan]
    for n in (1, 2, 3):
        rows = np.array(list(itertools.product(values, repeat=n)))
        assert_close(cufuse.logsumexp(rows, axis=-1), scipy_lse(rows, axis=-1), np.float64)
        for w in itertools.product(weights, repeat=n):
            b = np.broadcast_to(np.array(w), rows.shape)
            got, want = cufuse.logsumexp(rows, -1, b, return_sign=True), scipy_lse(rows, -1, b, return_sign=True)
            assert_close(got[0], want[0], np.float64)
            assert_close(got[1], want[1], np.float64)
            assert_close(cufuse.logsumexp(rows, -1, b), scipy_lse(rows, -1, b), np.float64)


def test_zero_d_and_empty_inputs_as_scipy():
    for kwargs in ({}, {"axis": 0}, {"axis": -1}, {"keepdims": True}, {"return_sign": True}):
        got, want = cufuse.logsumexp(np.float32(2.5), **kwargs), scipy_lse(np.float32(2.5), **kwargs)
        assert repr(got) == repr(want)
    with pytest.raises(AxisError):
        cufuse.logsumexp(2.0, axis=1)
    for shape, axis in (((3, 0), 1), ((0, 3), 1), ((3, 0), 0), ((0,), None)):
        got = cufuse.logsumexp(np.ones(shape), axis=axis, return_sign=True)
        want = scipy_lse(np.ones(shape), axis=axis, return_sign=True)
        for g, w in zip(got, want):
            assert repr(g) == repr(w)
    # SciPy 1.17 raises IndexError for axis=None of an empty 2-D array (its shape[axis] = 1
    # with a tuple); cufuse gives what it gives for 1-D: -inf, sign -1.
    assert cufuse.logsumexp(np.ones((0, 3)), return_sign=True) == (-np.inf, -1.0)


@pytest.mark.parametrize("dtype, result", [(np.float16, np.float16), (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
                                           (np.float32, np.float32), (np.float64, np.float64),
                                           (np.int8, np.float64), (np.uint8, np.float64), (np.int16, np.float64),
                                           (np.int32, np.float64), (np.int64, np.float64), (bool, np.float64)])
def test_result_dtype(rng, dtype, result):
    """SciPy's logsumexp promotes integers and bools to float64 (unlike its softmax)."""
    a = (rng.standard_normal((4, 9)) * 5).astype(dtype)
    got = cufuse.logsumexp(a, axis=1)
    assert got.dtype == np.dtype(result)
    if dtype is not ml_dtypes.bfloat16:
        assert got.dtype == scipy_lse(a, axis=1).dtype
    assert_close(got, scipy_lse(a.astype(np.float64), axis=1), result)


def test_weight_dtypes_promote_as_scipy(rng):
    a = rng.standard_normal(6).astype(np.float16)
    for b, result in ((np.ones(6, np.float32), np.float32), (np.ones(6, np.int8), np.float16),
                      (np.ones(6, np.int16), np.float32), (np.ones(6, np.int64), np.float64), (2.0, np.float16),
                      (3, np.float16), (np.ones(6, bool), np.float16)):
        assert cufuse.logsumexp(a, b=b).dtype == np.dtype(result) == scipy_lse(a, b=b).dtype
    ints = np.arange(6, dtype=np.int8)
    for b, result in ((np.ones(6, np.float32), np.float32), (np.ones(6, np.float16), np.float16),
                      (np.ones(6, bool), np.float64), (2.0, np.float64), (np.ones(6, np.int8), np.float64)):
        assert cufuse.logsumexp(ints, b=b).dtype == np.dtype(result) == scipy_lse(ints, b=b).dtype
    assert cufuse.logsumexp(a.astype(ml_dtypes.bfloat16), b=np.ones(6, np.float16)).dtype == np.float32


def test_bad_inputs_name_function_and_argument():
    a = np.ones((2, 3))
    cases = [
        (dict(a=np.ones(3, complex)), TypeError, "argument 'a'"),
        (dict(a=a, axis=True), TypeError, "argument 'axis'"),
        (dict(a=a, axis=1.0), TypeError, "argument 'axis'"),
        (dict(a=a, axis=(0, 0)), ValueError, "argument 'axis'"),
        (dict(a=a, axis=2), AxisError, "argument 'axis'"),
        (dict(a=a, keepdims=np.ones(2)), ValueError, "argument 'keepdims'"),
        (dict(a=a, return_sign="yes"), TypeError, "argument 'return_sign'"),
        (dict(a=a, b=np.ones(2)), ValueError, "argument 'b'"),
        (dict(a=a, b=np.ones(3, complex)), TypeError, "argument 'b'"),
        (dict(a=a, config="fast"), TypeError, "argument 'config'"),
    ]
    for kwargs, error, text in cases:
        with pytest.raises(error, match=f"logsumexp: {text}"):
            cufuse.logsumexp(**kwargs)
