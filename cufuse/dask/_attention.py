"""attention over Dask arrays.

Every (query chunk, key chunk) pair of blocks computes its partial: the attention of its
queries over its keys, normalised, with the lse (``cufuse.attention(..., return_lse=True)``),
stored as float32 ``(..., Nq, Dv + 1)``. The partials of a query chunk merge by the lse rule in
a tree (``dask.array.reduction``): weights ``exp(lse_c - max lse)``, the output their weighted
mean, the lse ``max + log(sum of weights)``. Chunks along batch, heads or queries alone are
independent blocks. With ``causal=True`` each block knows its query and key offsets, so the
bottom-right alignment of the whole (query i sees key j iff ``j <= i + Nk - Nq``) holds: a
block's rows see all of its keys, none, or a prefix, and the prefix rows are one causal call on
that prefix of keys.
"""
from __future__ import annotations

import math

import numpy as np

import dask.array as da

from .. import attention as _attention
from .._core.validate import require_bool
from ._common import array_module, as_dask, flatten, meta

FN = "attention"


def attention(q, k, v, *, causal=False, scale=None, enable_gqa=False, return_lse=False):
    """``cufuse.attention`` over Dask arrays of NumPy or CuPy chunks: lazy ``out`` (and float32
    ``lse`` with ``return_lse``). Leading dims broadcast; ``enable_gqa`` as in the eager
    function; the head dims D and Dv must be whole in each chunk."""
    q, k, v = (as_dask(FN, name, a) for name, a in (("q", q), ("k", k), ("v", v)))
    causal, return_lse = require_bool(FN, "causal", causal), require_bool(FN, "return_lse", return_lse)
    heads = None
    if require_bool(FN, "enable_gqa", enable_gqa):
        q, k, v, heads = _group_heads(q, k, v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim < 2 or a.numblocks[-1] != 1:
            raise ValueError(f"cufuse.dask.{FN}: argument '{name}' expected at least 2 dims with the last (head dim) "
                             f"in one chunk, got shape {a.shape} with chunks {a.chunks}")
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2] or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"cufuse.dask.{FN}: arguments 'q', 'k', 'v' expected (..., Nq, D), (..., Nk, D), "
                         f"(..., Nk, Dv) of one dtype, got {q.shape}, {k.shape}, {v.shape}")
    n_q, n_k, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    v = v.rechunk({v.ndim - 2: k.chunks[-2]})
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
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
        adjust_chunks={"c": 1}, new_axes={"f": dv + 1}, concatenate=True, dtype=np.float32,
        meta=meta(q, np.float32, len(partial_index)), causal=causal, scale=scale, n_q=n_q, n_k=n_k)
    merged = da.reduction(partials, _identity, _merge, axis=0, keepdims=False, dtype=np.float32, combine=_merge,
                          concatenate=False, meta=meta(q, np.float32, len(partial_index) - 1))
    out = merged[..., :dv].astype(q.dtype)
    lse = merged[..., dv]
    if heads is not None:
        out, lse = heads(out), heads(lse[..., None])[..., 0]
    return (out, lse) if return_lse else out


def _group_heads(q, k, v):
    """SDPA's grouped-query layout on axis -3 as the broadcast form, and the map back."""
    if min(q.ndim, k.ndim, v.ndim) < 3 or k.shape[-3] != v.shape[-3] or k.shape[-3] == 0 or q.shape[-3] % k.shape[-3]:
        raise ValueError(f"cufuse.dask.{FN}: arguments 'q', 'k', 'v' expected (..., Hq, Nq, D) and (..., Hkv, Nk, D) "
                         f"with Hq % Hkv == 0 (enable_gqa=True), got {q.shape}, {k.shape}, {v.shape}")
    hkv, group = k.shape[-3], q.shape[-3] // k.shape[-3]
    q = q.reshape(q.shape[:-3] + (hkv, group) + q.shape[-2:])

    def ungroup(a):
        return a.reshape(a.shape[:-4] + (hkv * group,) + a.shape[-2:])

    return q, k[..., None, :, :], v[..., None, :, :], ungroup


def _partial(qb, kb, vb, key_positions, query_positions, causal, scale, n_q, n_k):
    """(1, ..., nq, Dv + 1) float32: this block's queries over this block's keys, and the lse."""
    xp = array_module(qb)
    nq, nk = qb.shape[-2], kb.shape[-2]
    batch = np.broadcast_shapes(qb.shape[:-2], kb.shape[:-2], vb.shape[:-2])
    out = xp.zeros(batch + (nq, vb.shape[-1] + 1), dtype=np.float32)
    out[..., -1] = -np.inf
    # Row i of this block (query q0 + i) sees this block's key j iff j <= i + shift.
    shift = int(query_positions[0]) + (n_k - n_q) - int(key_positions[0]) if causal and nq and nk else nk
    full_from = max(0, nk - 1 - shift)  # rows that see every key of the block
    band = (max(0, -shift), min(nq, full_from))  # rows that see a prefix of the keys
    if full_from < nq:
        _fill(out, full_from, nq, _attention(qb[..., full_from:, :], kb, vb, scale=scale, return_lse=True))
    if band[0] < band[1]:
        keys = band[1] + shift  # the causal call's Nk' - Nq' = band[0] + shift
        _fill(out, *band, _attention(qb[..., band[0]:band[1], :], kb[..., :keys, :], vb[..., :keys, :], scale=scale,
                                     causal=True, return_lse=True))
    return out[None]


def _fill(out, start, stop, result):
    values, lse = result
    out[..., start:stop, :-1] = values.astype(np.float32)
    out[..., start:stop, -1] = lse


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
        merged = xp.empty(stacked.shape[1:], dtype=np.float32)
        merged[..., :-1] = xp.where(seen[..., None], (weights[..., None] * stacked[..., :-1]).sum(axis=0)
                                    / xp.where(seen, total, 1)[..., None], 0)
        merged[..., -1] = xp.where(seen, top + xp.log(xp.where(seen, total, 1)), -np.inf)
        nan = xp.isnan(top)  # a NaN in any part: the row is NaN
        merged[nan] = np.nan
    return merged[None] if keepdims else merged
