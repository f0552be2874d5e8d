"""The fast NumPy path of logsumexp: max shift, exp, weight, sum over one new buffer, in the
precision of a and b promoted (float64 for float64 or integer a and for weights that promote
float32 to float64, float32 otherwise: SciPy computes float32 in float32). It returns what
``cufuse.reference.logsumexp`` returns (``(value, sign)`` with kept dims, every one of its
non-finite rules) within the rounding of that precision; the oracle stays the tiled reference."""
from __future__ import annotations

import numpy as np

from ... import reference
from ..._core.numpy_rows import float_input


def logsumexp(a, axes, b=None):
    """``(log|S|, sign(S))`` with S the sum over ``axes`` (non-negative axes of the broadcast
    shape) of ``b * exp(a)``, dims kept, in a's ``float_input`` dtype promoted with b's; a and b
    broadcast together (a 0-d a is one element), as ``reference.logsumexp``: zero weights drop
    their entries, NaN kept is NaN, +inf entries give the infinity of their weights' sign, an
    empty or all -inf sum is -inf with sign 0, and a non-finite row with a dropped +inf or NaN
    entry is NaN."""
    a = np.atleast_1d(float_input(a))
    w = None if b is None else np.atleast_1d(np.asarray(b))
    dtype = a.dtype if w is None else np.result_type(a.dtype, w.dtype)
    shape = a.shape if w is None else np.broadcast_shapes(a.shape, w.shape)
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    if 0 in shape:
        return np.full(kept, -np.inf, dtype), np.zeros(kept, dtype)
    a = np.broadcast_to(a, shape)
    if w is not None and not (np.isfinite(w).all() and w.all()):
        return _weighted_exact(a, w, axes)
    top = a.max(axis=axes, keepdims=True).astype(dtype, copy=False)
    if w is not None and (top == np.inf).any():
        return _weighted_exact(a, w, axes)
    # Without weights (or with finite nonzero ones and no +inf max) a shift of 0 where the max is
    # not finite gives the oracle's +inf, -inf (sign 0) and NaN rows without a fix-up.
    top[~np.isfinite(top)] = 0.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        t = np.subtract(a, top, dtype=dtype)
        np.exp(t, out=t)
        if w is not None:
            t *= w
        total = t.sum(axis=axes, keepdims=True)
        value = top + np.log(np.abs(total))
    sign = np.sign(total)
    sign[np.isnan(value)] = np.nan
    return value, sign


def _weighted_exact(a, w, axes):
    """The oracle's rules for weights with zeros or non-finite values, or a +inf max under
    weights (where exp(a) alone would overflow or underflow into inf * 0): the tiled oracle with
    one tile the whole row, a single vectorised pass (float64)."""
    row = max(1, int(np.prod([a.shape[d] for d in axes], dtype=np.int64)))
    return reference.logsumexp(a, axes, w, tile=row)
