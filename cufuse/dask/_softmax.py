"""softmax / log_softmax over Dask arrays.

Rows whole in each chunk (every reduced axis one chunk): one cufuse call a chunk
(``map_blocks``), one read and one write. Rows across chunks: each chunk's partial logsumexp
in one read (``partials.partial_lse``, a cufuse kernel on the GPU), the partials merged by
the online rule in a tree (``dask.array.reduction`` with ``concatenate=False``), then a
second pass writes ``exp(x - lse)`` (``partials.apply_lse``): two reads and one write, the
second read inherent when a row spans devices (``cufuse.traffic.softmax(...,
split_rows=True)``).
"""
from __future__ import annotations

import functools

import numpy as np

import dask.array as da

from .. import softmax as _softmax_fn, log_softmax as _log_softmax_fn
from .._core.dtypes import accumulator_dtype, shifted_by
from .._core.validate import normalize_axis
from ..ops.softmax import partials
from ..ops.softmax.api import result_dtype
from ._common import array_module, as_dask, flatten, meta


def softmax(x, axis=None):
    """``cufuse.softmax`` over a Dask array of NumPy or CuPy chunks: a lazy Dask array.

    Parameters
    ----------
    x : dask.array.Array or array
        A Dask array of NumPy or CuPy chunks (a NumPy / CuPy array is taken as one chunk); the dtypes of
        ``cufuse.softmax``.
    axis : None, int or tuple of ints, optional
        The axes reduced together as one row; None (the default) reduces the whole array. They may span
        chunks.

    Returns
    -------
    dask.array.Array
        Lazy, x's shape and chunks, the dtype ``cufuse.softmax`` gives (integers: the dtype ``np.exp`` gives
        them), its meta of x's chunk type.

    Raises
    ------
    TypeError
        x not an array, of bool or another unsupported dtype; an axis of another type. Messages name
        ``cufuse.dask.softmax``.
    ValueError
        Repeated axes, or an axis out of range (``numpy.exceptions.AxisError``).

    Notes
    -----
    Rows whole in each chunk (every reduced axis one chunk): one ``cufuse.softmax`` call a chunk, one read and
    one write. Rows across chunks: each chunk's partial logsumexp in one read (a cufuse kernel on CuPy
    chunks), the partials merged by the online rule (a running max ``m``, the sums rescaled by
    ``exp(m - m')``) in a tree, then a second pass writes ``exp(x - lse)``: two reads and one write, the
    second read inherent when a row spans devices. Integer rows across chunks are shifted by their maximum in
    the integer dtype first, as the eager function. Needs the extra ``dask``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]])
    >>> p = cufuse.dask.softmax(da.from_array(x, chunks=(1, 2)), axis=1)  # each row across two chunks
    >>> p.chunks
    ((1,), (2, 2))
    >>> np.round(p.compute(), 4)
    array([[0.0321, 0.0871, 0.2369, 0.6439]])
    >>> np.allclose(p.compute(), cufuse.softmax(x, axis=1))
    True
    """
    return _dask_softmax("softmax", x, axis, log=False)


def log_softmax(x, axis=None):
    """``cufuse.log_softmax`` over a Dask array of NumPy or CuPy chunks: a lazy Dask array.

    Parameters
    ----------
    x : dask.array.Array or array
        A Dask array of NumPy or CuPy chunks (a NumPy / CuPy array is one chunk); ``cufuse.log_softmax``'s
        dtypes.
    axis : None, int or tuple of ints, optional
        The axes reduced together as one row (None, the default: the whole array); they may span chunks.

    Returns
    -------
    dask.array.Array
        Lazy, x's shape and chunks, ``cufuse.log_softmax``'s dtype.

    Raises
    ------
    TypeError
        x not an array, of bool or another unsupported dtype; an axis of another type (messages name
        ``cufuse.dask.log_softmax``).
    ValueError
        Repeated or out-of-range axes.

    Notes
    -----
    The passes of ``cufuse.dask.softmax``: one call a chunk where rows are whole, else partial logsumexps
    merged in a tree and a second pass that writes ``x - lse``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> x = da.from_array(np.array([[1.0, 2.0, 3.0, 4.0]]), chunks=(1, 2))
    >>> np.round(cufuse.dask.log_softmax(x, axis=-1).compute(), 4)
    array([[-3.4402, -2.4402, -1.4402, -0.4402]])
    """
    return _dask_softmax("log_softmax", x, axis, log=True)


def _dask_softmax(fn, x, axis, *, log):
    x = as_dask(fn, "x", x)
    dtype = result_dtype(f"cufuse.dask.{fn}", x)
    axes = normalize_axis(f"cufuse.dask.{fn}", axis, x.ndim)
    out_meta = meta(x, dtype, x.ndim)
    if all(x.numblocks[a] == 1 for a in axes):
        return x.map_blocks(_whole_rows, axes=axes, log=log, dtype=dtype, meta=out_meta)
    if x.dtype.kind in "iu" and x.size:  # shifted by the rows' maximum in the integer dtype, as eager
        top = x.max(axis=axes, keepdims=True)
        x = da.map_blocks(_shift, x, top, result_dtype=dtype, dtype=dtype, meta=out_meta)
    lse_dtype = np.dtype(np.float64) if isinstance(x._meta, np.ndarray) else accumulator_dtype(dtype)
    lse = da.reduction(x, functools.partial(_chunk_lse, result_dtype=dtype), _merge_partials, axis=axes,
                       keepdims=True, dtype=lse_dtype, combine=_merge_partials, concatenate=False,
                       meta=meta(x, lse_dtype, x.ndim))
    return da.map_blocks(_apply, x, lse, axes=axes, log=log, result_dtype=dtype, dtype=dtype, meta=out_meta)


def _shift(block, top, result_dtype):
    return shifted_by(array_module(block), block, top, result_dtype)


def _whole_rows(block, axes, log):
    return (_log_softmax_fn if log else _softmax_fn)(block, axis=axes if block.ndim else None)


def _chunk_lse(block, axis, keepdims, result_dtype):
    return partials.partial_lse(block if block.dtype == result_dtype else block.astype(result_dtype), tuple(axis))


def _merge_partials(parts, axis, keepdims):
    if not isinstance(parts, (list, tuple)):  # Dask's meta call on an empty array
        return parts
    blocks = flatten(parts)
    return partials.merge_lse(blocks, array_module(blocks[0]))


def _apply(block, lse, axes, log, result_dtype):
    return partials.apply_lse(block if block.dtype == result_dtype else block.astype(result_dtype), lse, axes, log)
