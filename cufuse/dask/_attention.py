"""attention over Dask arrays.

Every (query chunk, key chunk) pair of blocks computes its partial: the attention of its
queries over its keys, normalised, with the lse (``cufuse.attention(..., return_lse=True)``),
stored in the accumulator dtype (float32; float64 for float64) as ``(..., Nq, Dv + 1)``. The
partials of a query chunk merge by the lse rule in a tree (``dask.array.reduction``): weights
``exp(lse_c - max lse)``, the output their weighted mean, the lse ``max + log(sum of
weights)``. Chunks along batch, heads or queries alone are independent blocks. With
``causal=True`` or a ``window`` each block knows its query and key offsets, so the
bottom-right frame of the whole (query i sits at key position ``i + Nk - Nq``) holds: a
block's rows split into runs (``_runs``) that see no key, or keys that one eager call on a
slice of the block's keys gives in its own frame. ``softcap`` applies to every score alike.
``sinks`` join the partials of the first key chunk only (its rows that see no key get lse =
sink), so the lse merge counts each sink once.
"""
from __future__ import annotations

import math

import numpy as np

import dask.array as da

from .. import attention as _attention
from .._core.dtypes import accumulator_dtype
from .._core.validate import (require_bool, require_finite_real, require_float, require_same_dtype, require_sinks,
                              require_softcap, require_window)
from ._common import array_module, as_dask, flatten, meta

FN = "attention"
QUALIFIED = f"cufuse.dask.{FN}"


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None, sinks=None, enable_gqa=False,
              return_lse=False):
    """``cufuse.attention`` over Dask arrays of NumPy or CuPy chunks: a lazy ``out`` (and ``lse``).

    Parameters
    ----------
    q, k, v : dask.array.Array or array
        ``(..., Nq, D)``, ``(..., Nk, D)``, ``(..., Nk, Dv)``, one float dtype, of NumPy or CuPy chunks (a NumPy
        / CuPy array is one chunk). Leading dims broadcast. The head dims D and Dv must be whole in each chunk;
        batch, heads, queries and keys may be chunked (v is rechunked along keys as k).
    causal : bool, optional
        Bottom-right aligned over the whole arrays, as in ``cufuse.attention``.
    scale : float, optional
        ``1/sqrt(D)`` by default.
    window : (left, right), optional
        Sliding window, as in ``cufuse.attention``.
    softcap : float, optional
        Score soft-capping, as in ``cufuse.attention``.
    sinks : array, optional
        float32 ``(H,)`` logits, as in ``cufuse.attention`` (q's batch item b takes ``sinks[b % H]``): a NumPy
        array with NumPy chunks, a CuPy array with CuPy chunks. Only the first key chunk's partials take them.
    enable_gqa : bool, optional
        Grouped-query heads on axis -3, as in ``cufuse.attention``.
    return_lse : bool, optional
        Also return the lse.

    Returns
    -------
    out : dask.array.Array
        Lazy ``(..., Nq, Dv)`` in q's dtype.
    lse : dask.array.Array
        With ``return_lse`` only: ``(..., Nq)`` in the accumulator dtype, float32 (float64 for float64).

    Raises
    ------
    TypeError
        Non-float or mixed dtypes; flags without a truth value; a ``scale``, ``window`` or ``softcap`` of
        another type. Messages name ``cufuse.dask.attention`` and the caller's shapes.
    ValueError
        Inputs with fewer than 2 dims or a head dim across chunks; shapes that do not match or leading dims
        that do not broadcast (or heads that do not group with ``enable_gqa``); invalid ``scale``,
        ``window`` or ``softcap`` values; ``sinks`` that ``cufuse.attention`` refuses.

    Notes
    -----
    Every (query chunk, key chunk) pair of blocks computes its partial: the attention of its queries over its
    keys, normalised, with the lse (``cufuse.attention(..., return_lse=True)``), stored in the accumulator
    dtype. The partials of a query chunk merge by the lse rule in a tree: weights ``exp(lse_c - max lse)``,
    the output their weighted mean, the lse ``max + log(sum of weights)``. Chunks along batch, heads or
    queries alone are independent blocks. With ``causal`` or a ``window`` each block knows its query and key
    offsets, so the bottom-right frame of the whole holds. ``softcap`` applies to every score alike.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, n, 8)) for n in (4, 6, 6))
    >>> out, lse = cufuse.dask.attention(da.from_array(q, chunks=(1, 2, 8)), da.from_array(k, chunks=(1, 3, 8)),
    ...                                  da.from_array(v, chunks=(1, 3, 8)), causal=True, return_lse=True)
    >>> out.shape, lse.dtype
    ((2, 4, 8), dtype('float64'))
    >>> expected, expected_lse = cufuse.attention(q, k, v, causal=True, return_lse=True)
    >>> np.allclose(out.compute(), expected), np.allclose(lse.compute(), expected_lse)
    (True, True)
    """
    q, k, v = (as_dask(FN, name, a) for name, a in (("q", q), ("k", k), ("v", v)))
    for name, a in (("q", q), ("k", k), ("v", v)):
        require_float(QUALIFIED, name, a)
        if a.ndim < 2 or a.numblocks[-1] != 1:
            raise ValueError(f"{QUALIFIED}: argument '{name}' expected at least 2 dims with the last (head dim) "
                             f"in one chunk, got shape {a.shape} with chunks {a.chunks}")
    require_same_dtype(QUALIFIED, "q", q, k=k, v=v)
    causal, return_lse = require_bool(QUALIFIED, "causal", causal), require_bool(QUALIFIED, "return_lse", return_lse)
    window, softcap = require_window(QUALIFIED, window), require_softcap(QUALIFIED, softcap)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else require_finite_real(QUALIFIED, "scale", scale)
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        raise ValueError(f"{QUALIFIED}: arguments 'q', 'k', 'v' expected (..., Nq, D), (..., Nk, D), "
                         f"(..., Nk, Dv), got {q.shape}, {k.shape}, {v.shape}")
    shapes = q.shape, k.shape, v.shape  # the caller's, for the messages
    heads = None
    if require_bool(QUALIFIED, "enable_gqa", enable_gqa):
        q, k, v, heads = _group_heads(q, k, v)
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"{QUALIFIED}: arguments 'q', 'k', 'v' expected leading dims that broadcast (grouped-query "
                         f"heads: enable_gqa=True), got {shapes[0]}, {shapes[1]}, {shapes[2]}") from None
    sink_items = None if sinks is None else _sink_items(sinks, q, batch)
    n_q, n_k, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    acc = accumulator_dtype(q.dtype)
    v = v.rechunk({v.ndim - 2: k.chunks[-2]})
    letters = list("ghijlmnoprstuvwxyz"[:len(batch)])  # the batch dims' indices (c, d, e, f, q: the others)
    unique = iter(chr(ord("A") + i) for i in range(26))

    def index(a, tail):  # a's batch dims: the batch's letter, or a letter of its own where it broadcasts
        lead = a.ndim - 2
        own = [letters[len(batch) - lead + i] if a.shape[i] == batch[len(batch) - lead + i] else next(unique)
               for i in range(lead)]
        return "".join(own) + tail

    partial_index = "c" + "".join(letters) + "qf"
    partials = da.blockwise(
        _partial, partial_index, q, index(q, "qd"), k, index(k, "cd"), v, index(v, "ce"),
        da.arange(n_k, chunks=k.chunks[-2:-1]), "c", da.arange(n_q, chunks=q.chunks[-2:-1]), "q",
        sink_items, None if sink_items is None else index(q, ""),
        adjust_chunks={"c": 1}, new_axes={"f": dv + 1}, concatenate=True, dtype=acc,
        meta=meta(q, acc, len(partial_index)), causal=causal, scale=scale, window=window, softcap=softcap, n_q=n_q,
        n_k=n_k)
    merged = da.reduction(partials, _identity, _merge, axis=0, keepdims=False, dtype=acc, combine=_merge,
                          concatenate=False, meta=meta(q, acc, len(partial_index) - 1))
    out = merged[..., :dv].astype(q.dtype)
    lse = merged[..., dv]
    if heads is not None:
        out, lse = heads(out), heads(lse[..., None])[..., 0]
    return (out, lse) if return_lse else out


