"""attention_varlen: attention over ragged packed batches (FlashAttention's varlen layout).

Chain (``_core.driver``): validate -> choose -> get kernel -> launch. NumPy inputs gather each sequence and run
the float64 path of ``_core.numpy_attention``; GPU inputs run the variant ``select.choose_varlen`` picks (or
``config``): ``attention_varlen_wgmma_tma`` (varlen_wgmma.py, the Hopper prefill kernel) or
``attention_varlen_simt`` (varlen_simt.py); neither reads cu_seqlens on the host.
"""
from __future__ import annotations

import numpy as np

from ... import reference
from ..._core import numpy_attention
from ..._core.device import device_info
from ..._core.driver import Op, bound_plan, run
from ..._core.dtypes import accumulator_dtype
from ..._core.numpy_path import deliver
from ..._core.plans import gpu_signature
from ..._core.validate import (as_arrays, as_index_array, check_config, check_out, check_prefix_sums, require_bool,
                               require_finite_real, require_float, require_ndim, require_same_dtype, require_sinks,
                               require_softcap, require_window)
from .plan import plan_varlen
from .varlen_problem import FN as _FN, describe_varlen
from .varlen_simt import VarlenSimtRows
from .varlen_wgmma import VarlenWgmmaTile

MAX_HEAD_DIM = 256
MAX_HEADS = 65535  # the grid's y extent
VARIANTS = (VarlenWgmmaTile, VarlenSimtRows)  # what ``config=`` takes


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None, window=None, softcap=None,
                     sinks=None, return_lse=False, out=None, config=None):
    """Attention of ragged sequences packed without padding (FlashAttention's varlen layout).

    Sequence b owns query rows ``cu_seqlens_q[b] ..< cu_seqlens_q[b + 1]`` of q and key / value rows
    ``cu_seqlens_k[b] ..< cu_seqlens_k[b + 1]`` of k and v, and attends to its own keys only.

    Parameters
    ----------
    q : array_like
        Queries ``(Tq, Hq, D)``, any strides. NumPy arrays and array-likes run the NumPy path and return
        NumPy; GPU arrays (CuPy, PyTorch, JAX, ...) run the GPU kernel and return CuPy.
    k : array_like
        Keys ``(Tk, Hkv, D)``, q's dtype; Hkv divides Hq: query head h uses KV head ``h // (Hq // Hkv)``.
    v : array_like
        Values ``(Tk, Hkv, Dv)``, q's dtype. D and Dv from 1 to 256.
    cu_seqlens_q, cu_seqlens_k : array_like of int32
        ``(B + 1,)`` prefix sums of the sequences' query and key counts (0 allowed): ``cu[0] == 0``,
        non-decreasing, ``cu[B] == Tq`` (``Tk``). On q's side; array-likes of int32 values convert.
    causal : bool, optional
        Bottom-right causal mask within each sequence: its query i sees its key j iff
        ``j <= i + nk - nq``. False by default.
    scale : float, optional
        The scores' factor; ``1/sqrt(D)`` by default.
    window : (left, right), optional
        Sliding window within each sequence, as in ``attention``.
    softcap : float, optional
        Replaces each scaled score s by ``c * tanh(s / c)`` before the softmax; a positive number.
    sinks : array, optional
        float32 ``(Hq,)``, one learned logit a query head (attention sinks, as in ``attention``): head h's
        rows take ``sinks[h % H]`` as one more key of value 0; H divides Hq; contiguous, on q's side.
    return_lse : bool, optional
        Also return the log-sum-exp of each row's scaled scores (with the sink).
    out : array, optional
        Written in place and returned: ``(Tq, Hq, Dv)``, q's dtype, C-contiguous, on q's side.
    config : kernel variant, optional
        Forces a kernel variant (``VarlenWgmmaTile``, ``VarlenSimtRows`` of ``cufuse.ops.attention``'s
        ``varlen_wgmma`` / ``varlen_simt``) instead of the default selection (GPU inputs only; checked and
        ignored on NumPy inputs).

    Returns
    -------
    out : ndarray
        ``(Tq, Hq, Dv)`` in q's dtype; ``out`` when it is given.
    lse : ndarray
        With ``return_lse`` only: ``(Tq, Hq)``, the natural log of each row's sum of exp(scaled scores), in
        the accumulator dtype: float32 (float64 for float64 inputs).

    Raises
    ------
    TypeError
        Non-float or mixed dtypes; cu_seqlens not int32; flags without a truth value; a ``scale``,
        ``softcap`` or ``window`` of another type; an unusable ``out``; host and GPU inputs mixed;
        ``sinks`` not float32; a foreign ``config``.
    ValueError
        q, k, v not 3-D; k's head dim not q's, v's token or head count not k's, a head dim outside 1 to
        256, Hkv not dividing Hq (or more than 65535 query heads); cu_seqlens not 1-D, empty or of
        different lengths; on the NumPy path, cu_seqlens that do not start at 0, decrease or do not end
        at the token count; invalid ``scale``, ``window`` or ``softcap`` values; an ``out`` of another
        shape, layout or device, or overlapping an input; ``sinks`` not 1-D, not contiguous or of a length
        not dividing Hq; on the GPU, a ``config`` that cannot run this call.

    Notes
    -----
    A row that sees no key (its sequence has no key, or the mask hides them all) is 0 with lse -inf (the
    sink's logit with ``sinks``). The GPU path never reads cu_seqlens on the host (no synchronisation: the
    call records into a CUDA graph); their values (start 0, non-decreasing, end at Tq / Tk) are the
    caller's contract there, checked on the NumPy path; the kernels clamp offsets to the token counts so
    that they never read or write outside the arrays. On compute capability 9.0, 16-bit inputs whose
    strides a TMA tensor map takes run ``attention``'s Hopper prefill kernel on (query tile, head) items
    that each block finds from cu_seqlens_q on the device (docs/attention.md); other calls run
    ``attention_varlen_simt``, one warp a (token, head) row, exact in the accumulator dtype, without
    tensor cores (far below ``attention``'s speed).

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> q = np.zeros((3, 1, 2))  # two sequences: 1 query, then 2 queries
    >>> k = np.zeros((3, 1, 2))  # 1 key, then 2 keys
    >>> v = np.array([[[1.0, 1.0]], [[2.0, 4.0]], [[4.0, 8.0]]])
    >>> cu = np.array([0, 1, 3], dtype=np.int32)
    >>> out = cufuse.attention_varlen(q, k, v, cu, cu, causal=True)
    >>> out[:, 0]
    array([[1., 1.],
           [2., 4.],
           [3., 6.]])
    >>> out, lse = cufuse.attention_varlen(q, k, v, cu, np.array([0, 0, 3], dtype=np.int32), return_lse=True)
    >>> out[0, 0], float(lse[0, 0])  # the first sequence has no key
    (array([0., 0.]), -inf)
    """
    given = (q, k, v, cu_seqlens_q, cu_seqlens_k) + (() if sinks is None else (sinks,))
    signature = gpu_signature(*given) if out is None else gpu_signature(*given, out)
    key = None
    if signature is not None and (window is None or type(window) is tuple):
        window_types = None if window is None else tuple(map(type, window))
        key = (_FN, signature, causal, type(causal), scale, type(scale), window, window_types, softcap, type(softcap),
               return_lse, type(return_lse), sinks is None, config)
    return run(_OP, key, given, out, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, window, softcap, sinks,
               return_lse, out, config)


