"""float64 NumPy oracles, written as the tiled online algorithms the kernels use.

Each oracle walks its reduction in tiles of ``tile`` elements and keeps a running
maximum ``m``, normaliser ``l`` (and for attention a numerator ``acc``), rescaled by
``exp(m - m')`` whenever the maximum grows. They are the CPU path of the public
functions and the oracle of the GPU tests; any tile size gives the direct result.

Inputs are taken as they come (any dtype NumPy can turn into float64); no validation
here, the public functions do that.
"""
from __future__ import annotations

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


def fused_linear(x, weight, bias=None, *, activation: str | None = "relu", tile: int = 256) -> np.ndarray:
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


def attention(q, k, v, *, causal: bool = False, scale=None, return_lse: bool = False, tile: int = 128):
    """float64 FlashAttention forward: ``softmax(q @ k^T * scale) @ v`` over key tiles.

    Leading dims broadcast. ``causal`` is bottom-right aligned: query i sees key j iff
    ``j <= i + Nk - Nq``. A row that sees no key gives 0 and lse ``-inf``.
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
    q = np.broadcast_to(q, batch + (n_q, head_dim))
    k = np.broadcast_to(k, batch + (n_k, head_dim))
    v = np.broadcast_to(v, batch + (n_k, head_dim_v))
    scale = 1.0 / np.sqrt(head_dim) if scale is None else float(scale)

    m = np.full(batch + (n_q,), -np.inf)
    l = np.zeros(batch + (n_q,))
    acc = np.zeros(batch + (n_q, head_dim_v))
    query_index = np.arange(n_q)[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n_k, tile):
            stop = min(start + tile, n_k)
            scores = np.matmul(q, np.swapaxes(k[..., start:stop, :], -1, -2)) * scale
            if causal:
                visible = np.arange(start, stop)[None, :] <= query_index + (n_k - n_q)
                scores = np.where(visible, scores, -np.inf)
            m_new = np.maximum(m, scores.max(axis=-1))
            alpha = np.where(m == -np.inf, 0.0, np.exp(m - m_new))
            probs = np.where(m_new[..., None] == -np.inf, 0.0, np.exp(scores - m_new[..., None]))
            l = l * alpha + probs.sum(axis=-1)
            acc = acc * alpha[..., None] + np.matmul(probs, v[..., start:stop, :])
            m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        seen = l > 0
        out = np.where(seen[..., None], acc / np.where(seen, l, 1.0)[..., None], 0.0)
        lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
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
