"""PagedAttention: ``attention_paged`` over K/V pages of a shared pool, and ``kv_append``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
path of ``numpy_path`` (pages gathered, then the vectorised dense attention) and check every page
index a sequence uses; CuPy inputs run the kernels of ``kernels/paged_attention/`` and never
read block_table, seq_lens or the cu_seqlens prefix sums on the host (no synchronisation),
except under CUFUSE_DEBUG=1, which checks the page indices first.
"""
from __future__ import annotations

import math

import numpy as np

from ... import reference
from ..._core.driver import Op, bound_plan, run
from ..._core.loader import debug_enabled
from ..._core.numpy_path import deliver
from ..._core.plans import gpu_signature
from ..._core.dtypes import accumulator_dtype
from ..._core.validate import (as_arrays, as_index_array, check_config, check_out, check_prefix_sums, require_bool,
                               require_finite_real, require_float, require_ndim, require_same_dtype, require_sinks,
                               require_softcap, require_window, require_writable)
from . import numpy_path
from .checks import (check_cu, check_indices, check_pages, check_seq_lens, check_table, element_strides, host,
                     require_rows)
from .plan import plan_attention_paged, plan_kv_append
from .problem import UNLIMITED
from .select import VARIANTS

_FN = "attention_paged"
_APPEND = "kv_append"