def _group_heads(q, k, v):
    """SDPA's grouped-query layout on axis -3 as the broadcast form, and the map back."""
    if min(q.ndim, k.ndim, v.ndim) < 3 or k.shape[-3] != v.shape[-3] or k.shape[-3] == 0 or q.shape[-3] % k.shape[-3]:
        raise ValueError(f"{QUALIFIED}: arguments 'q', 'k', 'v' expected (..., Hq, Nq, D) and (..., Hkv, Nk, D) "
                         f"with Hq % Hkv == 0 (enable_gqa=True), got {q.shape}, {k.shape}, {v.shape}")
    hkv, group = k.shape[-3], q.shape[-3] // k.shape[-3]
    q = q.reshape(q.shape[:-3] + (hkv, group) + q.shape[-2:])

    def ungroup(a):
        return a.reshape(a.shape[:-4] + (hkv * group,) + a.shape[-2:])

    return q, k[..., None, :, :], v[..., None, :, :], ungroup


def _sink_items(sinks, q, batch):
    """The sink logit of each of q's batch items, a Dask array chunked as q's leading dims."""
    if isinstance(sinks, da.Array):  # a few logits: taken whole
        sinks = sinks.compute()
    elif not (hasattr(sinks, "dtype") and hasattr(sinks, "ndim")):
        sinks = np.asarray(sinks)
    heads = require_sinks(QUALIFIED, sinks, q.shape[:-2], batch)
    xp = array_module(sinks)
    items = math.prod(q.shape[:-2])
    return da.from_array(sinks[xp.arange(items) % heads].reshape(q.shape[:-2]), chunks=q.chunks[:-2],
                         asarray=False)


