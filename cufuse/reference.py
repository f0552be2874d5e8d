"""float64 NumPy oracles, written as the tiled online algorithms the kernels use.

Each oracle walks its reduction in tiles of ``tile`` elements and keeps a running
maximum ``m``, normaliser ``l`` (and for attention a numerator ``acc``), rescaled by
``exp(m - m')`` whenever the maximum grows. They are the CPU path of the public
functions and the oracle of the GPU tests; any tile size gives the direct result.

Inputs are taken as they come (any dtype NumPy can turn into float64); no validation
here, the public functions do that.
"""
from __future__ import annotations

import functools
import math

import numpy as np


def _online_max_sum(rows: np.ndarray, tile: int):
    """Running (max, sum of exp(x - max)) over the last axis of a 2-D float64 array."""
    if tile < 1:
        raise ValueError(f"reference: argument 'tile' expected a positive int, got {tile}")
    n_rows, length = rows.shape
    m = np.full(n_rows, -np.inf)
    l = np.zeros(n_rows)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, length, tile):
            block = rows[:, start : start + tile]
            m_new = np.maximum(m, block.max(axis=1))  # NaN propagates
            alpha = np.where(m == -np.inf, 0.0, np.exp(m - m_new))
            shifted = np.where(m_new[:, None] == -np.inf, -np.inf, block - m_new[:, None])
            l = l * alpha + np.exp(shifted).sum(axis=1)
            m = m_new
    return m, l


def _as_rows(x: np.ndarray, axis):
    """float64 copy of x with the reduction axes moved last and flattened: (rows, length)."""
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(x.ndim)) if axis is None else tuple(np.atleast_1d(axis) % max(x.ndim, 1))
    if x.ndim == 0:
        return x.reshape(1, 1), lambda r: r.reshape(())
    moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    length = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    rows = moved.reshape(int(np.prod(moved.shape[: moved.ndim - len(axes)], dtype=np.int64)), length)

    def restore(result_rows):
        return np.moveaxis(result_rows.reshape(moved.shape), tuple(range(-len(axes), 0)), axes)

    return rows, restore


def softmax(x, axis=None, *, tile: int = 1024) -> np.ndarray:
    """float64 softmax with SciPy's semantics (axis None/int/tuple, SciPy's NaN pattern)."""
    rows, restore = _as_rows(x, axis)
    if rows.size == 0:
        return restore(rows.copy())
    m, l = _online_max_sum(rows, tile)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = np.exp(rows - m[:, None]) / l[:, None]
    # SciPy: a row whose max is NaN, +inf or -inf (all -inf) is NaN throughout.
    out[~np.isfinite(m)] = np.nan
    return restore(out)


def log_softmax(x, axis=None, *, tile: int = 1024) -> np.ndarray:
    """float64 log_softmax with SciPy's semantics, NaN pattern included."""
    rows, restore = _as_rows(x, axis)
    if rows.size == 0:
        return restore(rows.copy())
    m, l = _online_max_sum(rows, tile)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = rows - m[:, None] - np.log(l)[:, None]
        # SciPy shifts a row by 0 when its max is not finite: x - log(sum(exp(x))).
        # With a +inf entry that is x - inf: NaN at +inf, -inf elsewhere; an all -inf
        # row gives -inf - (-inf) = NaN; a NaN max gives NaN.
        plus_inf = m == np.inf
        out[plus_inf] = rows[plus_inf] - np.inf
        out[(m == -np.inf) | np.isnan(m)] = np.nan
    return restore(out)


ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")

_erf = np.frompyfunc(math.erf, 1, 1)  # NumPy has no erf; math.erf is exact to double rounding


def apply_activation(name, v: np.ndarray) -> np.ndarray:
    """float64 ``name(v)`` for the epilogues of fused_linear: None (identity), "relu"
    (np.maximum(v, 0), NaN kept), "gelu" (0.5 v (1 + erf(v / sqrt 2))), "gelu_tanh"
    (0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3)))), "silu" (v / (1 + exp(-v))). NaN gives
    NaN; -inf gives each function's limit 0 (the formulas' -inf * 0 would be NaN)."""
    return activation_formula(name, np.asarray(v, dtype=np.float64), lambda a: _erf(a).astype(np.float64))


