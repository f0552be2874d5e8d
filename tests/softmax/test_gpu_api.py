"""softmax's public functions on the GPU: axis forms, strided views and the explicit-copy
path, integer and bool inputs, empty arrays, the repeated-signature fast path, one launch and
no allocation per call, offsets past 2**31."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse import reference

from ..conftest import allocations, poisoned
from .oracle import FN, SCIPY, TOL, check, graph_nodes, random


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_axis_forms(cp, rng, dtype, log):
    x = random(cp, rng, (6, 35, 129), dtype)
    for axis in (None, 0, 1, 2, -1, -2, (0, 1), (1, 2), (0, 2), (0, 1, 2), (-1, 0)):
        axes = None if axis is None else tuple(sorted(a % 3 for a in np.atleast_1d(axis)))
        check(cp, x, axes if axis is not None else None, log, out=poisoned(cp, x.shape, x.dtype))
    check(cp, random(cp, rng, (), dtype), None, log)
    check(cp, random(cp, rng, (5,), dtype), 0, log)


@pytest.mark.parametrize("log", [False, True])
def test_axis_argument_forms_as_given(cp, rng, log):
    x = random(cp, rng, (6, 35, 129), np.float32)
    for axis in (-1, -2, (-1, 0), (2, 1), np.int64(1)):
        result = FN[log](x, axis=axis)
        expected = SCIPY[log](cp.asnumpy(x).astype(np.float64), axis=axis)
        np.testing.assert_allclose(cp.asnumpy(result), expected, rtol=3e-5, atol=2e-5 if log else 1e-9)


def test_repeated_signature_fast_path(cp, rng):
    """The second call of a signature skips validation and planning: fresh data still gives
    fresh results, and an out overlapping x is still refused."""
    out = cp.empty((300, 1000), dtype=cp.float32)
    for _ in range(2):
        x = random(cp, rng, (300, 1000), np.float32)
        check(cp, x, -1, False, out=out)
    with pytest.raises(ValueError, match="overlap"):
        cufuse.softmax(x, axis=-1, out=x)


@pytest.mark.parametrize("log", [False, True])
def test_strided_views(cp, rng, log):
    base = random(cp, rng, (64, 2050), np.float32)
    views = [
        base[:, ::2],  # strided reduced axis (scalar loads)
        base[:, 1:],  # misaligned rows (scalar path)
        base[:, :1023],  # odd length, aligned rows: vector body + scalar tail
        base[::-1, ::-1],  # negative strides
        base.T,  # reduced axis 0 contiguous in memory
        base[::3],  # row stride 3 x 2050
    ]
    for view in views:
        for axis in ((view.ndim - 1,), (0,), None):
            check(cp, view, axis, log, out=poisoned(cp, view.shape, view.dtype))
    three = random(cp, rng, (10, 12, 300), np.float32)[::2, ::3, 1:]  # does not collapse: copy path
    check(cp, three, (2,), log)
    check(cp, three, (0, 2), log)


@pytest.mark.parametrize("dtype, result_dtype", [(np.int32, np.float64), (np.uint8, np.float16), (np.int16, np.float32)])
@pytest.mark.parametrize("log", [False, True])
def test_integer_inputs_take_the_dtype_np_exp_gives_them(cp, rng, dtype, result_dtype, log):
    x = cp.asarray(rng.integers(0, 50, size=(17, 301)).astype(dtype))
    result = check(cp, x, (1,), log, scipy_too=True)
    assert result.dtype == result_dtype


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16, np.int64])
@pytest.mark.parametrize("log", [False, True])
def test_integers_are_shifted_by_their_maximum(cp, rng, dtype, log):
    """Rows at the top of the dtype's range (int64 past 2^53: the conversion alone loses their
    differences) and rows spanning it (SciPy's x - max would wrap): the NumPy path's values."""
    info = np.iinfo(dtype)
    x = (info.max - rng.integers(0, 40, (6, 301))).astype(dtype)
    x[0, :2] = info.min, info.max
    got = FN[log](cp.asarray(x), axis=1)
    want = FN[log](x, axis=1)
    assert got.dtype == want.dtype
    tol = {2: 2e-3, 4: 1e-6, 8: 1e-12}[want.dtype.itemsize]
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_allclose(cp.asnumpy(FN[False](cp.asarray(np.array([2**62, 2**62 + 1])))),
                               [0.2689414213699951, 0.7310585786300049], rtol=1e-15)


@pytest.mark.parametrize("log", [False, True])
def test_bool_inputs_are_refused_as_scipy_refuses_them(cp, log):
    with pytest.raises(TypeError, match="expected a float16, bfloat16, float32, float64 or integer array"):
        FN[log](cp.ones((3, 4), dtype=bool), axis=1)


@pytest.mark.parametrize("log", [False, True])
def test_empty_arrays(cp, log):
    for shape, axis in [((0,), None), ((3, 0), 1), ((0, 5), 1), ((0, 5), 0)]:
        x = cp.empty(shape, dtype=cp.float32)
        result = FN[log](x, axis=axis)
        assert result.shape == shape and result.dtype == cp.float32


@pytest.mark.parametrize(
    "shape,axis,kernel",
    [
        ((4096, 32), -1, "softmax_rows"),
        ((1024, 1024), -1, "softmax_rows"),
        ((64, 9000), -1, "softmax_block_rows"),  # one block a row, its width sized to the row
        ((64, 16384), -1, "softmax_rows_stashed"),  # 512 x 8 block rows would keep one row an SM
        ((16, 1 << 15), -1, "softmax_rows_stashed"),  # past the block rungs (2-/4-byte types)
        ((16, 1 << 17), -1, "softmax_rows_split"),  # past the stashed rungs
        ((16, 1 << 18), -1, "softmax_rows_stashed_cluster"),  # float32 rows filling a stashed cluster
        ((4096, 300), 0, "softmax_cols_split"),  # leading axis: no transposed copy (the scratch is reused)
        ((24577, 64), 0, "softmax_cols_split"),  # columns longer than one block's part
        ((300000, 16), 0, "softmax_cols_vec_cluster"),  # longer than the column split holds
        ((4096, 301), 0, "softmax_cols_cluster"),
        ((8, 64, 64), None, "softmax_rows_stashed"),  # axis=None of a contiguous array: one row
        ((4, 1 << 20), -1, "softmax_rows_split"),  # the scratch is reused: no memset
    ],
)
def test_one_launch_and_no_allocation_besides_out(cp, rng, shape, axis, kernel):
    x = random(cp, rng, shape, np.float32)
    out = cp.empty_like(x)
    call = lambda: cufuse.softmax(x, axis=axis, out=out)  # noqa: E731
    call()  # compile and warm the memory pool outside the measurements
    cp.cuda.Device().synchronize()
    assert len(allocations(cp, call)[1]) == 0
    assert len(allocations(cp, lambda: cufuse.softmax(x, axis=axis))[1]) == 1
    dot, nodes = graph_nodes(cp, call)
    assert kernel in dot
    assert nodes == 1, dot


def test_more_than_2_31_elements(cp, rng):
    """float16 (2**15 + 1) x 2**16 = 2**31 + 2**16 elements (4.3 GB): offsets past 2**31.
    Checked on the last rows against the oracle (the whole array on the host would be slow)."""
    rows, cols = (1 << 15) + 1, 1 << 16
    x = cp.empty((rows, cols), dtype=cp.float16)
    x[...] = cp.random.standard_normal((1, cols), dtype=cp.float32).astype(cp.float16)
    x[-3:] = random(cp, rng, (3, cols), np.float16)
    out = poisoned(cp, x.shape, x.dtype)
    cufuse.softmax(x, axis=-1, out=out)
    tol = TOL[np.dtype(np.float16)]
    tail = cp.asnumpy(out[-3:]).astype(np.float64)
    np.testing.assert_allclose(tail, reference.softmax(cp.asnumpy(x[-3:]).astype(np.float64), (1,)), **tol)
    first = cp.asnumpy(out[0]).astype(np.float64)
    np.testing.assert_allclose(first, reference.softmax(cp.asnumpy(x[0]).astype(np.float64), (0,)), **tol)
    assert not bool(cp.isnan(out).any())
    del x, out


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_new_out_in_the_memory_order_of_x(cp, rng, dtype, log):
    """Without out, the result is laid out as x is (NumPy's order 'K'): a transposed view
    reduced over its last axis runs the column kernels, permuted 3-D views whose groups of axes
    collapse only in memory order run without a copy; a given out stays C-contiguous;
    broadcast views and non-dense slices give C order. Repeated calls take the fast path."""
    a = random(cp, rng, (300, 1030), dtype)
    t = a.T
    for _ in range(2):
        result = check(cp, t, 1, log)
        assert result.strides == t.strides and result.flags.f_contiguous
    check(cp, t, 1, log, out=poisoned(cp, t.shape, t.dtype))
    check(cp, t, 0, log)
    b = random(cp, rng, (5, 67, 33), dtype)
    for perm in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0)):
        view = b.transpose(perm)
        for axis in ((0,), (1,), (2,), (1, 2), (0, 1), None):
            result = check(cp, view, axis, log)
            assert result.strides == view.strides
    wide = cp.broadcast_to(random(cp, rng, (1, 129), dtype), (40, 129))
    assert check(cp, wide, 1, log).flags.c_contiguous
    assert check(cp, a.T[::2], 1, log).shape == (515, 300)
