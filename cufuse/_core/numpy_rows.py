"""Shared pieces of the fast NumPy paths of the row reductions (softmax, log_softmax,
logsumexp): the reduction axes, the input in a dtype whose max is exact, and the shifted copy."""
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
