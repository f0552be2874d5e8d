"""attention: ``softmax(q @ k^T * scale) @ v`` without materialising the score matrix.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle of ``cufuse.reference``; CuPy inputs run the kernels of ``kernels/attention/``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import reference
from ..._core.device import device_info
from ..._core.numpy_path import deliver
from ..._core.plans import PLANS, BoundPlan
from ..._core.validate import array_namespace, check_out, require_float, require_ndim, require_same_dtype
from .decode import DecodeTile
from .mma import FlashMmaTile
from .plan import plan_attention
from .simt import SimtRows
from .wgmma import FlashWgmmaTile

_FN = "attention"
MAX_HEAD_DIM = 256
VARIANTS = (FlashMmaTile, FlashWgmmaTile, DecodeTile, SimtRows)  # what ``config=`` takes


def attention(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, config=None):
    """FlashAttention forward for q ``(..., Nq, D)``, k ``(..., Nk, D)``, v ``(..., Nk, Dv)``.

    Leading dims broadcast (a size-1 head axis on k/v is MQA/GQA). ``scale`` defaults to
    ``1/sqrt(D)``. ``causal`` is bottom-right aligned: query i sees key j iff
    ``j <= i + Nk - Nq``; a row that sees no key is 0 with lse ``-inf``. With
    ``return_lse`` the result is ``(out, lse)``, lse float32 ``(..., Nq)``. ``config`` (GPU
    inputs only) forces a kernel variant (``FlashMmaTile``, ``FlashWgmmaTile``,
    ``DecodeTile``, ``SimtRows``) instead of the default selection.
    """
    xp = array_namespace(_FN, q=q, k=k, v=v)
    for name, arr in (("q", q), ("k", k), ("v", v)):
        require_float(_FN, name, arr)
        require_ndim(_FN, name, arr, at_least=2)
    require_same_dtype(_FN, "q", q, k=k, v=v)
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
            f"{_FN}: arguments 'q', 'k', 'v' expected leading dims that broadcast, got "
            f"{q.shape[:-2]}, {k.shape[:-2]}, {v.shape[:-2]}"
        ) from None
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{_FN}: argument 'causal' expected a bool, got {type(causal).__name__}")
    if scale is not None:
        if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not np.isfinite(scale):
            raise TypeError(f"{_FN}: argument 'scale' expected None or a finite real number, got {scale!r}")
        scale = float(scale)
    else:
        scale = 1.0 / float(np.sqrt(head_dim))
    out_shape = batch + (n_q, head_dim_v)
    out = check_out(_FN, out, shape=out_shape, dtype=q.dtype, xp=xp, inputs={"q": q, "k": k, "v": v})
    if xp is np:
        result, lse = reference.attention(q, k, v, causal=bool(causal), scale=scale, return_lse=True)
        result = deliver(result, out, q.dtype)
        return (result, lse.astype(np.float32)) if return_lse else result
    return _attention_gpu(q, k, v, bool(causal), scale, bool(return_lse), out, out_shape, config)


def _attention_gpu(q, k, v, causal, scale, return_lse, out, out_shape, config):
    """One forward launch, plus attention_merge when the plan splits the keys.

    Workspace: with a key split the partial results take ``splits * B * Nq * (Dv + 1)``
    float32 (B = the flattened batch), freed when the call returns; nothing else is
    allocated besides ``out`` and lse. Inputs are never copied: broadcast dims get stride 0,
    strided views pass their strides (a non-unit last-axis stride takes the scalar-load path).
    """
    import cupy

    with q.device:
        aligned = (q.data.ptr % 16 == 0, k.data.ptr % 16 == 0, v.data.ptr % 16 == 0)
        key = (_FN, q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, q.dtype, causal, scale, return_lse,
               aligned, q.device.id, config)
        bound = PLANS.get(key)
        if bound is None:
            bound = _bind(key, q, k, v, causal, scale, return_lse, aligned, config, math.prod(out_shape) == 0)
        if out is None:
            out = cupy.empty(out_shape, dtype=q.dtype)
        lse = cupy.empty(out_shape[:-1], dtype=np.float32) if return_lse else None
        if bound is not None:
            bound({"q": q, "k": k, "v": v, "out": out, "lse": lse})
    return (out, lse) if return_lse else out


def _bind(key, q, k, v, causal, scale, return_lse, aligned, config, empty):
    """The bound plan of a call signature, kept in PLANS; None for an empty output (nothing
    to launch; the plan is still made, so a call that cannot run raises as any other)."""
    if config is not None and not isinstance(config, VARIANTS):
        raise TypeError(f"{_FN}: argument 'config' expected None or one of "
                        f"{', '.join(c.__name__ for c in VARIANTS)}, got {type(config).__name__}")
    itemsize = q.dtype.itemsize
    strides = [tuple(st // itemsize for st in a.strides) for a in (q, k, v)]
    dev = device_info(q.device.id)
    plan = plan_attention(q.shape, strides[0], k.shape, strides[1], v.shape, strides[2], q.dtype, causal, scale,
                          return_lse, aligned, dev, config)
    if empty:
        return None
    return PLANS.put(key, BoundPlan(plan, dev))