def activation_formula(name, v, erf):
    """``apply_activation``'s formulas on any array whose ufuncs NumPy dispatches (NumPy, CuPy),
    in its dtype, with ``erf`` the array module's error function."""
    if name is None:
        return v
    if name == "relu":
        return np.maximum(v, 0)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "gelu":
            out = 0.5 * v * (1.0 + erf(v * math.sqrt(0.5)))
        elif name == "gelu_tanh":
            out = 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
        elif name == "silu":
            out = v / (1.0 + np.exp(-v))
        else:
            raise ValueError(f"reference.apply_activation: argument 'name' expected one of {ACTIVATIONS}, got {name!r}")
    return np.where(v == -np.inf, 0, out).astype(v.dtype, copy=False)


def _linear_rows(x, weight, tile: int) -> np.ndarray:
    """float64 ``x @ weight`` as (rows, N), accumulated over K in tiles of ``tile``."""
    x = np.asarray(x, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    k_dim, n_dim = weight.shape
    rows = x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), k_dim)
    acc = np.zeros((rows.shape[0], n_dim))
    for start in range(0, k_dim, tile):
        acc += rows[:, start : start + tile] @ weight[start : start + tile]
    return acc


def fused_linear(x, weight, bias=None, *, activation: str | None = None, tile: int = 256) -> np.ndarray:
    """float64 ``activation(x @ weight + bias)``, accumulating over K in tiles of ``tile``."""
    acc = _linear_rows(x, weight, tile)
    if bias is not None:
        acc += np.asarray(bias, dtype=np.float64)
    return apply_activation(activation, acc).reshape(np.shape(x)[:-1] + (acc.shape[1],))


def fused_linear_relu(x, weight, bias=None, *, tile: int = 256) -> np.ndarray:
    """float64 ``max(x @ weight + bias, 0)``, accumulating over K in tiles of ``tile``."""
    return fused_linear(x, weight, bias, activation="relu", tile=tile)


def fused_gated_linear(x, w_gate, w_up, *, activation: str | None = "silu", tile: int = 256) -> np.ndarray:
    """float64 ``activation(x @ w_gate) * (x @ w_up)`` (SwiGLU with "silu", GeGLU with "gelu")."""
    gate = _linear_rows(x, w_gate, tile)
    up = _linear_rows(x, w_up, tile)
    return (apply_activation(activation, gate) * up).reshape(np.shape(x)[:-1] + (up.shape[1],))


def visible_keys(keys: np.ndarray, n_q: int, n_k: int, causal: bool, window=None):
    """Which of ``keys`` each of the n_q queries sees, ``(n_q, len(keys))`` bool, or None when
    every query sees every key. Query i sits at ``p = i + n_k - n_q`` (bottom-right frame);
    ``causal``: key j <= p; ``window`` (left, right), None on a side for unlimited:
    ``p - left <= j <= p + right`` (causal caps right at 0)."""
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)
    if left is None and right is None:
        return None
    position = np.arange(n_q)[:, None] + (n_k - n_q)
    keys = keys[None, :]
    visible = np.ones((n_q, keys.shape[1]), dtype=bool)
    if left is not None:
        visible &= keys >= position - left
    if right is not None:
        visible &= keys <= position + right
    return visible


def sink_logits(sinks, q_lead: tuple, batch: tuple) -> np.ndarray:
    """float64 ``batch + (1,)``: the sink logit of each output item; q's batch item b (C order
    over its leading dims ``q_lead``) takes ``sinks[b % H]``, broadcast over the batch."""
    sinks = np.asarray(sinks, dtype=np.float64).reshape(-1)
    items = int(np.prod(q_lead, dtype=np.int64))
    return np.broadcast_to(sinks[np.arange(items) % sinks.size].reshape(tuple(q_lead)), tuple(batch))[..., None]