def attention_paged(q, k_pages, v_pages, block_table, seq_lens, *, causal=True, scale=None, window=None,
                    softcap=None, sinks=None, cu_seqlens_q=None, return_lse=False, out=None, config=None):
    """Attention of each sequence's newest queries over its keys and values in pages of a shared pool.

    Parameters
    ----------
    q : array_like
        Queries ``(B, Hq, Nq, D)``, at least one query; with ``cu_seqlens_q`` packed ``(Tq, Hq, D)``. NumPy
        arrays and array-likes run the NumPy path and return NumPy; GPU arrays (CuPy, PyTorch, JAX, ...) run
        the GPU kernels and return CuPy.
    k_pages, v_pages : array_like
        The logical ``(P, Hkv, S, D)`` / ``(P, Hkv, S, Dv)`` pools (P pages of S keys), q's dtype, any strides
        whose last is 1: vLLM's ``(P, S, Hkv, D)`` storage passes as ``.transpose(0, 2, 1, 3)``. Hkv divides
        Hq: query head h uses KV head ``h // (Hq // Hkv)``. D and Dv from 1 to 256.
    block_table : array_like of int32
        ``(B, max_pages)``: each sequence's pages in order. Array-likes of int32 values convert.
    seq_lens : array_like of int32
        ``(B,)``: each sequence's key count, the Nq newest included. Array-likes of int32 values convert.
    causal : bool, optional
        Bottom-right causal mask within each sequence; True by default.
    scale : float, optional
        The scores' factor; ``1/sqrt(D)`` by default.
    window : (left, right), optional
        Sliding window, as in ``attention``.
    softcap : float, optional
        Score soft-capping ``c * tanh(s / c)``, as in ``attention``.
    sinks : array, optional
        float32 ``(Hq,)``: query head h's learned logit ``sinks[h % H]`` joins its rows' softmax as one more
        key of value 0, as in ``attention`` (a length H dividing Hq, contiguous, on q's side).
    cu_seqlens_q : array_like of int32, optional
        ``(B + 1,)`` prefix sums of the sequences' query counts (0 allowed), q then packed: sequence b owns
        query rows ``cu_seqlens_q[b] ..< cu_seqlens_q[b + 1]``, its newest queries, so one call serves a step
        that mixes prefill chunks and decodes. ``cu[0] == 0``, non-decreasing, ``cu[B] == Tq``. On q's
        side; array-likes of int32 values convert.
    return_lse : bool, optional
        Also return each row's log-sum-exp.
    out : array, optional
        Written in place and returned: ``(B, Hq, Nq, Dv)`` (packed ``(Tq, Hq, Dv)``), q's dtype,
        C-contiguous, on q's side.
    config : kernel variant, optional
        Forces a kernel variant (``PagedMmaTile``, ``PagedSimtRows``) (GPU inputs only; checked and ignored on
        NumPy inputs).

    Returns
    -------
    out : ndarray
        ``(B, Hq, Nq, Dv)`` (packed ``(Tq, Hq, Dv)``) in q's dtype; ``out`` when it is given.
    lse : ndarray
        With ``return_lse`` only: ``(B, Hq, Nq)`` (packed ``(Tq, Hq)``) in the accumulator dtype, float32
        (float64 for float64).

    Raises
    ------
    TypeError
        Non-float or mixed dtypes; a block_table, seq_lens or cu_seqlens_q that is not int32; flags without a
        truth value; a ``window`` or ``scale`` of another type; a foreign ``config``; an unusable ``out``; host
        and GPU inputs mixed; ``sinks`` not float32.
    ValueError
        Arrays that are not 4-D (q, pages; q 3-D with cu_seqlens_q), 2-D (block_table) or 1-D (seq_lens,
        cu_seqlens_q); pages whose head dim, head count or page shape do not match, or whose last stride is
        not 1; Hkv not dividing Hq; no query (unpacked); a table, lengths or prefix sums of another batch;
        queries without a sequence (B = 0, Tq > 0); array-likes with values outside int32; on the NumPy path
        (and on the GPU under ``CUFUSE_DEBUG=1``) a length outside 0 to ``max_pages * S``, a page index
        outside ``[0, P)`` among the pages a sequence uses, or prefix sums that do not start at 0, decrease or
        do not end at Tq; invalid ``scale``, ``window`` or ``softcap`` values; an ``out`` of another shape,
        layout or device, or overlapping an input; ``sinks`` not 1-D, not contiguous or of a length not
        dividing Hq.

    Notes
    -----
    A row that sees no key is 0 with lse -inf. The NumPy path gathers the pages and runs the float64 dense
    oracle, after checking every page index a sequence uses. On the GPU the kernels never read block_table,
    seq_lens or cu_seqlens_q on the host (no synchronisation: the call records into a CUDA graph), except
    under ``CUFUSE_DEBUG=1``, which checks the page indices first; packed, the grid comes from Tq, B and
    ``max_pages * S`` alone, prefill chunks are cut into query tiles and long sequences' keys into units.
    Design and measurements: docs/paged_attention.md. With ``sinks`` a row that sees no key has lse
    the sink's logit; the kernels fold a sink into the first work unit of each query tile only, so the lse
    merge of the units is exact.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> k_pages = np.zeros((2, 1, 2, 2))  # 2 pages, 1 KV head, 2 keys a page, head dim 2
    >>> v_pages = np.zeros((2, 1, 2, 2))
    >>> block_table = [[1, 0]]  # the sequence's first page is page 1, its second page 0
    >>> cufuse.kv_append(k_pages, v_pages, np.ones((1, 1, 3, 2)), np.arange(6.0).reshape(1, 1, 3, 2),
    ...                  block_table, [0])
    >>> q = np.zeros((1, 1, 1, 2))
    >>> cufuse.attention_paged(q, k_pages, v_pages, block_table, [3])
    array([[[[2., 3.]]]])
    >>> out, lse = cufuse.attention_paged(q, k_pages, v_pages, block_table, [2], return_lse=True)
    >>> out, np.round(lse, 4)
    (array([[[[1., 2.]]]]), array([[[0.6931]]]))
    """
    key = _prepared_key(q, k_pages, v_pages, block_table, seq_lens, out, causal, scale, window, softcap, return_lse,
                        config, sinks, cu_seqlens_q)
    given = tuple(x for x in (q, k_pages, v_pages, block_table, seq_lens, cu_seqlens_q, sinks) if x is not None)
    return run(_ATTENTION_PAGED, key, given, out, q, k_pages, v_pages, block_table, seq_lens, causal, scale, window,
               softcap, sinks, cu_seqlens_q, return_lse, out, config)


