"""PagedAttention: ``attention_paged`` over K/V pages of a shared pool, and ``kv_append``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
path of ``numpy_path`` (pages gathered, then the vectorised dense attention) and check every page
index a sequence uses; CuPy inputs run the kernels of ``kernels/paged_attention/`` and never
read block_table or seq_lens on the host (no synchronisation), except under CUFUSE_DEBUG=1,
which checks the page indices first.
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
from ..._core.validate import (as_arrays, as_index_array, check_config, check_out, require_bool, require_finite_real,
                               require_float, require_ndim, require_same_dtype, require_sinks, require_softcap,
                               require_window, require_writable)
from . import numpy_path
from .plan import plan_attention_paged, plan_kv_append
from .problem import UNLIMITED
from .select import VARIANTS

_FN = "attention_paged"
_APPEND = "kv_append"
MAX_HEAD_DIM = 256


def attention_paged(q, k_pages, v_pages, block_table, seq_lens, *, causal=True, scale=None, window=None,
                    softcap=None, sinks=None, return_lse=False, out=None, config=None):
    """Attention of each sequence's newest queries over its keys and values in pages of a shared pool.

    Parameters
    ----------
    q : array_like
        Queries ``(B, Hq, Nq, D)``, at least one query. NumPy arrays and array-likes run the NumPy path and
        return NumPy; GPU arrays (CuPy, PyTorch, JAX, ...) run the GPU kernels and return CuPy.
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
    return_lse : bool, optional
        Also return each row's log-sum-exp.
    out : array, optional
        Written in place and returned: ``(B, Hq, Nq, Dv)``, q's dtype, C-contiguous, on q's side.
    config : kernel variant, optional
        Forces a kernel variant (``PagedMmaTile``, ``PagedSimtRows``) (GPU inputs only; checked and ignored on
        NumPy inputs).

    Returns
    -------
    out : ndarray
        ``(B, Hq, Nq, Dv)`` in q's dtype; ``out`` when it is given.
    lse : ndarray
        With ``return_lse`` only: ``(B, Hq, Nq)`` in the accumulator dtype, float32 (float64 for float64).

    Raises
    ------
    TypeError
        Non-float or mixed dtypes; a block_table or seq_lens that is not int32; flags without a truth value;
        a ``window`` or ``scale`` of another type; a foreign ``config``; an unusable ``out``; host and GPU
        inputs mixed; ``sinks`` not float32.
    ValueError
        Arrays that are not 4-D (q, pages), 2-D (block_table) or 1-D (seq_lens); pages whose head dim, head
        count or page shape do not match, or whose last stride is not 1; Hkv not dividing Hq; no query; a
        table or lengths of another batch; array-likes with values outside int32; on the NumPy path (and on the
        GPU under ``CUFUSE_DEBUG=1``) a length outside 0 to ``max_pages * S`` or a page index outside
        ``[0, P)`` among the pages a sequence uses; invalid ``scale``, ``window`` or ``softcap`` values; an
        ``out`` of another shape, layout or device, or overlapping an input; ``sinks`` not 1-D, not
        contiguous or of a length not dividing Hq.

    Notes
    -----
    A row that sees no key is 0 with lse -inf. The NumPy path gathers the pages and runs the float64 dense
    oracle, after checking every page index a sequence uses. On the GPU the kernels never read block_table or
    seq_lens on the host (no synchronisation), except under ``CUFUSE_DEBUG=1``, which checks the page indices
    first. Design and measurements: docs/paged_attention.md. With ``sinks`` a row that sees no key has lse
    the sink's logit; the kernels fold a sink into its sequence's first work unit only, so the lse merge of
    the units is exact.

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
                        config, sinks)
    given = (q, k_pages, v_pages, block_table, seq_lens) + (() if sinks is None else (sinks,))
    return run(_ATTENTION_PAGED, key, given, out, q, k_pages, v_pages, block_table, seq_lens, causal, scale, window,
               softcap, sinks, return_lse, out, config)