def fold_sink(m, l, sink):
    """``(m', l', f)``: a row's max m and normaliser l (of exp(s - m)) with the sink logit joined as
    one more key of value 0; f rescales the row's numerator. A row without keys (m = -inf) gets
    m' = sink, l' = 1, f = 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        m2 = np.maximum(m, sink)
        base = np.where(m2 == -np.inf, 0.0, m2)
        f = np.where(m == -np.inf, 0.0, np.exp(m - base))
        return m2, l * f + np.exp(sink - base), f


def attention(q, k, v, *, causal: bool = False, scale=None, window=None, softcap=None, sinks=None,
              return_lse: bool = False, tile: int = 128):
    """float64 FlashAttention forward: ``softmax(q @ k^T * scale) @ v`` over key tiles.

    Leading dims broadcast. ``causal`` is bottom-right aligned: query i sees key j iff
    ``j <= i + Nk - Nq``; ``window`` (left, right) limits the keys around that position (see
    ``visible_keys``); ``softcap`` c replaces each scaled score s by ``c * tanh(s / c)``.
    ``sinks`` (H,): q's batch item b (C order over its leading dims) has the logit
    ``sinks[b % H]``, one more key of value 0 in each of its rows' softmax (folded in at the end).
    A row that sees no key gives 0 and lse ``-inf`` (the sink with sinks).
    Returns ``out`` or ``(out, lse)``; lse is float64 here (the public API casts it).
    """
    if tile < 1:
        raise ValueError(f"reference: argument 'tile' expected a positive int, got {tile}")
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_q, head_dim = q.shape[-2:]
    n_k, head_dim_v = k.shape[-2], v.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    sink = None if sinks is None else sink_logits(sinks, q.shape[:-2], batch)
    q = np.broadcast_to(q, batch + (n_q, head_dim))
    k = np.broadcast_to(k, batch + (n_k, head_dim))
    v = np.broadcast_to(v, batch + (n_k, head_dim_v))
    scale = 1.0 / np.sqrt(head_dim) if scale is None else float(scale)

    m = np.full(batch + (n_q,), -np.inf)
    l = np.zeros(batch + (n_q,))
    acc = np.zeros(batch + (n_q, head_dim_v))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n_k, tile):
            stop = min(start + tile, n_k)
            scores = np.matmul(q, np.swapaxes(k[..., start:stop, :], -1, -2)) * scale
            if softcap is not None:
                scores = softcap * np.tanh(scores / softcap)
            visible = visible_keys(np.arange(start, stop), n_q, n_k, causal, window)
            if visible is not None:
                scores = np.where(visible, scores, -np.inf)
            m_new = np.maximum(m, scores.max(axis=-1))
            alpha = np.where(m == -np.inf, 0.0, np.exp(m - m_new))
            probs = np.where(m_new[..., None] == -np.inf, 0.0, np.exp(scores - m_new[..., None]))
            l = l * alpha + probs.sum(axis=-1)
            acc = acc * alpha[..., None] + np.matmul(probs, v[..., start:stop, :])
            m = m_new
    seen = l > 0  # the row saw a key: else 0, also where v holds NaN
    if sink is not None:
        m, l, f = fold_sink(m, l, sink)
        acc = acc * f[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        total = l > 0
        out = np.where(seen[..., None], acc / np.where(total, l, 1.0)[..., None], 0.0)
        lse = np.where(total, m + np.log(np.where(total, l, 1.0)), -np.inf)
    # A NaN anywhere in a row's visible scores makes the whole row NaN.
    nan_rows = np.isnan(m) | np.isnan(l)
    out[nan_rows] = np.nan
    lse = np.where(nan_rows, np.nan, lse)
    return (out, lse) if return_lse else out


def attention_dense(q, k, v, *, causal: bool = False, scale=None):
    """The direct formula with an explicit (masked) score matrix, for property tests."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        visible = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        scores = np.where(visible, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True) if n_k else np.full(scores.shape[:-1] + (1,), -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.where(np.isfinite(m), np.exp(scores - m), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    probs = np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0)
    return np.matmul(probs, v)