def _check_paged(q, k_pages, v_pages, block_table, seq_lens, causal, scale, window, softcap, sinks, cu_seqlens_q,
                 return_lse, out, config):
    block_table, seq_lens = as_index_array(_FN, "block_table", block_table), as_index_array(_FN, "seq_lens", seq_lens)
    cu_seqlens_q = as_index_array(_FN, "cu_seqlens_q", cu_seqlens_q)
    xp, arrays = as_arrays(_FN, q=q, k_pages=k_pages, v_pages=v_pages, block_table=block_table, seq_lens=seq_lens,
                           cu_seqlens_q=cu_seqlens_q, sinks=sinks, optional=("cu_seqlens_q", "sinks"))
    sinks, cu_seqlens_q = arrays["sinks"], arrays["cu_seqlens_q"]
    q, k_pages, v_pages = arrays["q"], arrays["k_pages"], arrays["v_pages"]
    block_table, seq_lens = arrays["block_table"], arrays["seq_lens"]
    packed = cu_seqlens_q is not None
    for name, arr in (("q", q), ("k_pages", k_pages), ("v_pages", v_pages)):
        require_float(_FN, name, arr)
    require_rows(_FN, "q", q, packed, "(Tq, Hq, D)", "(B, Hq, Nq, D)", "cu_seqlens_q")
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages)):
        require_ndim(_FN, name, arr, exactly=4)
    require_same_dtype(_FN, "q", q, k_pages=k_pages, v_pages=v_pages)
    heads_q, head_dim = q.shape[-2:] if packed else q.shape[1::2]
    heads_kv = check_pages(_FN, k_pages, v_pages, head_dim, "q")
    if not packed and q.shape[2] < 1:
        raise ValueError(f"{_FN}: argument 'q' expected at least one query (axis 2), got shape {q.shape}")
    if heads_q % heads_kv:
        raise ValueError(f"{_FN}: argument 'k_pages' expected a head count on axis 1 that divides q's {heads_q}, "
                         f"got shape {k_pages.shape}")
    batch = check_seq_lens(_FN, seq_lens) if packed else q.shape[0]
    check_table(_FN, block_table, seq_lens, batch, k_pages.shape[2])
    if packed:
        check_cu(_FN, "cu_seqlens_q", cu_seqlens_q, batch, q.shape[0], "q", "Tq")
    sink_heads = 0 if sinks is None else require_sinks(_FN, sinks, (heads_q,), (heads_q,))
    causal = require_bool(_FN, "causal", causal)
    return_lse = require_bool(_FN, "return_lse", return_lse)
    check_config(_FN, config, VARIANTS)
    scale = 1.0 / float(np.sqrt(head_dim)) if scale is None else require_finite_real(_FN, "scale", scale)
    window = require_window(_FN, window)
    softcap = require_softcap(_FN, softcap)
    out_shape = q.shape[:-1] + (v_pages.shape[-1],)
    inputs = {name: arr for name, arr in arrays.items() if arr is not None and name != "sinks"}
    out = check_out(_FN, out, shape=out_shape, dtype=q.dtype, xp=xp, inputs=inputs)
    if xp is np or debug_enabled():
        if packed:
            check_prefix_sums(_FN, "cu_seqlens_q", host(cu_seqlens_q), q.shape[0], "Tq")
        check_indices(_FN, xp, block_table, seq_lens, k_pages.shape[0], k_pages.shape[2])
    return xp, arrays, out, (causal, scale, window, softcap, return_lse, config, out_shape, sink_heads)


def _numpy_paged(arrays, out, problem):
    q, k_pages, v_pages, block_table, seq_lens, cu_seqlens_q, sinks = arrays.values()
    causal, scale, window, softcap, return_lse, _, _, _ = problem
    result, lse = numpy_path.attention_paged(q, k_pages, v_pages, block_table, seq_lens, causal=causal, scale=scale,
                                            window=window, softcap=softcap, sinks=sinks, cu_seqlens_q=cu_seqlens_q,
                                            return_lse=True)
    result, lse = deliver(result, out, q.dtype), lse.astype(accumulator_dtype(q.dtype))
    return (result, lse) if return_lse else result


