"""The fast NumPy path of dense attention (``attention``; ``attention_paged`` after its gather): the score matrix of a block of query rows in float64 (one
batched BLAS product), masked, exponentiated and summed in place, then one product with v. It
returns what ``cufuse.reference.attention`` returns within float64 rounding (rows that see no key
0 with lse -inf, NaN only in the rows whose visible scores hold one, NaN in v as the oracle
spreads it); the oracle stays the tiled reference."""
from __future__ import annotations

import numpy as np

from ..reference import visible_keys

# Query rows a block takes so that its float64 score matrix stays within this many bytes.
SCORE_BYTES = 64 << 20


def attention(q, k, v, *, causal: bool = False, scale=None, window=None, softcap=None, return_lse: bool = False):
    """float64 ``softmax(q @ k^T * scale) @ v`` with leading dims broadcast, bottom-right
    ``causal``, ``window`` (left, right) and ``softcap`` as in ``reference.attention``.
    Returns ``out`` or ``(out, lse)``, both float64."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    (n_q, head_dim), n_k, head_dim_v = q.shape[-2:], k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v)))
    scale = 1.0 / np.sqrt(head_dim) if scale is None else float(scale)
    out = np.empty(batch + (n_q, head_dim_v))
    lse = np.empty(batch + (n_q,))
    k_t = np.swapaxes(k, -1, -2)
    block = max(1, SCORE_BYTES // (8 * max(1, int(np.prod(batch, dtype=np.int64)) * n_k)))
    for start in range(0, n_q, block):
        stop = min(start + block, n_q)
        rows = slice(start, stop)
        out[..., rows, :], lse[..., rows] = _rows(q[..., rows, :], k_t, v, start, stop, n_q, n_k, causal, scale,
                                                  window, softcap)
    return (out, lse) if return_lse else out


def _rows(q, k_t, v, start, stop, n_q, n_k, causal, scale, window, softcap):
    """``(out, lse)`` of query rows ``start ..< stop``."""
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
        # a row that sees no key shifts by 0: its exp(-inf) is 0 and its sum 0 (the oracle's rule)
        top[top == -np.inf] = 0.0
        scores -= top
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1)
        out = np.matmul(scores, v)
        seen = total > 0
        out /= np.where(seen, total, 1.0)[..., None]
        out[~seen] = 0.0
        lse = np.where(seen, top[..., 0] + np.log(np.where(seen, total, 1.0)), -np.inf)
    # a NaN in a row's visible scores (or +inf - +inf) makes the whole row NaN
    nan_rows = np.isnan(total)
    out[nan_rows] = np.nan
    lse[nan_rows] = np.nan
    return out, lse
