"""logsumexp over Dask arrays.

a and b (broadcast together, b chunked as a) give each block's partial ``(log|S|, sign S)`` of
its part of every row (``cufuse.logsumexp(..., keepdims=True, return_sign=True)``, a cufuse
kernel on CuPy chunks), in the accumulator dtype; the partials of a row merge in a tree
(``dask.array.reduction``) as one more logsumexp, the values weighted by their signs. Rows whole
in one chunk take the same path (one partial a row).
"""
from __future__ import annotations

import functools

import numpy as np

import dask.array as da

from .. import logsumexp as _logsumexp
from .._core.dtypes import accumulator_dtype, is_supported_float
from .._core.validate import normalize_axis, require_bool
from ..ops.logsumexp.api import result_dtype
from ._common import array_module, as_dask, meta

FN = "logsumexp"
QUALIFIED = f"cufuse.dask.{FN}"


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``cufuse.logsumexp`` over a Dask array of NumPy or CuPy chunks: a lazy Dask array.

    Parameters
    ----------
    a : dask.array.Array or array
        A Dask array of NumPy or CuPy chunks (a NumPy / CuPy array is one chunk).
    axis : None, int or tuple of ints, optional
        The axes summed over (None, the default: every element); they may span chunks.
    b : dask.array.Array, array or number, optional
        Weights broadcast with a (a Dask array is rechunked as a); a Python number does not promote, as eager.
    keepdims : bool, optional
        Keep the reduced axes with size 1.
    return_sign : bool, optional
        Return ``(value, sign)``.

    Returns
    -------
    value : dask.array.Array
        Lazy, with SciPy's dtypes and rules as the eager function (integer or bool a and b: float64).
    sign : dask.array.Array
        With ``return_sign`` only: +1, -1, 0 or NaN.

    Raises
    ------
    TypeError
        a or b not an array or of an unsupported dtype; flags without a truth value; an axis of another type.
        Messages name ``cufuse.dask.logsumexp``.
    ValueError
        A b that does not broadcast with a; repeated or out-of-range axes.

    Notes
    -----
    Each block gives the partial ``(log|S|, sign S)`` of its part of every row (``cufuse.logsumexp`` with
    ``keepdims`` and ``return_sign``: a cufuse kernel on CuPy chunks) in the accumulator dtype; the partials
    of a row merge in a tree as one more logsumexp, the values weighted by their signs. Rows whole in one
    chunk take the same path. An empty reduction gives -inf (sign -1), as the eager function.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> a = da.from_array(np.array([[1.0, 2.0, 3.0, 4.0]]), chunks=(1, 2))
    >>> np.round(cufuse.dask.logsumexp(a, axis=1).compute(), 4)
    array([4.4402])
    >>> value, sign = cufuse.dask.logsumexp(a, axis=1, b=-1.0, return_sign=True)
    >>> np.round(value.compute(), 4), sign.compute()
    (array([4.4402]), array([-1.]))
    """
    keepdims = require_bool(QUALIFIED, "keepdims", keepdims)
    return_sign = require_bool(QUALIFIED, "return_sign", return_sign)
    a = as_dask(FN, "a", a)
    weak_b = b is not None and type(b) in (bool, int, float)  # a Python scalar: no promotion, as eager
    b_arr = None if b is None or weak_b else as_dask(FN, "b", b)
    dtype = _result_dtype(a, b_arr)
    if a.ndim == 0:  # SciPy: a 0-d a is one element
        a = a.reshape(1)
    if b_arr is not None:
        try:
            shape = np.broadcast_shapes(a.shape, b_arr.shape)
        except ValueError:
            raise ValueError(f"{QUALIFIED}: argument 'b' expected a shape broadcastable with a's {a.shape}, got "
                             f"{b_arr.shape}") from None
        a = da.broadcast_to(a, shape)
        b_arr = da.broadcast_to(b_arr, shape).rechunk(a.chunks)
    axes = normalize_axis(QUALIFIED, axis, a.ndim)
    acc = accumulator_dtype(dtype)
    final = tuple(1 if d in axes else n for d, n in enumerate(a.shape)) if keepdims else tuple(
        n for d, n in enumerate(a.shape) if d not in axes)
    if any(a.shape[d] == 0 for d in axes) or not axes:
        value, sign = _direct(a, b if weak_b else b_arr, axes, dtype)
    else:
        chunk = functools.partial(_chunk, weights=b if weak_b else None, acc=acc)
        arrays = (a,) if b_arr is None else (a, b_arr)
        partials = da.map_blocks(chunk, *arrays, axes=axes, dtype=acc, new_axis=a.ndim,
                                 chunks=tuple(tuple(1 for _ in c) if d in axes else c for d, c in enumerate(a.chunks))
                                 + ((2,),), meta=meta(a, acc, a.ndim + 1))
        merged = da.reduction(partials, _identity, _merge, combine=_merge, axis=axes, keepdims=True, dtype=acc,
                              concatenate=True, meta=meta(a, acc, a.ndim + 1))
        value, sign = merged[..., 0], merged[..., 1]
        if not return_sign:  # SciPy: a negative sum without its sign is NaN
            value = da.where(sign < 0, np.nan, value)
        value, sign = value.astype(dtype), sign.astype(dtype)
    value, sign = value.reshape(final), sign.reshape(final)
    return (value, sign) if return_sign else value


def _result_dtype(a, b):
    try:
        return result_dtype(a, b)
    except TypeError as exc:  # the eager message, qualified
        raise TypeError(f"cufuse.dask.{exc}") from None


def _direct(a, b, axes, dtype):
    """An empty reduction (-inf, sign -1) or none at all (each element its own row): one eager
    call a block, kept dims."""
    call = functools.partial(_logsumexp, axis=axes, keepdims=True, return_sign=True)
    if axes and any(a.shape[d] == 0 for d in axes):
        kept = tuple(1 if d in axes else n for d, n in enumerate(a.shape))
        xp = array_module(a._meta)
        return (da.from_array(xp.full(kept, -np.inf, dtype=dtype), asarray=False),
                da.from_array(xp.full(kept, -1, dtype=dtype), asarray=False))
    arrays = (a,) if not isinstance(b, da.Array) else (a, b)
    value = da.map_blocks(lambda *blocks: call(blocks[0], b=blocks[1] if len(blocks) > 1 else b)[0], *arrays,
                          dtype=dtype, meta=meta(a, dtype, a.ndim))
    sign = da.map_blocks(lambda *blocks: call(blocks[0], b=blocks[1] if len(blocks) > 1 else b)[1], *arrays,
                         dtype=dtype, meta=meta(a, dtype, a.ndim))
    return value, sign


def _chunk(block, weights_block=None, *, axes, weights, acc):
    """This block's (value, sign) of each row part, in the accumulator dtype, stacked last."""
    xp = array_module(block)
    block = block.astype(acc) if is_supported_float(block.dtype) else block
    b = weights if weights_block is None else weights_block
    if b is not None and not isinstance(b, (bool, int, float)) and is_supported_float(b.dtype):
        b = b.astype(acc)
    value, sign = _logsumexp(block, axis=axes, b=b, keepdims=True, return_sign=True)
    return xp.stack([xp.asarray(value, dtype=acc), xp.asarray(sign, dtype=acc)], axis=-1)


def _identity(block, axis, keepdims):
    return block


def _merge(parts, axis, keepdims):
    """Partials (value, sign) concatenated along the reduced axes, merged into one a row: the
    logsumexp of the values weighted by their signs."""
    xp = array_module(parts)
    value, sign = _logsumexp(parts[..., 0], axis=tuple(axis), b=parts[..., 1], keepdims=True, return_sign=True)
    return xp.stack([xp.asarray(value, dtype=parts.dtype), xp.asarray(sign, dtype=parts.dtype)], axis=-1)
