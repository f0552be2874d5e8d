"""attention: ``softmax(q @ k^T * scale) @ v`` without materialising the score matrix.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the vectorised
float64 path of ``_core.numpy_attention`` (the tiled oracle ``cufuse.reference`` checks it); CuPy inputs run the kernels of ``kernels/attention/``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._core.device import device_info
from ..._core.dtypes import accumulator_dtype
from ..._core.driver import Op, bound_plan, run
from ..._core.numpy_path import deliver
from ..._core.plans import gpu_signature
from ..._core.validate import (as_arrays, check_config, check_out, require_bool, require_finite_real, require_float,
                               require_ndim, require_same_dtype, require_sinks, require_softcap, require_window)
from .decode import DecodeTile
from .mma import FlashMmaTile
from ..._core import numpy_attention
from .plan import plan_attention
from .simt import SimtRows
from .wgmma import FlashWgmmaTile

_FN = "attention"
MAX_HEAD_DIM = 256
VARIANTS = (FlashMmaTile, FlashWgmmaTile, DecodeTile, SimtRows)  # what ``config=`` takes


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None, sinks=None, enable_gqa=False,
              return_lse=False, out=None, config=None):
    """FlashAttention forward: ``softmax(q @ k^T * scale) @ v`` without materialising the score matrix.

    Parameters
    ----------
    q : array_like
        Queries ``(..., Nq, D)``. NumPy arrays and array-likes run the NumPy path and return NumPy; GPU arrays
        (CuPy, PyTorch, JAX, ...) run the GPU kernels and return CuPy.
    k : array_like
        Keys ``(..., Nk, D)``, q's dtype.
    v : array_like
        Values ``(..., Nk, Dv)``, q's dtype. D and Dv from 1 to 256. Leading dims of q, k and v broadcast by
        NumPy's rules (a size-1 head axis on k / v is MQA / GQA).
    causal : bool, optional
        Bottom-right aligned causal mask: query i sees key j iff ``j <= i + Nk - Nq``. False by default.
    scale : float, optional
        The scores' factor; ``1/sqrt(D)`` by default.
    window : (left, right), optional
        Sliding window: the query at position ``p = i + Nk - Nq`` sees keys ``p - left <= j <= p + right``;
        None on a side (or for the whole) is unlimited; ``causal`` caps right at 0.
    softcap : float, optional
        Replaces each scaled score s by ``c * tanh(s / c)`` before the softmax (Gemma 2); a positive number.
    sinks : array, optional
        float32 ``(H,)``, one learned logit a query head (attention sinks): it joins every row's softmax as one
        more key whose value is 0, and the lse includes it. The batch items of q (C order over its leading
        dims) take ``sinks[b % H]``: ``(Hq,)`` for q ``(B, Hq, Nq, D)`` or with ``enable_gqa``, ``(Hkv * G,)``
        for the broadcast form ``(B, Hkv, G, Nq, D)``. H divides q's batch items; contiguous, on q's side.
    enable_gqa : bool, optional
        SDPA's name: also take grouped-query heads on axis -3, q ``(..., Hq, Nq, D)``, k / v
        ``(..., Hkv, Nk, D)`` with ``Hq % Hkv == 0``; query head h uses key / value head ``h // (Hq // Hkv)``.
    return_lse : bool, optional
        Also return the log-sum-exp of each row's scaled scores.
    out : array, optional
        Written in place and returned: ``(..., Nq, Dv)``, q's dtype, C-contiguous, on q's side.
    config : kernel variant, optional
        Forces a kernel variant (``FlashMmaTile``, ``FlashWgmmaTile``, ``DecodeTile``, ``SimtRows``) instead
        of the default selection (GPU inputs only; checked and ignored on NumPy inputs).

    Returns
    -------
    out : ndarray
        ``(..., Nq, Dv)`` (the broadcast leading dims) in q's dtype; ``out`` when it is given.
    lse : ndarray
        With ``return_lse`` only: ``(..., Nq)``, the natural log of each row's sum of exp(scaled scores), in the
        accumulator dtype: float32 (float64 for float64 inputs).

    Raises
    ------
    TypeError
        Non-float inputs or inputs of different dtypes; ``causal`` / ``return_lse`` / ``enable_gqa`` without a
        truth value; a ``scale`` or ``softcap`` that is not a real number; a ``window`` that is not None or a
        pair; a foreign ``config``; an unusable ``out``; host and GPU inputs mixed;
        ``sinks`` not float32.
    ValueError
        Inputs with fewer than 2 dims; k's head dim not q's, v's key count not k's, a head dim outside 1 to
        256; leading dims that do not broadcast (or heads that do not group with ``enable_gqa``); a
        non-finite ``scale``; a non-positive ``softcap``; negative window sides; an ``out`` of another shape,
        layout or device, or overlapping an input; on the GPU, a ``config`` that cannot run this call;
        ``sinks`` not 1-D, not contiguous, of a length not dividing q's batch items, or with q broadcast
        inside the batch.

    Notes
    -----
    A row that sees no key is 0 (never NaN) with lse ``-inf``. NaN in the inputs propagates to the rows it
    touches. Accumulation is float32 (float64 for float64); the NumPy path computes in float64 and rounds
    once. With ``enable_gqa`` the grouped layout runs the same kernels as the broadcast form
    ``(..., Hkv, G, Nq, D)``. On the GPU, key tiles that the window or the causal mask hide from every row of
    a block are skipped; decode shapes (few queries, many keys) split the keys across blocks and merge the
    partials by their lse. Inputs are never copied: broadcast dims get stride 0, strided views pass their
    strides. Which kernel runs which shape: ``cufuse.ops.attention.select`` and docs/attention.md.
    With ``sinks`` a row that sees no key has lse the sink's logit; on the GPU a sink is folded into the
    epilogue of one key split only (the first), so the lse merge of the splits is exact.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> q = np.zeros((2, 4))
    >>> k = np.ones((3, 4))
    >>> v = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    >>> out, lse = cufuse.attention(q, k, v, causal=True, return_lse=True)
    >>> out
    array([[1., 2.],
           [2., 3.]])
    >>> np.round(lse, 4)
    array([0.6931, 1.0986])
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 5, 8)) for _ in range(3))
    >>> s = q @ k.swapaxes(-1, -2) / np.sqrt(8)
    >>> p = np.exp(s - s.max(axis=-1, keepdims=True))
    >>> np.allclose(cufuse.attention(q, k, v), p / p.sum(axis=-1, keepdims=True) @ v)
    True
    """
    given = (q, k, v) if sinks is None else (q, k, v, sinks)
    signature = gpu_signature(*given) if out is None else gpu_signature(*given, out)
    key = None
    if signature is not None and (window is None or type(window) is tuple):
        window_types = None if window is None else tuple(map(type, window))
        key = (_FN, signature, causal, type(causal), scale, type(scale), window, window_types, softcap, type(softcap),
               enable_gqa, type(enable_gqa), return_lse, type(return_lse), config, sinks is None)
    return run(_OP, key, given, out, q, k, v, causal, scale, window, softcap, sinks, enable_gqa, return_lse, out,
               config)


def _check(q, k, v, causal, scale, window, softcap, sinks, enable_gqa, return_lse, out, config):
    xp, arrays = as_arrays(_FN, q=q, k=k, v=v, sinks=sinks, optional=("sinks",))
    q, k, v, sinks = arrays["q"], arrays["k"], arrays["v"], arrays["sinks"]
    for name, arr in (("q", q), ("k", k), ("v", v)):
        require_float(_FN, name, arr)
        require_ndim(_FN, name, arr, at_least=2)
    require_same_dtype(_FN, "q", q, k=k, v=v)
    causal = require_bool(_FN, "causal", causal)
    return_lse = require_bool(_FN, "return_lse", return_lse)
    window = require_window(_FN, window)
    softcap = require_softcap(_FN, softcap)
    check_config(_FN, config, VARIANTS)
    grouped = None
    if require_bool(_FN, "enable_gqa", enable_gqa):
        q, k, v, grouped = _group_heads(xp, q, k, v)
    n_q, head_dim = q.shape[-2:]
    n_k, head_dim_v = v.shape[-2:]
    if k.shape[-1] != head_dim:
        raise ValueError(f"{_FN}: argument 'k' expected last axis {head_dim} (q's head dim), got shape {k.shape}")
    if k.shape[-2] != n_k:
        raise ValueError(f"{_FN}: argument 'v' expected {k.shape[-2]} keys (k's axis -2), got shape {v.shape}")
    for name, dim in (("q", head_dim), ("v", head_dim_v)):
        if not 1 <= dim <= MAX_HEAD_DIM:
            raise ValueError(f"{_FN}: argument '{name}' expected a head dim from 1 to {MAX_HEAD_DIM}, got {dim}")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{_FN}: arguments 'q', 'k', 'v' expected leading dims that broadcast (grouped-query heads: "
            f"enable_gqa=True), got {q.shape[:-2]}, {k.shape[:-2]}, {v.shape[:-2]}"
        ) from None
    sink_heads = 0 if sinks is None else require_sinks(_FN, sinks, q.shape[:-2], batch)
    scale = 1.0 / float(np.sqrt(head_dim)) if scale is None else require_finite_real(_FN, "scale", scale)
    out_shape = batch + (n_q, head_dim_v)
    given_shape = out_shape if grouped is None else grouped(out_shape)
    arrays = {"q": q, "k": k, "v": v, "sinks": sinks}
    out = check_out(_FN, out, shape=given_shape, dtype=q.dtype, xp=xp, inputs=arrays)
    return xp, arrays, out, (causal, scale, window, softcap, return_lse, config, given_shape, grouped, out_shape,
                             sink_heads)


def _numpy(arrays, out, problem):
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    causal, scale, window, softcap, return_lse, _, _, grouped, out_shape, _ = problem
    given_out = out
    if out is not None and grouped is not None:
        out = out.reshape(out_shape)  # a view: out is C-contiguous
    result, lse = numpy_attention.attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap,
                                            sinks=arrays["sinks"], return_lse=True)
    result = deliver(result, out, q.dtype)
    lse = lse.astype(accumulator_dtype(q.dtype))
    if grouped is not None:
        result = given_out if given_out is not None else result.reshape(grouped(result.shape))
        lse = lse.reshape(grouped(lse.shape + (1,))[:-1])
    return (result, lse) if return_lse else result


def _group_heads(xp, q, k, v):
    """The grouped-query layout (heads on axis -3, ``Hq % Hkv == 0``) as the broadcast form:
    q ``(..., Hkv, G, Nq, D)`` and k / v ``(..., Hkv, 1, Nk, D)``, views without a copy, and
    the function that maps a result shape ``(..., Hkv, G, Nq, X)`` back to ``(..., Hq, Nq, X)``."""
    for name, arr in (("q", q), ("k", k), ("v", v)):
        require_ndim(_FN, name, arr, at_least=3)
    heads_q, heads_kv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != heads_kv:
        raise ValueError(f"{_FN}: argument 'v' expected {heads_kv} heads on axis -3 (k's, enable_gqa=True), "
                         f"got shape {v.shape}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"{_FN}: argument 'k' expected a head count on axis -3 that divides q's {heads_q} "
                         f"(enable_gqa=True), got shape {k.shape}")
    group = heads_q // heads_kv
    head_stride = q.strides[-3]
    q = xp.lib.stride_tricks.as_strided(q, q.shape[:-3] + (heads_kv, group) + q.shape[-2:],
                                        q.strides[:-3] + (group * head_stride, head_stride) + q.strides[-2:])
    k, v = k[..., None, :, :], v[..., None, :, :]

    def ungroup(shape):
        return shape[:-4] + (shape[-4] * shape[-3],) + shape[-2:]

    return q, k, v, ungroup


def _bind(call):
    """The forward launch, plus attention_merge when the plan splits the keys, on q's device;
    None for an empty output (nothing to launch; the plan is still made, so a call that cannot
    run raises as any other).

    Workspace: with a key split the partial results take ``splits * B * Nq * (Dv + 1)``
    float32 (B = the flattened batch): up to 32 MiB a workspace kept per stream and reused,
    beyond that allocated for the call and freed when it returns (merge.py); nothing else
    is allocated besides ``out`` and lse. Inputs are never copied: broadcast dims get stride 0,
    strided views pass their strides (a non-unit last-axis stride takes the scalar-load path).
    No key at all: every row is 0 with lse -inf (its sink's logit), as on the NumPy path, without a launch.
    The results are allocated as the caller gets them (grouped heads regrouped): the kernels
    take their pointers, the same as the broadcast form's.
    """
    q, k, v = call.arrays["q"], call.arrays["k"], call.arrays["v"]
    causal, scale, window, softcap, return_lse, config, given_shape, _, out_shape, sink_heads = call.problem
    call.outputs = (("out", given_shape, q.dtype, None),)
    if return_lse:  # lse (..., Nq), its heads as out's
        call.outputs += (("lse", given_shape[:-1], accumulator_dtype(q.dtype), None),)
    if k.shape[-2] == 0:  # filled, never a prepared call
        call.prepare = False
        return functools.partial(_no_keys, out_shape, sink_heads)
    aligned = (q.data.ptr % 16 == 0, k.data.ptr % 16 == 0, v.data.ptr % 16 == 0)

    def plan(dev):
        itemsize = q.dtype.itemsize
        strides = [tuple(st // itemsize for st in a.strides) for a in (q, k, v)]
        return plan_attention(q.shape, strides[0], k.shape, strides[1], v.shape, strides[2], q.dtype, causal, scale,
                              return_lse, aligned, dev, config, window, softcap, sink_heads)

    if math.prod(out_shape) == 0:
        plan(device_info(q.device.id))
        return None
    key = (_FN, q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, q.dtype, causal, scale, window, softcap,
           return_lse, aligned, q.device.id, config, sink_heads)
    return bound_plan(key, q.device.id, plan)


def _no_keys(out_shape, sink_heads, arrays):
    """No key: every row is 0 with lse -inf (its sink's logit), as on the NumPy path; lse is
    written through its view in the broadcast form's shape (grouped heads ungrouped)."""
    import cupy

    arrays["out"].fill(0)
    lse, sinks = arrays.get("lse"), arrays["sinks"]
    if lse is not None:
        lse.fill(-np.inf)
        if sinks is not None:  # the sink is the row's only key
            lead = arrays["q"].shape[:-2]
            logits = sinks[cupy.arange(math.prod(lead)) % sink_heads].reshape(lead)
            lse.reshape(out_shape[:-1])[...] = cupy.broadcast_to(logits, out_shape[:-2])[..., None]


_OP = Op(_check, _numpy, _bind)