def _prepared_key(q, k_pages, v_pages, block_table, seq_lens, out, causal, scale, window, softcap, return_lse,
                  config, sinks=None, cu_seqlens_q=None):
    """The prepared-call key of a GPU call (every argument with its type; window's entries'
    types too), or None: not all CuPy arrays, CUFUSE_DEBUG set, or an unhashable argument."""
    arrays = tuple(x for x in (q, k_pages, v_pages, block_table, seq_lens, cu_seqlens_q, sinks, out) if x is not None)
    signature = gpu_signature(*arrays)
    if signature is None or debug_enabled():
        return None
    window_types = tuple(map(type, window)) if isinstance(window, tuple) else None
    key = (_FN, signature, causal, type(causal), scale, type(scale), window, type(window), window_types, softcap,
           type(softcap), return_lse, type(return_lse), config, sinks is None, cu_seqlens_q is None)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def kv_append(k_pages, v_pages, k_new, v_new, block_table, seq_lens, *, cu_seqlens_new=None):
    """Write new keys and values into each sequence's pages, in place, after its ``seq_lens`` keys.

    k_new and v_new go to positions ``seq_lens[b] ..< seq_lens[b] + Nnew`` of each sequence, in one launch on
    the GPU; the caller then passes ``seq_lens + Nnew`` to ``attention_paged``. With ``cu_seqlens_new`` they
    are packed, each sequence with its own count of new rows.

    Parameters
    ----------
    k_pages, v_pages : array
        The pools ``(P, Hkv, S, D)`` / ``(P, Hkv, S, Dv)``, as in ``attention_paged``; written in place, so
        arrays it can write: a writeable NumPy array or a GPU array.
    k_new : array_like
        ``(B, Hkv, Nnew, D)``, or packed ``(Tnew, Hkv, D)`` with ``cu_seqlens_new``; any strides, the pages'
        dtype.
    v_new : array_like
        ``(B, Hkv, Nnew, Dv)``, or packed ``(Tnew, Hkv, Dv)``; any strides, the pages' dtype.
    block_table : array_like of int32
        ``(B, max_pages)``, as in ``attention_paged``; array-likes of int32 values convert.
    seq_lens : array_like of int32
        ``(B,)``: each sequence's key count before the append; array-likes of int32 values convert.
    cu_seqlens_new : array_like of int32, optional
        ``(B + 1,)`` prefix sums of the sequences' new rows (0 allowed): sequence b's are rows
        ``cu_seqlens_new[b] ..< cu_seqlens_new[b + 1]`` of the packed k_new / v_new, written at positions
        ``seq_lens[b]`` onwards; ``cu[0] == 0``, non-decreasing, ``cu[B] == Tnew``. On the pages' side.

    Returns
    -------
    None
        The pages are written in place.

    Raises
    ------
    TypeError
        Pages that are not a writeable NumPy or GPU array (a list, a read-only array: nothing could be written
        back); non-float or mixed dtypes; a block_table, seq_lens or cu_seqlens_new that is not int32; host and
        GPU inputs mixed.
    ValueError
        Arrays that are not 4-D (k_new, v_new 3-D with cu_seqlens_new), pages whose shapes or strides do not
        match, new keys or values of another shape than ``(B, Hkv, Nnew, head dim)`` (``(Tnew, Hkv, head
        dim)``); a table, lengths or prefix sums of another batch; new rows without a sequence (B = 0, Tnew >
        0); array-likes with values outside int32; on the NumPy path (and on the GPU under
        ``CUFUSE_DEBUG=1``) a length outside 0 to ``max_pages * S`` minus the sequence's new rows, a page
        index outside ``[0, P)`` among the pages a sequence uses, or prefix sums that do not start at 0,
        decrease or do not end at Tnew.

    Notes
    -----
    On the GPU nothing is read back to the host (no synchronisation, cu_seqlens_new included) except under
    ``CUFUSE_DEBUG=1``.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> keys, values = np.zeros((2, 1, 2, 2)), np.zeros((2, 1, 2, 2))  # 2 pages of 2 keys, 1 head, dim 2
    >>> new_values = np.arange(6.0).reshape(1, 1, 3, 2)  # one sequence, 3 new keys
    >>> cufuse.kv_append(keys, values, np.ones((1, 1, 3, 2)), new_values, [[1, 0]], [0])
    >>> values[1, 0]  # the sequence's first page
    array([[0., 1.],
           [2., 3.]])
    >>> values[0, 0]  # its second: one key written
    array([[4., 5.],
           [0., 0.]])
    """
    return run(_KV_APPEND, None, (), None, k_pages, v_pages, k_new, v_new, block_table, seq_lens, cu_seqlens_new)


