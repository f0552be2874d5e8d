"""The fast NumPy path of softmax / log_softmax: SciPy's direct algorithm (max shift, exp, sum)
in the input's precision (float64, or float32 for float32 and 16-bit inputs: SciPy computes
float32 in float32) with in-place passes over one new buffer. It returns what
``cufuse.reference`` returns (SciPy's NaN pattern) within the rounding of that precision; the
oracle stays the tiled reference. ``axes``: non-negative, as ``normalize_axis`` gives them."""
from __future__ import annotations

import numpy as np

from ..._core.numpy_rows import float_input


def softmax(x, axes) -> np.ndarray:
    """softmax over ``axes`` in ``float_input``'s dtype, as ``reference.softmax``: a row whose max
    is NaN, +inf or -inf (all -inf) is NaN throughout, which SciPy's formula gives without a fix-up."""
    x = float_input(x)
    if x.ndim == 0:  # one element: the whole reduction
        return _softmax(x.reshape(1), (0,)).reshape(())
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    return _softmax(x, axes)


def log_softmax(x, axes) -> np.ndarray:
    """log_softmax over ``axes`` in ``float_input``'s dtype, as ``reference.log_softmax``: SciPy's
    shift by the max, or by 0 where the max is not finite, gives the oracle's NaN / -inf pattern
    as it is."""
    x = float_input(x)
    if x.ndim == 0:
        return _log_softmax(x.reshape(1), (0,)).reshape(())
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    return _log_softmax(x, axes)


# ufunc.reduce and an errstate decorator (per-call state in NumPy 2): each a microsecond off a short call

@np.errstate(invalid="ignore")  # inf - inf is NaN, SciPy's pattern
def _softmax(x, axes):
    e = np.subtract(x, np.maximum.reduce(x, axis=axes, keepdims=True))
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis=axes, keepdims=True)
    return e


@np.errstate(invalid="ignore", over="ignore", divide="ignore")
def _log_softmax(x, axes):
    top = np.maximum.reduce(x, axis=axes, keepdims=True)
    top[~np.isfinite(top)] = 0.0
    t = np.subtract(x, top)
    t -= np.log(np.add.reduce(np.exp(t), axis=axes, keepdims=True))
    return t
