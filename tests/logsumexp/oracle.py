"""Shared helpers of the logsumexp tests: the float64 oracle's result in the op's dtype and
tolerances by dtype."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from cufuse import reference

# |error| <= TOL * (1 + |value|): the value's rounding in its dtype and the float32 sum
TOL = {np.dtype(np.float16): 2e-3, np.dtype(ml_dtypes.bfloat16): 1.6e-2, np.dtype(np.float32): 2e-6,
       np.dtype(np.float64): 1e-12}


def expected(a, axis, b=None, keepdims=False):
    """(value, sign) of the float64 oracle with the API's reduced shape."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = None if b is None else np.asarray(b, dtype=np.float64)
    shape = np.broadcast_shapes(a64.shape, b64.shape) if b64 is not None else a64.shape
    shape = shape or (1,)
    axes = tuple(range(len(shape))) if axis is None else tuple(np.atleast_1d(axis) % len(shape))
    value, sign = reference.logsumexp(a64, axes, b64)
    if not keepdims:
        value, sign = value.squeeze(axes), sign.squeeze(axes)
    return value, sign


def assert_close(got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    same_non_finite = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isposinf(got), np.isposinf(want)) \
        and np.array_equal(np.isneginf(got), np.isneginf(want))
    assert same_non_finite, (got, want)
    finite = np.isfinite(want)
    err = np.abs(got[finite] - want[finite]) / (1 + np.abs(want[finite]))
    assert err.size == 0 or err.max() <= TOL[np.dtype(dtype)], err.max()