def _check_append(k_pages, v_pages, k_new, v_new, block_table, seq_lens, cu_seqlens_new):
    for name, pages in (("k_pages", k_pages), ("v_pages", v_pages)):
        require_writable(_APPEND, name, pages)
    block_table = as_index_array(_APPEND, "block_table", block_table)
    seq_lens = as_index_array(_APPEND, "seq_lens", seq_lens)
    cu_seqlens_new = as_index_array(_APPEND, "cu_seqlens_new", cu_seqlens_new)
    xp, arrays = as_arrays(_APPEND, k_pages=k_pages, v_pages=v_pages, k_new=k_new, v_new=v_new,
                           block_table=block_table, seq_lens=seq_lens, cu_seqlens_new=cu_seqlens_new,
                           optional=("cu_seqlens_new",))
    k_pages, v_pages, k_new, v_new = (arrays[n] for n in ("k_pages", "v_pages", "k_new", "v_new"))
    block_table, seq_lens, cu_seqlens_new = arrays["block_table"], arrays["seq_lens"], arrays["cu_seqlens_new"]
    packed = cu_seqlens_new is not None
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages), ("k_new", k_new), ("v_new", v_new)):
        require_float(_APPEND, name, arr)
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages)):
        require_ndim(_APPEND, name, arr, exactly=4)
    for name, arr in (("k_new", k_new), ("v_new", v_new)):
        require_rows(_APPEND, name, arr, packed, "(Tnew, Hkv, D)", "(B, Hkv, Nnew, D)", "cu_seqlens_new")
    require_same_dtype(_APPEND, "k_pages", k_pages, v_pages=v_pages, k_new=k_new, v_new=v_new)
    heads_kv = check_pages(_APPEND, k_pages, v_pages, k_new.shape[-1], "k_new")
    if packed:
        n_new = k_new.shape[0]
        batch = check_seq_lens(_APPEND, seq_lens)
        lead, what = (n_new, heads_kv), "(Tnew, the pages' Hkv, their head dim)"
    else:
        batch, _, n_new, _ = k_new.shape
        lead, what = (batch, heads_kv, n_new), "(B, the pages' Hkv, Nnew, their head dim)"
    for name, arr, dim in (("k_new", k_new, k_pages.shape[-1]), ("v_new", v_new, v_pages.shape[-1])):
        if arr.shape != lead + (dim,):
            raise ValueError(f"{_APPEND}: argument '{name}' expected shape {lead + (dim,)} {what}, got {arr.shape}")
    check_table(_APPEND, block_table, seq_lens, batch, k_pages.shape[2])
    if packed:
        check_cu(_APPEND, "cu_seqlens_new", cu_seqlens_new, batch, n_new, "k_new", "Tnew")
    if xp is np or debug_enabled():
        if packed:
            starts = host(cu_seqlens_new)
            check_prefix_sums(_APPEND, "cu_seqlens_new", starts, n_new, "Tnew")
            n_new = xp.asarray(np.diff(starts))
        check_indices(_APPEND, xp, block_table, seq_lens, k_pages.shape[0], k_pages.shape[2], n_new)
    return xp, arrays, None, ()