def gather_pages(pages, table_row, length: int) -> np.ndarray:
    """The first ``length`` keys of one sequence from a page pool ``(P, H, S, D)`` through its
    row of the block table: ``(H, length, D)``."""
    n_pages, heads, page_size, dim = pages.shape
    used = np.asarray(table_row[: -(-length // page_size)], dtype=np.int64)
    gathered = np.moveaxis(np.asarray(pages)[used], 1, 0).reshape(heads, used.size * page_size, dim)
    return gathered[:, :length]


def attention_paged(q, k_pages, v_pages, block_table, seq_lens, *, causal: bool = True, scale=None, window=None,
                    softcap=None, sinks=None, cu_seqlens_q=None, return_lse: bool = False, tile: int = 128):
    """float64 PagedAttention, ``per_paged_sequence`` through ``attention``: query head h uses KV
    head ``h // (Hq // Hkv)`` and the sink ``sinks[h % H]``. Page indices are not checked here."""
    out, lse = per_paged_sequence(functools.partial(attention, tile=tile), q, k_pages, v_pages, block_table, seq_lens,
                                  cu_seqlens_q, causal=causal, scale=scale, window=window, softcap=softcap, sinks=sinks)
    return (out, lse) if return_lse else out


def per_paged_sequence(attend, q, k_pages, v_pages, block_table, seq_lens, cu_seqlens_q=None, **options):
    """float64 ``(out, lse)`` of attention_paged: sequence b's pages ``(P, Hkv, S, D)`` gathered, its
    queries (q ``(B, Hq, Nq, D)`` row b, or packed ``(Tq, Hq, D)`` rows ``cu_seqlens_q[b] ..< cu[b +
    1]``) grouped as ``(Hkv, G, n, D)`` through ``attend`` (``attention`` or the NumPy path's)."""
    q = np.asarray(q, dtype=np.float64)
    if cu_seqlens_q is None:  # unpacked: sequence b's Nq queries are packed rows b * Nq ..< (b + 1) * Nq
        batch, heads_q, n_q, _ = q.shape
        out, lse = per_paged_sequence(attend, q.swapaxes(1, 2).reshape(-1, heads_q, q.shape[-1]), k_pages, v_pages,
                                      block_table, seq_lens, np.arange(batch + 1) * n_q, **options)
        out, lse = (np.ascontiguousarray(x.reshape(batch, n_q, heads_q, -1).swapaxes(1, 2)) for x in (out, lse))
        return out, lse[..., 0]
    (heads_q, head_dim), heads_kv = q.shape[1:], k_pages.shape[1]
    out, lse = np.zeros(q.shape[:-1] + v_pages.shape[-1:]), np.full(q.shape[:-1], -np.inf)
    for b in range(len(seq_lens)):
        rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        if (n_q := rows.stop - rows.start) > 0:
            k, v = (gather_pages(pages, block_table[b], int(seq_lens[b])).astype(np.float64)[:, None]
                    for pages in (k_pages, v_pages))
            grouped = q[rows].swapaxes(0, 1).reshape(heads_kv, heads_q // heads_kv, n_q, head_dim)
            o, row_lse = attend(grouped, k, v, return_lse=True, **options)
            out[rows], lse[rows] = o.reshape(heads_q, n_q, -1).swapaxes(0, 1), row_lse.reshape(heads_q, n_q).T
    return out, lse


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale=None, window=None,
                     softcap=None, sinks=None, return_lse: bool = False, tile: int = 128):
    """float64 attention of ragged packed sequences: q ``(Tq, Hq, D)``, k / v ``(Tk, Hkv, D)``,
    sequence b's rows ``cu_seqlens_*[b] ..< cu_seqlens_*[b + 1]``, each through ``attention``
    (query head h uses KV head ``h // (Hq // Hkv)`` and the sink ``sinks[h % H]``)."""
    out, lse = per_sequence(lambda *a, **kw: attention(*a, tile=tile, **kw), q, k, v, cu_seqlens_q, cu_seqlens_k,
                            causal=causal, scale=scale, window=window, softcap=softcap, sinks=sinks)
    return (out, lse) if return_lse else out


def per_sequence(attend, q, k, v, cu_seqlens_q, cu_seqlens_k, **options):
    """float64 ``(out, lse)`` of the packed layout: each sequence gathered as q ``(Hkv, G, n, D)``
    against k / v ``(Hkv, 1, n, D)`` and run through ``attend`` (``attention`` or the NumPy path's);
    rows of sequences without a query stay out, rows without a key come back 0 and -inf."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    n_tokens_q, heads_q, head_dim = q.shape
    heads_kv = k.shape[1]
    out = np.zeros((n_tokens_q, heads_q, v.shape[-1]))
    lse = np.full((n_tokens_q, heads_q), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 > q0:
            grouped = q[q0:q1].transpose(1, 0, 2).reshape(heads_kv, heads_q // heads_kv, q1 - q0, head_dim)
            keys, values = (x[k0:k1].transpose(1, 0, 2)[:, None] for x in (k, v))
            o, row_lse = attend(grouped, keys, values, return_lse=True, **options)
            out[q0:q1] = o.reshape(heads_q, q1 - q0, -1).transpose(1, 0, 2)
            lse[q0:q1] = row_lse.reshape(heads_q, q1 - q0).T
    return out, lse


def kv_append(k_pages, v_pages, k_new, v_new, block_table, seq_lens, cu_seqlens_new=None) -> None:
    """Write k_new / v_new ``(B, Hkv, Nnew, D)``, or packed ``(Tnew, Hkv, D)`` (sequence b's rows ``cu[b]
    ..< cu[b + 1]``), into the pages ``(P, Hkv, S, D)`` from position ``seq_lens[b]`` on, in place."""
    if cu_seqlens_new is None:
        cu_seqlens_new = np.arange(len(seq_lens) + 1) * k_new.shape[2]
        k_new, v_new = (np.swapaxes(x, 1, 2).reshape(-1, *x.shape[1::2]) for x in (k_new, v_new))
    starts = np.asarray(cu_seqlens_new, dtype=np.int64)
    sequence = np.repeat(np.arange(len(seq_lens)), np.diff(starts))
    positions = np.asarray(seq_lens, dtype=np.int64)[sequence] + np.arange(sequence.size) - starts[sequence]
    pages = np.asarray(block_table, dtype=np.int64)[sequence, positions // k_pages.shape[2]]
    slots = positions % k_pages.shape[2]
    k_pages[pages, :, slots] = k_new  # advanced indices first: (tokens, Hkv, D)
    v_pages[pages, :, slots] = v_new


def logsumexp(a, axis=None, b=None, *, tile: int = 1024):
    """float64 ``(log|S|, sign(S))`` with S the sum over ``axis`` of ``b * exp(a)``, kept
    dims, walked in tiles by the online rule; SciPy's rules (``scipy.special.logsumexp``): an
    entry with a zero weight is dropped, NaN anywhere kept is NaN, +inf entries give the infinity
    of their weights' sign (NaN where signs differ), an empty or all -inf sum is -inf with sign 0; a non-finite
    result of a row in which a dropped entry was +inf or NaN is NaN (SciPy's direct fallback).
    ``a`` and ``b`` broadcast together; a 0-d a is one element."""
    if tile < 1:
        raise ValueError(f"reference: argument 'tile' expected a positive int, got {tile}")
    a = np.asarray(a, dtype=np.float64)
    w = np.ones_like(a) if b is None else np.asarray(b, dtype=np.float64)
    a, w = np.broadcast_arrays(np.atleast_1d(a), np.atleast_1d(w))
    axes = tuple(range(a.ndim)) if axis is None else tuple(np.atleast_1d(axis) % a.ndim)
    kept_shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape))
    trailing = tuple(range(a.ndim - len(axes), a.ndim))
    rows_of = lambda v: np.moveaxis(v, axes, trailing).reshape(-1, int(np.prod([a.shape[d] for d in axes], dtype=np.int64)))  # noqa: E731
    x, w = rows_of(a), rows_of(w)
    m = np.full(x.shape[0], -np.inf)
    s = np.zeros(x.shape[0])
    dropped = np.zeros(x.shape[0], dtype=bool)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for start in range(0, x.shape[1], tile):
            xt, wt = x[:, start : start + tile], w[:, start : start + tile]
            drop = wt == 0
            dropped |= (drop & ~(xt < np.inf)).any(axis=1)
            xt = np.where(drop, -np.inf, xt)
            m_new = np.maximum(m, xt.max(axis=1))  # NaN propagates
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            terms = np.where(np.isinf(wt) & (xt > -np.inf), wt, wt * _exp_rel(xt, shift[:, None]))
            s = _rescaled(s, _exp_rel(m, shift)) + terms.sum(axis=1)
            m = m_new
        value = np.where(m == -np.inf, 0.0, m) + np.log(np.abs(s))
        sign = np.where(np.isnan(value), np.nan, np.sign(s))
    poisoned = dropped & ~np.isfinite(value)
    value[poisoned] = sign[poisoned] = np.nan
    return value.reshape(kept_shape), sign.reshape(kept_shape)


def _rescaled(s, factor):
    """s * factor, except an infinite s (from infinite weights) stays as it is: the factor
    may underflow to 0 where the true product is still infinite."""
    return np.where(np.isinf(s), s, s * factor)


def _exp_rel(x, shift):
    """exp(x - shift), exactly 1 where x == shift, and +inf for the +inf entries under a +inf
    max (so that their weights of both signs sum to NaN, of one sign to that infinity)."""
    return np.where(x == shift, np.where(np.isinf(shift), shift, 1.0), np.exp(x - shift))
