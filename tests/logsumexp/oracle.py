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


def condition(a, axis, b, keepdims=False):
    """The sum's condition number sum|b e^a| / |sum b e^a| per result (1 without weights):
    signed weights that cancel amplify the float32 accumulation's rounding by this much."""
    if b is None:
        return None
    value, _ = expected(a, axis, b, keepdims)
    magnitude, _ = expected(a, axis, np.abs(np.asarray(b, dtype=np.float64)), keepdims)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(magnitude - value)


def assert_close(got, want, dtype, condition=None):
    """|got - want| <= TOL (1 + |want|), plus TOL x the sum's condition number where given."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    same_non_finite = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isposinf(got), np.isposinf(want)) \
        and np.array_equal(np.isneginf(got), np.isneginf(want))
    assert same_non_finite, (got, want)
    finite = np.isfinite(want)
    slack = 1 + np.abs(want[finite])
    if condition is not None:
        slack = slack + np.broadcast_to(condition, want.shape)[finite]
    err = np.abs(got[finite] - want[finite]) / slack
    assert err.size == 0 or err.max() <= TOL[np.dtype(dtype)], err.max()
