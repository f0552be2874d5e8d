"""The GPU kernels against the float64 oracle (and SciPy's rules) on fresh random inputs:
every dispatch branch, misaligned and strided views, weights, signs, non-finite rows."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cufuse
from cufuse.ops.logsumexp.variants import ColsConfig, RowsConfig

from .oracle import assert_close, condition, expected
from .test_select import BRANCHES

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def random(cp, rng, shape, dtype, scale=4.0):
    return cp.asarray((rng.standard_normal(shape) * scale).astype(dtype))


def check(cp, a, axis=None, b=None, *, keepdims=False, config=None):
    value, sign = cufuse.logsumexp(a, axis, b, keepdims, True, config=config)
    a64, b64 = cp.asnumpy(a).astype(np.float64), None if b is None else cp.asnumpy(b).astype(np.float64)
    want_value, want_sign = expected(a64, axis, b64, keepdims)
    assert isinstance(value, cp.ndarray) and value.dtype == a.dtype and sign.dtype == a.dtype
    assert_close(cp.asnumpy(value), want_value, a.dtype, condition(a64, axis, b64, keepdims))
    assert_close(cp.asnumpy(sign), want_sign, a.dtype)
    plain = cufuse.logsumexp(a, axis, b, keepdims, config=config)
    assert_close(cp.asnumpy(plain), np.where(want_sign < 0, np.nan, want_value), a.dtype,
                 condition(a64, axis, b64, keepdims))


def strided_view(cp, rng, shape, strides, dtype, offset):
    """A view of ``shape`` with element ``strides`` starting ``offset`` elements into a buffer."""
    size = offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    base = random(cp, rng, size, dtype)
    itemsize = np.dtype(dtype).itemsize
    return cp.lib.stride_tricks.as_strided(base[offset:], shape, tuple(s * itemsize for s in strides))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, strides, axes, config", BRANCHES)
def test_every_branch_any_offset(cp, rng, dtype, shape, strides, axes, config):
    for offset in (0, 1, 3):  # rows starting inside a 16-byte vector
        a = strided_view(cp, rng, shape, strides, dtype, offset)
        check(cp, a, axes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_axis_forms_and_views(cp, rng, dtype):
    x = random(cp, rng, (6, 33, 70), dtype)
    for axis in (None, 0, 1, 2, -1, (0, 1), (1, 2), (0, 2), (0, 1, 2)):
        for keepdims in (False, True):
            check(cp, x, axis, keepdims=keepdims)
    check(cp, x.transpose(2, 0, 1), -1)
    check(cp, x[:, ::3, 5:], 1)
    check(cp, x[::-1, :, ::2], 2)
    check(cp, x.transpose(1, 0, 2)[:, 2:, 1:], (1, 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_weights(cp, rng, dtype):
    a = random(cp, rng, (40, 300), dtype)
    for b_shape in ((40, 300), (300,), (40, 1), (), (3, 40, 300)):
        b = random(cp, rng, b_shape, dtype, scale=1.0)
        if b.ndim:
            b[..., ::7] = 0  # dropped entries
        for axis in (-1, 0, None):
            check(cp, a, axis, b)
    b = cp.abs(random(cp, rng, (40, 300), dtype, 1.0))  # positive weights: every row a value
    check(cp, a, 1, b)
    check(cp, a.T, 0, b.T)  # a column layout with weights


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_rows(cp, rng, dtype):
    a = random(cp, rng, (12, 1000), dtype)
    a[0, 5] = np.nan
    a[1, 7] = np.inf
    a[2, :] = -np.inf
    a[3, 500:] = -np.inf
    a[4, 3] = np.inf
    a[4, 900] = np.nan
    b = cp.ones_like(a)
    b[5, 1] = -1
    a[5, 1] = a[5].max() + 2  # a negative sum
    b[6, :] = 0  # every entry dropped
    a[7, 9], b[7, 9] = np.inf, 0  # a dropped +inf
    a[8, 3:5], b[8, 3:5] = np.inf, cp.asarray([1, -1], dtype=dtype)  # +inf with weights of both signs
    for axis in (1,):
        check(cp, a, axis)
        check(cp, a, axis, b)
        check(cp, cp.ascontiguousarray(a.T), 0, cp.ascontiguousarray(b.T))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_split_configs(cp, rng, dtype):
    a = random(cp, rng, (7, 50001), dtype)
    for parts in (2, 5, 300):
        check(cp, a[:, 1:], 1, config=RowsConfig(256, 256, 4, parts))
    c = random(cp, rng, (5000, 70), dtype)
    for parts in (2, 9):
        check(cp, c, 0, config=ColsConfig(8, 16 if np.dtype(dtype).itemsize == 2 else 8, parts))


def test_integer_zero_d_and_empty(cp, rng):
    x = cp.asarray(rng.integers(-100, 100, (5, 77)).astype(np.int8))
    got = cufuse.logsumexp(x, axis=1)
    assert got.dtype == np.float16
    assert_close(cp.asnumpy(got), expected(cp.asnumpy(x), 1)[0], np.float16)
    with pytest.raises(TypeError, match="logsumexp: argument 'a'"):
        cufuse.logsumexp(cp.ones(3, dtype=bool))
    zero_d = cufuse.logsumexp(cp.asarray(2.5, dtype=cp.float32))
    assert zero_d.shape == () and float(zero_d) == 2.5
    assert cufuse.logsumexp(cp.asarray(2.5), keepdims=True).shape == (1,)
    value, sign = cufuse.logsumexp(cp.ones((3, 0)), axis=1, return_sign=True)
    assert value.shape == (3,) and bool(cp.all(value == -np.inf)) and bool(cp.all(sign == -1))
    with pytest.raises(TypeError, match="logsumexp: arguments must all be host arrays"):
        cufuse.logsumexp(cp.ones(3), b=np.ones(3))
    assert_close(cp.asnumpy(cufuse.logsumexp(cp.ones(4, cp.float16), b=2.0)), np.log(8) + 1, np.float16)


def test_every_output_written(cp, rng):
    """The outputs come from CuPy's pool: fill the pool's blocks with NaN first, so an
    element the kernel skipped shows up."""
    for shape, axis in (((3000, 100), 1), ((100, 3000), 0), ((7, 100003), 1)):
        junk = cp.full(shape[1 - axis] * 2 + 1024, np.nan, dtype=cp.float32)
        del junk
        a = random(cp, rng, shape, np.float32)
        check(cp, a, axis)


def test_repeated_calls_give_the_same_bits(cp, rng):
    a = random(cp, rng, (5, 400001), np.float32)
    first = cufuse.logsumexp(a, 1)
    for _ in range(3):
        assert bool(cp.all(cufuse.logsumexp(a, 1) == first))