def _check(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, window, softcap, sinks, return_lse, out, config):
    cu_seqlens_q = as_index_array(_FN, "cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k = as_index_array(_FN, "cu_seqlens_k", cu_seqlens_k)
    xp, arrays = as_arrays(_FN, q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, sinks=sinks,
                           optional=("sinks",))
    q, k, v, sinks = arrays["q"], arrays["k"], arrays["v"], arrays["sinks"]
    for name, arr in (("q", q), ("k", k), ("v", v)):
        require_float(_FN, name, arr)
        require_ndim(_FN, name, arr, exactly=3)
    require_same_dtype(_FN, "q", q, k=k, v=v)
    n_tokens_q, heads_q, head_dim = q.shape
    _check_shapes(q, k, v)
    cu_q, cu_k = arrays["cu_seqlens_q"], arrays["cu_seqlens_k"]
    _check_cu_seqlens(cu_q, cu_k)
    sink_heads = 0 if sinks is None else require_sinks(_FN, sinks, (heads_q,), (heads_q,))
    causal = require_bool(_FN, "causal", causal)
    return_lse = require_bool(_FN, "return_lse", return_lse)
    scale = 1.0 / float(np.sqrt(head_dim)) if scale is None else require_finite_real(_FN, "scale", scale)
    window = require_window(_FN, window)
    softcap = require_softcap(_FN, softcap)
    check_config(_FN, config, VARIANTS)
    out_shape = (n_tokens_q, heads_q, v.shape[-1])
    out = check_out(_FN, out, shape=out_shape, dtype=q.dtype, xp=xp, inputs=arrays)
    if xp is np:
        check_prefix_sums(_FN, "cu_seqlens_q", cu_q, n_tokens_q, "Tq")
        check_prefix_sums(_FN, "cu_seqlens_k", cu_k, k.shape[0], "Tk")
    return xp, arrays, out, (causal, scale, window, softcap, return_lse, out_shape, sink_heads, config)


def _numpy(arrays, out, problem):
    causal, scale, window, softcap, return_lse, _, _, _ = problem
    q = arrays["q"]
    result, lse = reference.per_sequence(numpy_attention.attention, q, arrays["k"], arrays["v"],
                                         arrays["cu_seqlens_q"], arrays["cu_seqlens_k"], causal=causal, scale=scale,
                                         window=window, softcap=softcap, sinks=arrays["sinks"])
    result, lse = deliver(result, out, q.dtype), lse.astype(accumulator_dtype(q.dtype))
    return (result, lse) if return_lse else result


def _check_shapes(q, k, v) -> None:
    n_tokens_q, heads_q, head_dim = q.shape
    n_tokens_k, heads_kv, _ = k.shape
    if k.shape[-1] != head_dim:
        raise ValueError(f"{_FN}: argument 'k' expected last axis {head_dim} (q's head dim), got shape {k.shape}")
    if v.shape[:2] != k.shape[:2]:
        raise ValueError(f"{_FN}: argument 'v' expected (Tk, Hkv) = {k.shape[:2]} (k's), got shape {v.shape}")
    for name, dim in (("q", head_dim), ("v", v.shape[-1])):
        if not 1 <= dim <= MAX_HEAD_DIM:
            raise ValueError(f"{_FN}: argument '{name}' expected a head dim from 1 to {MAX_HEAD_DIM}, got {dim}")
    if heads_kv < 1 or heads_q % heads_kv:
        raise ValueError(f"{_FN}: argument 'k' expected a head count on axis 1 that divides q's {heads_q}, "
                         f"got shape {k.shape}")
    if heads_q > MAX_HEADS:
        raise ValueError(f"{_FN}: argument 'q' expected at most {MAX_HEADS} heads (axis 1), got shape {q.shape}")
    for name, tokens in (("q", n_tokens_q), ("k", n_tokens_k)):
        if tokens > np.iinfo(np.int32).max:
            raise ValueError(f"{_FN}: argument '{name}' expected at most 2**31 - 1 tokens (axis 0), got {tokens}")


def _check_cu_seqlens(cu_q, cu_k) -> None:
    for name, arr in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if arr.dtype != np.int32:
            raise TypeError(f"{_FN}: argument '{name}' expected dtype int32, got {arr.dtype}")
        require_ndim(_FN, name, arr, exactly=1)
        if arr.shape[0] < 1:
            raise ValueError(f"{_FN}: argument '{name}' expected B + 1 >= 1 prefix sums, got shape {arr.shape}")
    if cu_k.shape != cu_q.shape:
        raise ValueError(f"{_FN}: argument 'cu_seqlens_k' expected shape {cu_q.shape} (cu_seqlens_q's: one "
                         f"entry a sequence, plus one), got {cu_k.shape}")


def _bind(call):
    """One launch on q's device (None for an empty output: the plan is still made, so a ``config``
    that cannot run the call raises as any other). Nothing is allocated besides ``out`` and lse;
    nothing is read back to the host."""
    causal, scale, window, softcap, return_lse, out_shape, sink_heads, config = call.problem
    q = call.arrays["q"]
    call.outputs = (("out", out_shape, q.dtype, None),)
    if return_lse:
        call.outputs += (("lse", out_shape[:-1], accumulator_dtype(q.dtype), None),)
    names = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k")
    shapes = {n: call.arrays[n].shape for n in names}
    strides = {n: tuple(st // call.arrays[n].itemsize for st in call.arrays[n].strides) for n in names}
    aligned = tuple(call.arrays[n].data.ptr % 16 == 0 for n in "qkv")
    sides = (-1, -1) if window is None else tuple(-1 if s is None else s for s in window)

    def plan(dev):
        problem = describe_varlen(shapes, strides, q.dtype, aligned, causal, scale, sides, softcap, return_lse,
                                  sink_heads)
        return plan_varlen(problem, dev, config)

    if 0 in out_shape:
        plan(device_info(q.device.id))
        return None
    key = (_FN, tuple(shapes.values()), tuple(strides.values()), q.dtype, causal, scale, sides, softcap, return_lse,
           sink_heads, aligned, q.device.id, config)
    return bound_plan(key, q.device.id, plan)


_OP = Op(_check, _numpy, _bind)
