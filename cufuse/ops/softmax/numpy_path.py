"""The fast NumPy path of softmax / log_softmax: SciPy's direct algorithm (max shift, exp, sum)
in float64 with in-place passes over one new buffer. It returns what ``cufuse.reference`` returns
(float64, SciPy's NaN pattern) within float64 rounding; the oracle stays the tiled reference."""
from __future__ import annotations

import numpy as np

# float32 and float64 keep their own dtype for the max (exact either way, half the bytes for
# float32); any other dtype (float16, bfloat16, integers) is converted to float64 once first.
_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def reduction_axes(axis, ndim: int) -> tuple[int, ...]:
    """axis (None, an int or a tuple of ints, negatives allowed) as non-negative axes of ndim."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(int(a) % ndim for a in np.atleast_1d(axis))


def float_input(x) -> np.ndarray:
    """x as an array whose max can be taken exactly: float32 / float64 as they are, others as float64."""
    x = np.asarray(x)
    return x if x.dtype in _NATIVE else x.astype(np.float64)


def shifted(x: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """A new float64 array ``x - shift``: one pass that reads x in its dtype and writes float64."""
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, SciPy's pattern
        return np.subtract(x, shift, dtype=np.float64)


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