def _check_paged(q, k_pages, v_pages, block_table, seq_lens, causal, scale, window, softcap, sinks, return_lse, out,
                 config):
    block_table, seq_lens = as_index_array(_FN, "block_table", block_table), as_index_array(_FN, "seq_lens", seq_lens)
    xp, arrays = as_arrays(_FN, q=q, k_pages=k_pages, v_pages=v_pages, block_table=block_table, seq_lens=seq_lens,
                           sinks=sinks, optional=("sinks",))
    sinks = arrays["sinks"]
    q, k_pages, v_pages = arrays["q"], arrays["k_pages"], arrays["v_pages"]
    block_table, seq_lens = arrays["block_table"], arrays["seq_lens"]
    for name, arr in (("q", q), ("k_pages", k_pages), ("v_pages", v_pages)):
        require_float(_FN, name, arr)
        require_ndim(_FN, name, arr, exactly=4)
    require_same_dtype(_FN, "q", q, k_pages=k_pages, v_pages=v_pages)
    batch, heads_q, n_q, head_dim = q.shape
    heads_kv = _check_pages(_FN, k_pages, v_pages, head_dim, "q")
    if n_q < 1:
        raise ValueError(f"{_FN}: argument 'q' expected at least one query (axis 2), got shape {q.shape}")
    if heads_q % heads_kv:
        raise ValueError(f"{_FN}: argument 'k_pages' expected a head count on axis 1 that divides q's {heads_q}, "
                         f"got shape {k_pages.shape}")
    _check_table(_FN, block_table, seq_lens, batch, k_pages.shape[2])
    sink_heads = 0 if sinks is None else require_sinks(_FN, sinks, (heads_q,), (heads_q,))
    causal = require_bool(_FN, "causal", causal)
    return_lse = require_bool(_FN, "return_lse", return_lse)
    check_config(_FN, config, VARIANTS)
    scale = 1.0 / float(np.sqrt(head_dim)) if scale is None else require_finite_real(_FN, "scale", scale)
    window = require_window(_FN, window)
    softcap = require_softcap(_FN, softcap)
    out_shape = (batch, heads_q, n_q, v_pages.shape[-1])
    inputs = {"q": q, "k_pages": k_pages, "v_pages": v_pages, "block_table": block_table, "seq_lens": seq_lens}
    out = check_out(_FN, out, shape=out_shape, dtype=q.dtype, xp=xp, inputs=inputs)
    if xp is np or debug_enabled():
        _check_indices(_FN, xp, block_table, seq_lens, k_pages.shape[0], k_pages.shape[2])
    return xp, arrays, out, (causal, scale, window, softcap, return_lse, config, out_shape, sink_heads)


def _numpy_paged(arrays, out, problem):
    q, k_pages, v_pages, block_table, seq_lens, sinks = arrays.values()
    causal, scale, window, softcap, return_lse, _, _, _ = problem
    result, lse = numpy_path.attention_paged(q, k_pages, v_pages, block_table, seq_lens, causal=causal, scale=scale,
                                            window=window, softcap=softcap, sinks=sinks, return_lse=True)
    result, lse = deliver(result, out, q.dtype), lse.astype(accumulator_dtype(q.dtype))
    return (result, lse) if return_lse else result


