"""The GPU kernels against the float64 oracle (and SciPy's rules) on fresh random inputs:
every dispatch branch, misaligned and strided views, weights, signs, non-finite rows."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cufuse
from cufuse._core.device import current_device_info
from cufuse.ops.logsumexp import select
from cufuse.ops.logsumexp.plan import plan_logsumexp
from cufuse.ops.logsumexp.variants import ColsConfig, RowsConfig

from ..conftest import GPU
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
        check(cp, a[:, 1:], 1, config=RowsConfig(threads=256, group=256, vecs=4, parts=parts))
    c = random(cp, rng, (5000, 70), dtype)
    for parts in (2, 9):
        check(cp, c, 0, config=ColsConfig(slices=8, unroll=16 if np.dtype(dtype).itemsize == 2 else 8, parts=parts))


def _kernel(a, axis):
    """The kernel the default plan runs for a (without weights) reduced over ``axis``."""
    strides = tuple(s // a.dtype.itemsize for s in a.strides)
    plan = plan_logsumexp(a.shape, strides, None, a.dtype, (axis,), a.data.ptr % 16 == 0, current_device_info())
    return plan.launches[0].spec.name


def _poison_pool(cp, nbytes):
    """NaN in the memory the pool hands out next, so a result the kernel skipped shows up."""
    junk = cp.full(nbytes // 4 + 1024, np.nan, dtype=cp.float32)
    del junk


@pytest.fixture(scope="module")
def short_kernels():
    """The short-column kernels compiled in parallel, once (NVRTC inside the tests is serial)."""
    if not GPU:
        pytest.skip("no CUDA GPU present")
    from cufuse._core.loader import arch_for, precompile

    specs = [c.spec(np.dtype(d), w) for d in DTYPES for w in (False, True)
             for c in [select.SHORT] + [select.short_vec(n, w) for n in (4, 8, 16)]]
    precompile(specs, arch_for(current_device_info().cc), jobs=16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_columns(cp, rng, short_kernels, dtype):
    """Rows of 1 to 16 elements in the column layout: logsumexp_cols_short_vec (a thread a
    16-byte vector of rows, rungs of 4, 8, 16) where aligned -- row counts not a multiple of a
    block's 128 vectors --, logsumexp_cols_short where the row count or a's base is off the
    vector; weights of the same layout (vector loads), broadcast along the rows (stride 0) and
    off 16 bytes (element loads), signed so that sums go negative; every value and sign written."""
    vs = 16 // np.dtype(dtype).itemsize
    for length in range(1, 17):
        for columns, kernel in ((300 * vs, "logsumexp_cols_short_vec"), (300 * vs + 3, "logsumexp_cols_short")):
            a = random(cp, rng, (length, columns), dtype)
            assert _kernel(a, 0) == kernel
            _poison_pool(cp, 2 * columns * 8)
            check(cp, a, 0)
            b = random(cp, rng, (length, columns), dtype, scale=1.0)
            b[length // 2, ::5] = 0  # dropped entries
            check(cp, a, 0, b)
    a = random(cp, rng, (7, 64 * vs), dtype)
    for b_shape in ((7, 1), (64 * vs,), ()):  # broadcast along the rows, along the reduced axis, a scalar
        check(cp, a, 0, random(cp, rng, b_shape, dtype, scale=1.0))
    b = random(cp, rng, (7 * 64 * vs + 1,), dtype, scale=1.0)[1:].reshape(7, 64 * vs)  # weights off 16 bytes
    check(cp, a, 0, b)
    view = strided_view(cp, rng, (9, 64 * vs), (64 * vs, 1), dtype, 1)  # a's base off 16 bytes
    assert _kernel(view, 0) == "logsumexp_cols_short"
    check(cp, view, 0)
    a = random(cp, rng, (64 * vs, 5), dtype)  # the last axis of a transposed view: adjacent rows on the outer axis
    assert _kernel(cp.ascontiguousarray(a.T).T, 1) == "logsumexp_cols_short_vec"
    check(cp, cp.ascontiguousarray(a.T).T, 1)
    x = random(cp, rng, (3, 11, 24 * vs), dtype)  # a short middle axis (outer > 1)
    assert _kernel(x, 1) == "logsumexp_cols_short_vec"
    check(cp, x, 1, keepdims=True)
    check(cp, x, 1, random(cp, rng, (11, 1), dtype, scale=1.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_columns_non_finite(cp, rng, short_kernels, dtype):
    """SciPy's rules in short columns, inside the vectors of finite ones: NaN, +inf, all -inf,
    -inf over half, +inf with NaN, a negative sum, every entry dropped, a dropped +inf, +inf
    with weights of both signs; both kernels, every rung."""
    vs = 16 // np.dtype(dtype).itemsize
    for length in (1, 2, 3, 8, 11, 16):
        for columns in (16 * vs, 16 * vs + 1):
            a = rng.standard_normal((length, columns)) * 4
            b = np.ones((length, columns))
            a[length // 2, 0] = np.nan
            a[-1, 1] = np.inf
            a[:, 2] = -np.inf
            a[length // 2:, 3] = -np.inf
            a[0, 4], a[-1, 4] = np.inf, np.nan
            b[0, 5] = -1
            a[0, 5] = a[:, 5].max() + 2  # a negative sum
            b[:, 6] = 0  # every entry dropped
            a[0, 7], b[0, 7] = np.inf, 0  # a dropped +inf
            a[:2, 8], b[:2, 8] = np.inf, [1, -1][:min(2, length)]  # +inf with weights of both signs
            a, b = cp.asarray(a.astype(dtype)), cp.asarray(b.astype(dtype))
            check(cp, a, 0)
            check(cp, a, 0, b)


def test_integer_zero_d_and_empty(cp, rng):
    """Integers and bools give float64 (SciPy's logsumexp), integers shifted by their maximum
    in the integer dtype; an empty reduction is -inf (sign -1), as on the NumPy path."""
    for dtype in (np.int8, np.uint8, np.int16, bool):
        x = cp.asarray(rng.integers(-100, 100, (5, 77)).astype(dtype))
        got = cufuse.logsumexp(x, axis=1)
        assert got.dtype == np.float64
        assert_close(cp.asnumpy(got), expected(cp.asnumpy(x), 1)[0], np.float64)
    big = np.iinfo(np.int64).max - rng.integers(0, 30, (4, 9))
    b = rng.integers(0, 2, (4, 9)).astype(np.float16)
    for weights in (None, b):
        got = cufuse.logsumexp(cp.asarray(big), axis=1, b=None if weights is None else cp.asarray(weights))
        np.testing.assert_allclose(cp.asnumpy(got), cufuse.logsumexp(big, axis=1, b=weights), rtol=1e-15)
    for shape, kwargs in (((0,), {}), ((3, 0), {"axis": -1}), ((3, 0), {"axis": 1, "keepdims": True}),
                          ((0,), {"b": cp.zeros(0)}), ((3, 0), {"axis": -1, "b": cp.ones((3, 0))})):
        got = cufuse.logsumexp(cp.zeros(shape), **kwargs)
        want = cufuse.logsumexp(np.zeros(shape), **{k: cp.asnumpy(v) if k == "b" else v for k, v in kwargs.items()})
        assert got.shape == np.shape(want) and bool(cp.all(got == -np.inf))
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
