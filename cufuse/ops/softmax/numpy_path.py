"""The fast NumPy path of softmax / log_softmax: SciPy's direct algorithm (max shift, exp, sum)
in float64 with in-place passes over one new buffer. It returns what ``cufuse.reference`` returns
(float64, SciPy's NaN pattern) within float64 rounding; the oracle stays the tiled reference."""
from __future__ import annotations

import numpy as np

from ..._core.numpy_rows import float_input, reduction_axes, shifted

def softmax(x, axis=None) -> np.ndarray:
    """float64 softmax over ``axis``, as ``reference.softmax``: a row whose max is NaN, +inf or
    -inf (all -inf) is NaN throughout, which SciPy's formula gives without a fix-up."""
    x = float_input(x)
    if x.ndim == 0:  # one element: the whole reduction
        return softmax(x.reshape(1), 0).reshape(())
    if x.size == 0:
        return np.zeros(x.shape)
    axes = reduction_axes(axis, x.ndim)
    e = shifted(x, x.max(axis=axes, keepdims=True))
    with np.errstate(invalid="ignore", over="ignore"):
        np.exp(e, out=e)
        e /= e.sum(axis=axes, keepdims=True)
    return e


def log_softmax(x, axis=None) -> np.ndarray:
    """float64 log_softmax over ``axis``, as ``reference.log_softmax``: SciPy's shift by the max,
    or by 0 where the max is not finite, gives the oracle's NaN / -inf pattern as it is."""
    x = float_input(x)
    if x.ndim == 0:
        return log_softmax(x.reshape(1), 0).reshape(())
    if x.size == 0:
        return np.zeros(x.shape)
    axes = reduction_axes(axis, x.ndim)
    top = x.max(axis=axes, keepdims=True).astype(np.float64)
    top[~np.isfinite(top)] = 0.0
    t = shifted(x, top)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        total = np.exp(t).sum(axis=axes, keepdims=True)
        t -= np.log(total)
    return t