def _prepared_key(q, k_pages, v_pages, block_table, seq_lens, out, causal, scale, window, softcap, return_lse,
                  config, sinks=None):
    """The prepared-call key of a GPU call (every argument with its type; window's entries'
    types too), or None: not all CuPy arrays, CUFUSE_DEBUG set, or an unhashable argument."""
    arrays = (q, k_pages, v_pages, block_table, seq_lens) + (() if sinks is None else (sinks,)) + (
        () if out is None else (out,))
    signature = gpu_signature(*arrays)
    if signature is None or debug_enabled():
        return None
    window_types = tuple(map(type, window)) if isinstance(window, tuple) else None
    key = (_FN, signature, causal, type(causal), scale, type(scale), window, type(window), window_types, softcap,
           type(softcap), return_lse, type(return_lse), config, sinks is None)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def kv_append(k_pages, v_pages, k_new, v_new, block_table, seq_lens):
    """Write new keys and values into each sequence's pages, in place, after its ``seq_lens`` keys.

    k_new and v_new go to positions ``seq_lens[b] ..< seq_lens[b] + Nnew`` of each sequence, in one launch on
    the GPU; the caller then passes ``seq_lens + Nnew`` to ``attention_paged``.

    Parameters
    ----------
    k_pages, v_pages : array
        The pools ``(P, Hkv, S, D)`` / ``(P, Hkv, S, Dv)``, as in ``attention_paged``; written in place, so
        arrays it can write: a writeable NumPy array or a GPU array.
    k_new : array_like
        ``(B, Hkv, Nnew, D)``, any strides, the pages' dtype.
    v_new : array_like
        ``(B, Hkv, Nnew, Dv)``, any strides, the pages' dtype.
    block_table : array_like of int32
        ``(B, max_pages)``, as in ``attention_paged``; array-likes of int32 values convert.
    seq_lens : array_like of int32
        ``(B,)``: each sequence's key count before the append; array-likes of int32 values convert.

    Returns
    -------
    None
        The pages are written in place.

    Raises
    ------
    TypeError
        Pages that are not a writeable NumPy or GPU array (a list, a read-only array: nothing could be written
        back); non-float or mixed dtypes; a block_table or seq_lens that is not int32; host and GPU inputs
        mixed.
    ValueError
        Arrays that are not 4-D, pages whose shapes or strides do not match, new keys or values of another
        shape than ``(B, Hkv, Nnew, head dim)``; a table or lengths of another batch; array-likes with values
        outside int32; on the NumPy path (and on the GPU under ``CUFUSE_DEBUG=1``) a length outside 0 to
        ``max_pages * S - Nnew`` or a page index outside ``[0, P)`` among the pages a sequence uses.

    Notes
    -----
    On the GPU nothing is read back to the host (no synchronisation) except under ``CUFUSE_DEBUG=1``.

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
    return run(_KV_APPEND, None, (), None, k_pages, v_pages, k_new, v_new, block_table, seq_lens)


def _check_append(k_pages, v_pages, k_new, v_new, block_table, seq_lens):
    for name, pages in (("k_pages", k_pages), ("v_pages", v_pages)):
        require_writable(_APPEND, name, pages)
    block_table = as_index_array(_APPEND, "block_table", block_table)
    seq_lens = as_index_array(_APPEND, "seq_lens", seq_lens)
    xp, arrays = as_arrays(_APPEND, k_pages=k_pages, v_pages=v_pages, k_new=k_new, v_new=v_new,
                           block_table=block_table, seq_lens=seq_lens)
    k_pages, v_pages, k_new, v_new = (arrays[n] for n in ("k_pages", "v_pages", "k_new", "v_new"))
    block_table, seq_lens = arrays["block_table"], arrays["seq_lens"]
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages), ("k_new", k_new), ("v_new", v_new)):
        require_float(_APPEND, name, arr)
        require_ndim(_APPEND, name, arr, exactly=4)
    require_same_dtype(_APPEND, "k_pages", k_pages, v_pages=v_pages, k_new=k_new, v_new=v_new)
    heads_kv = _check_pages(_APPEND, k_pages, v_pages, k_new.shape[-1], "k_new")
    batch, _, n_new, _ = k_new.shape
    for name, arr, dim in (("k_new", k_new, k_pages.shape[-1]), ("v_new", v_new, v_pages.shape[-1])):
        if arr.shape != (batch, heads_kv, n_new, dim):
            raise ValueError(f"{_APPEND}: argument '{name}' expected shape {(batch, heads_kv, n_new, dim)} "
                             f"(B, the pages' Hkv, Nnew, their head dim), got {arr.shape}")
    _check_table(_APPEND, block_table, seq_lens, batch, k_pages.shape[2])
    if xp is np or debug_enabled():
        _check_indices(_APPEND, xp, block_table, seq_lens, k_pages.shape[0], k_pages.shape[2], n_new)
    return xp, arrays, None, ()


def _numpy_append(arrays, out, problem):
    reference.kv_append(*arrays.values())


def _bind_append(call):
    """kv_append's bound plan, on the pages' device; None where nothing is appended."""
    arrays = call.arrays
    k_pages, v_pages, k_new, v_new, block_table, _ = arrays.values()
    batch, _, n_new, _ = k_new.shape
    if k_new.size == 0 and v_new.size == 0 or batch * n_new == 0:
        return None
    names = ("k_pages", "v_pages", "k_new", "v_new", "block_table", "seq_lens")
    strides = _element_strides(arrays, names)
    flat = (*strides["k_pages"][:3], *strides["v_pages"][:3], *strides["k_new"], *strides["v_new"],
            *strides["block_table"], *strides["seq_lens"])
    key = (_APPEND, k_new.shape, v_pages.shape, flat, k_pages.dtype, k_pages.device.id)
    return bound_plan(key, k_pages.device.id, lambda dev: plan_kv_append(
        k_new.shape, v_pages.shape[-1], k_pages.shape[2], block_table.shape[1], k_pages.dtype, flat))


def _check_pages(fn, k_pages, v_pages, head_dim, head_name) -> int:
    """k_pages ``(P, Hkv, S, head_dim)`` and v_pages ``(P, Hkv, S, Dv)`` with unit last strides;
    returns Hkv."""
    n_pages, heads_kv, page_size, dim = k_pages.shape
    if dim != head_dim:
        raise ValueError(f"{fn}: argument 'k_pages' expected last axis {head_dim} ({head_name}'s head dim), "
                         f"got shape {k_pages.shape}")
    if v_pages.shape[:3] != k_pages.shape[:3]:
        raise ValueError(f"{fn}: argument 'v_pages' expected (P, Hkv, S) = {k_pages.shape[:3]} (k_pages'), "
                         f"got shape {v_pages.shape}")
    if heads_kv < 1 or page_size < 1:
        raise ValueError(f"{fn}: argument 'k_pages' expected at least one head (axis 1) and a page size (axis 2) "
                         f"of at least 1, got shape {k_pages.shape}")
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages)):
        if not 1 <= arr.shape[-1] <= MAX_HEAD_DIM:
            raise ValueError(f"{fn}: argument '{name}' expected a head dim from 1 to {MAX_HEAD_DIM}, got {arr.shape[-1]}")
        if arr.shape[-1] > 1 and arr.strides[-1] != arr.itemsize:
            raise ValueError(f"{fn}: argument '{name}' expected a unit stride on the last axis, got strides "
                             f"{arr.strides} (bytes)")
    return heads_kv


def _check_table(fn, block_table, seq_lens, batch, page_size) -> None:
    for name, arr, ndim in (("block_table", block_table, 2), ("seq_lens", seq_lens, 1)):
        if arr.dtype != np.int32:
            raise TypeError(f"{fn}: argument '{name}' expected dtype int32, got {arr.dtype}")
        require_ndim(fn, name, arr, exactly=ndim)
        if arr.shape[0] != batch:
            raise ValueError(f"{fn}: argument '{name}' expected {batch} rows (the batch), got shape {arr.shape}")
    if block_table.shape[1] * page_size > UNLIMITED:
        raise ValueError(f"{fn}: argument 'block_table' expected max_pages * S <= {UNLIMITED} keys, got "
                         f"{block_table.shape[1]} pages of {page_size}")


def _check_indices(fn, xp, block_table, seq_lens, n_pages, page_size, n_new=0) -> None:
    """Every page a sequence uses (its first ceil((len + n_new) / S) table entries) in [0, P),
    and 0 <= len, len + n_new <= max_pages * S. Synchronises on the GPU (CUFUSE_DEBUG=1 only)."""
    max_keys = block_table.shape[1] * page_size
    lengths = seq_lens.astype(np.int64)
    if lengths.size and bool(xp.any((lengths < 0) | (lengths + n_new > max_keys))):
        bad = int(xp.argmax((lengths < 0) | (lengths + n_new > max_keys)))
        raise ValueError(f"{fn}: argument 'seq_lens' expected lengths from 0 to {max_keys - n_new} (max_pages * S"
                         f"{' - Nnew' if n_new else ''}), got {int(lengths[bad])} at index {bad}")
    pages_used = -(-(lengths + n_new) // page_size)
    used = xp.arange(block_table.shape[1])[None, :] < pages_used[:, None]
    bad = used & ((block_table < 0) | (block_table >= n_pages))
    if bad.size and bool(xp.any(bad)):
        b, slot = divmod(int(xp.argmax(bad.ravel())), block_table.shape[1])
        raise ValueError(f"{fn}: argument 'block_table' expected page indices in [0, {n_pages}) for the pages a "
                         f"sequence uses, got {int(block_table[b, slot])} at [{b}, {slot}]")


def _element_strides(arrays, names) -> dict:
    return {n: tuple(st // arrays[n].itemsize for st in arrays[n].strides) for n in names}


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
    names = ("q", "k_pages", "v_pages", "block_table", "seq_lens")
    strides = _element_strides(inputs, names)
    sides = (-1, -1) if window is None else tuple(-1 if s is None else min(s, UNLIMITED) for s in window)
    aligned = (k_pages.data.ptr % 16 == 0, v_pages.data.ptr % 16 == 0)
    shapes = tuple(inputs[n].shape for n in names)
    key = (_FN, shapes, tuple(strides.values()), q.dtype, causal, scale, sides, softcap, return_lse, aligned,
           q.device.id, config, sink_heads)
    return bound_plan(key, q.data.device_id, lambda dev: plan_attention_paged(
        q.shape, strides["q"], k_pages.shape, strides["k_pages"], v_pages.shape, strides["v_pages"],
        inputs["block_table"].shape, strides["block_table"], strides["seq_lens"][0], q.dtype, causal, scale, sides,
        softcap or 0.0, return_lse, aligned, dev, config, sink_heads))


_ATTENTION_PAGED = Op(_check_paged, _numpy_paged, _bind_paged)
_KV_APPEND = Op(_check_append, _numpy_append, _bind_append)