def _numpy_append(arrays, out, problem):
    reference.kv_append(*arrays.values())


def _bind_append(call):
    """kv_append's bound plan, on the pages' device; None where nothing is appended."""
    arrays = call.arrays
    k_pages, v_pages, k_new, v_new, block_table, _, cu_seqlens_new = arrays.values()
    packed = cu_seqlens_new is not None
    if k_new.size == 0 and v_new.size == 0 or (k_new.shape[0] if packed else k_new.shape[0] * k_new.shape[2]) == 0:
        return None
    names = ("k_pages", "v_pages", "k_new", "v_new", "block_table", "seq_lens")
    names += ("cu_seqlens_new",) if packed else ()
    strides = element_strides(arrays, names)
    if packed:  # (token, head, col) as (batch 0, head, row, col)
        for name in ("k_new", "v_new"):
            token, head, col = strides[name]
            strides[name] = (0, head, token, col)
    flat = (*strides["k_pages"][:3], *strides["v_pages"][:3], *strides["k_new"], *strides["v_new"],
            *strides["block_table"], *strides["seq_lens"])
    cu_stride = strides["cu_seqlens_new"][0] if packed else -1
    # the whole table shape: max_pages (max_keys, the kernel's bound on positions) can change while its strides do not
    key = (_APPEND, k_new.shape, v_pages.shape, flat, k_pages.dtype, k_pages.device.id, block_table.shape, cu_stride)
    return bound_plan(key, k_pages.device.id, lambda dev: plan_kv_append(
        k_new.shape, v_pages.shape[-1], k_pages.shape[2], block_table.shape[1], k_pages.dtype, flat,
        block_table.shape[0], cu_stride))


def _bind_paged(call):
    """The forward launch, plus paged_attention_merge when a sequence may span several work
    units, on q's device; None for an empty output. Workspace: with a possible split, float32
    partials of at most (target units / KV heads + B) units x the batch's rows x (Dv + 1), and
    2 B ints of unit ranges; freed when the call returns. Inputs are never copied."""
    inputs = call.arrays
    q, k_pages, v_pages = inputs["q"], inputs["k_pages"], inputs["v_pages"]
    causal, scale, window, softcap, return_lse, config, out_shape, sink_heads = call.problem
    call.outputs = (("out", out_shape, q.dtype, None),)
    if return_lse:
        call.outputs += (("lse", out_shape[:-1], accumulator_dtype(q.dtype), None),)
    if math.prod(out_shape) == 0:
        return None
    packed = inputs["cu_seqlens_q"] is not None
    names = ("q", "k_pages", "v_pages", "block_table", "seq_lens") + (("cu_seqlens_q",) if packed else ())
    strides = element_strides(inputs, names)
    cu_stride = strides["cu_seqlens_q"][0] if packed else -1
    sides = (-1, -1) if window is None else tuple(-1 if s is None else min(s, UNLIMITED) for s in window)
    aligned = (k_pages.data.ptr % 16 == 0, v_pages.data.ptr % 16 == 0)
    shapes = tuple(inputs[n].shape for n in names)
    key = (_FN, shapes, tuple(strides.values()), q.dtype, causal, scale, sides, softcap, return_lse, aligned,
           q.device.id, config, sink_heads)
    return bound_plan(key, q.data.device_id, lambda dev: plan_attention_paged(
        q.shape, strides["q"], k_pages.shape, strides["k_pages"], v_pages.shape, strides["v_pages"],
        inputs["block_table"].shape, strides["block_table"], strides["seq_lens"][0], q.dtype, causal, scale, sides,
        softcap or 0.0, return_lse, aligned, dev, config, sink_heads, cu_stride))


_ATTENTION_PAGED = Op(_check_paged, _numpy_paged, _bind_paged)
_KV_APPEND = Op(_check_append, _numpy_append, _bind_append)
