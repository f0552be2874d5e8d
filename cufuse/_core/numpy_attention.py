"""The fast NumPy path of dense attention (``attention``; ``attention_paged`` after its gather): the score matrix of a block of query rows in float64 (one
batched BLAS product), masked, exponentiated and summed in place, then one product with v. It
returns what ``cufuse.reference.attention`` returns within float64 rounding (rows that see no key
0 with lse -inf, NaN only in the rows whose visible scores hold one, NaN in v as the oracle
spreads it); the oracle stays the tiled reference."""
from __future__ import annotations

import numpy as np

from ..reference import fold_sink, sink_logits, visible_keys

# Query rows a block takes so that its float64 score matrix stays within this many bytes.
SCORE_BYTES = 64 << 20


def attention(q, k, v, *, causal: bool = False, scale=None, window=None, softcap=None, sinks=None,
              return_lse: bool = False):
    """float64 ``softmax(q @ k^T * scale) @ v`` with leading dims broadcast, bottom-right
    ``causal``, ``window`` (left, right), ``softcap`` and ``sinks`` as in ``reference.attention``.
    Returns ``out`` or ``(out, lse)``, both float64."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    (n_q, head_dim), n_k, head_dim_v = q.shape[-2:], k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v)))
    scale = 1.0 / np.sqrt(head_dim) if scale is None else float(scale)
    sink = None if sinks is None else sink_logits(sinks, q.shape[:-2], batch)
    out = np.empty(batch + (n_q, head_dim_v))
    lse = np.empty(batch + (n_q,))
    k_t = np.swapaxes(k, -1, -2)
    block = max(1, SCORE_BYTES // (8 * max(1, int(np.prod(batch, dtype=np.int64)) * n_k)))
    for start in range(0, n_q, block):
        stop = min(start + block, n_q)
        rows = slice(start, stop)
        out[..., rows, :], lse[..., rows] = _rows(q[..., rows, :], k_t, v, start, stop, n_q, n_k, causal, scale,
                                                  window, softcap, sink)
    return (out, lse) if return_lse else out


def _rows(q, k_t, v, start, stop, n_q, n_k, causal, scale, window, softcap, sink):
    """``(out, lse)`` of query rows ``start ..< stop``; ``sink`` None or the items' logits ``(..., 1)``."""
    scores = np.matmul(q, k_t)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        scores *= scale
        if softcap is not None:
            scores /= softcap
            np.tanh(scores, out=scores)
            scores *= softcap
        # rows start ..< stop sit at positions start + n_k - n_q onwards: visible_keys of a problem
        # of (stop - start) queries whose keys' frame ends at n_k - n_q + stop
        visible = visible_keys(np.arange(n_k), stop - start, n_k - n_q + stop, causal, window)
        if visible is not None:
            np.copyto(scores, -np.inf, where=~visible)
        if n_k:
            top = scores.max(axis=-1, keepdims=True)
        else:
            top = np.full(scores.shape[:-1] + (1,), -np.inf)
        row_max = top[..., 0].copy()
        # a row that sees no key shifts by 0: its exp(-inf) is 0 and its sum 0 (the oracle's rule)
        top[top == -np.inf] = 0.0
        scores -= top
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1)
        out = np.matmul(scores, v)
        seen = total > 0
        shift = top[..., 0]
        if sink is not None:  # the sink joins as a key of value 0: the numerator rescales by f
            shift, total, f = fold_sink(row_max, total, sink)
            out *= f[..., None]
        normaliser = total > 0
        out /= np.where(normaliser, total, 1.0)[..., None]
        out[~seen] = 0.0
        lse = np.where(normaliser, shift + np.log(np.where(normaliser, total, 1.0)), -np.inf)
    # a NaN in a row's visible scores (or +inf - +inf) makes the whole row NaN
    nan_rows = np.isnan(total)
    out[nan_rows] = np.nan
    lse[nan_rows] = np.nan
    return out, lse