def _partial(qb, kb, vb, key_positions, query_positions, sink_items, causal, scale, window, softcap, n_q, n_k):
    """(1, ..., nq, Dv + 1) in the accumulator dtype: this block's queries over this block's
    keys, and the lse; ``sink_items`` (the sink of each of qb's items, or None) in the first
    key chunk's blocks only."""
    xp = array_module(qb)
    nq, nk = qb.shape[-2], kb.shape[-2]
    batch = np.broadcast_shapes(qb.shape[:-2], kb.shape[:-2], vb.shape[:-2])
    out = xp.zeros(batch + (nq, vb.shape[-1] + 1), dtype=accumulator_dtype(qb.dtype))
    out[..., -1] = -np.inf
    sinks = None
    if sink_items is not None and (len(key_positions) == 0 or int(key_positions[0]) == 0):
        sinks = xp.ascontiguousarray(sink_items.reshape(-1))  # item b of the block takes sinks[b]
        out[..., -1] = xp.broadcast_to(sink_items[..., None], batch + (nq,))  # rows that see no key
    shift = int(query_positions[0]) + (n_k - n_q) - int(key_positions[0]) if nq and nk else 0
    for (start, stop), (first, end), pad, run_causal, run_window in _runs(nq, nk, shift, causal, window):
        rows = qb[..., start:stop, :]
        if pad:  # rows appended after the run move its bottom-right frame back by ``pad`` keys
            rows = xp.concatenate([rows, xp.zeros(rows.shape[:-2] + (pad, rows.shape[-1]), rows.dtype)], axis=-2)
        _fill(out, start, stop, _attention(rows, kb[..., first:end, :], vb[..., first:end, :], scale=scale,
                                           causal=run_causal, window=run_window, softcap=softcap, sinks=sinks,
                                           return_lse=True))
    return out[None]


def _runs(nq, nk, shift, causal, window) -> list:
    """The eager calls that give a block's rows over its keys, ``((start, stop), (first, end),
    pad, causal, window)`` each: rows ``start..<stop``, ``pad`` zero rows appended, over keys
    ``first..<end``. Row i sits at key position ``p = i + shift`` and sees the keys ``p - left``
    to ``p + right`` of ``0..<nk`` (right 0 with causal; None: unlimited). Rows that see no key
    are in no run (they stay 0 with lse -inf). Where right is limited, the rows with ``p < nk``
    keep the mask: the slice of keys they see, the frame moved by the pad (at most right rows).
    The rows past them see every key from ``p - left`` to the end: the window (left', None) in
    the eager frame of all the keys, without pad (or no window: every key)."""
    if not (nq and nk):
        return []
    left, right = window if window is not None else (None, None)
    right = 0 if causal else right

    def rows(first_position, last_position):  # the rows whose p lies in the range (None: open)
        start = 0 if first_position is None else min(nq, max(0, first_position - shift))
        stop = nq if last_position is None else min(nq, max(0, last_position - shift + 1))
        return start, max(start, stop)

    last_seeing = None if left is None else nk - 1 + left
    runs = []
    if right is not None:
        start, stop = rows(-right, nk - 1 if last_seeing is None else min(nk - 1, last_seeing))
        if start < stop:
            first = 0 if left is None else max(0, start + shift - left)
            end = min(nk, stop + shift + right)
            runs.append(((start, stop), (first, end), end - stop - shift, causal, window))
    start, stop = rows(None if right is None else nk, last_seeing)
    if start < stop:
        tail_window = None if left is None else (left - (stop + shift - nk), None)
        runs.append(((start, stop), (0, nk), 0, False, tail_window))
    return runs


def _fill(out, start, stop, result):
    values, lse = result
    out[..., start:stop, :-1] = values[..., :stop - start, :]
    out[..., start:stop, -1] = lse[..., :stop - start]


def _identity(block, axis, keepdims):
    return block


def _merge(parts, axis, keepdims):
    """The lse-rule merge of partials stacked on axis 0 (keepdims: a size-1 axis 0)."""
    if not isinstance(parts, (list, tuple)):  # Dask's meta call on an empty array
        return parts if keepdims else parts[0] if parts.shape[0] else parts.reshape(parts.shape[1:])
    blocks = flatten(parts)
    xp = array_module(blocks[0])
    stacked = xp.concatenate(blocks, axis=0)
    lse = stacked[..., -1]
    with np.errstate(invalid="ignore", over="ignore"):
        top = lse.max(axis=0)
        seen = top > -np.inf
        weights = xp.where(seen, xp.exp(lse - xp.where(seen, top, 0)), 0)
        total = weights.sum(axis=0)
        merged = xp.empty(stacked.shape[1:], dtype=stacked.dtype)
        merged[..., :-1] = xp.where(seen[..., None], (weights[..., None] * stacked[..., :-1]).sum(axis=0)
                                    / xp.where(seen, total, 1)[..., None], 0)
        merged[..., -1] = xp.where(seen, top + xp.log(xp.where(seen, total, 1)), -np.inf)
        nan = xp.isnan(top)  # a NaN in any part: the row is NaN
        merged[nan] = np.nan
    return merged[None] if keepdims else merged
