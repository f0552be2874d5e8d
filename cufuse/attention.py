"""attention: ``softmax(q @ k^T * scale) @ v`` without materialising the score matrix.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle of ``cufuse.reference``; CuPy inputs run ``kernels/attention.cu``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import numpy as np

from . import reference
from ._configs import attention as configs
from ._dtypes import ctype
from ._numpy_path import deliver
from ._validate import array_namespace, check_out, require_float, require_ndim, require_same_dtype

_FN = "attention"
MAX_HEAD_DIM = 256


def attention(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, config=None):
    """FlashAttention forward for q ``(..., Nq, D)``, k ``(..., Nk, D)``, v ``(..., Nk, Dv)``.

    Leading dims broadcast (a size-1 head axis on k/v is MQA/GQA). ``scale`` defaults to
    ``1/sqrt(D)``. ``causal`` is bottom-right aligned: query i sees key j iff
    ``j <= i + Nk - Nq``; a row that sees no key is 0 with lse ``-inf``. With
    ``return_lse`` the result is ``(out, lse)``, lse float32 ``(..., Nq)``.
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
    return _attention_gpu(q, k, v, bool(causal), scale, bool(return_lse), out, batch, config)


MAX_BATCH_DIMS = 4  # collapsed leading dims the kernels decompose (BatchLayout)


def batch_layout(batch, operands):
    """Collapse the broadcast batch dims for the kernels (pure).

    ``operands`` maps a name to ``(shape, element strides)`` of q, k or v. Each operand's
    batch strides are right-aligned to ``batch`` with 0 on broadcast dims; size-1 dims are
    dropped and adjacent dims merged where every operand allows it. Returns
    ``(sizes, {name: strides})`` padded in front to MAX_BATCH_DIMS dims.
    """
    ndim = len(batch)
    dims = []  # (size, {name: stride}) outermost first
    for axis, size in enumerate(batch):
        if size == 1:
            continue
        strides = {}
        for name, (shape, elem_strides) in operands.items():
            lead = len(shape) - 2
            pos = axis - (ndim - lead)
            strides[name] = elem_strides[pos] if pos >= 0 and shape[pos] == size else 0
        if dims and all(dims[-1][1][n] == strides[n] * size for n in operands):
            dims[-1] = (dims[-1][0] * size, strides)
        else:
            dims.append((size, strides))
    if len(dims) > MAX_BATCH_DIMS:
        raise ValueError(
            f"{_FN}: arguments 'q', 'k', 'v' expected leading dims that collapse to at most "
            f"{MAX_BATCH_DIMS} strided dims, got batch shape {tuple(batch)} with strides "
            + ", ".join(f"{n} {s[1][:len(s[0]) - 2]}" for n, s in operands.items())
        )
    dims = [(1, {n: 0 for n in operands})] * (MAX_BATCH_DIMS - len(dims)) + dims
    return tuple(size for size, _ in dims), {n: tuple(st[n] for _, st in dims) for n in operands}


def _vec16_ok(elem_strides, cols, batch_strides, base_aligned):
    """16-byte loads apply: unit column stride, 8-element rows and batch strides, aligned base."""
    return (
        elem_strides[-1] == 1
        and cols % 8 == 0
        and elem_strides[-2] % 8 == 0
        and all(st % 8 == 0 for st in batch_strides)
        and base_aligned
    )


@dataclasses.dataclass(frozen=True)
class _Launch:
    """Everything of a GPU call that depends only on shapes, strides, dtype, flags and the
    device (cached by ``_launch_plan``): kernels, grids and the scalar kernel arguments."""

    out_shape: tuple
    lse_shape: tuple
    kernel_args: tuple  # (source, name, *template_args) of the forward kernel
    grid: tuple
    block: tuple
    smem: int
    takes_partials: bool  # the forward kernel's pointers include partial O and lse (mma and decode kernels)
    scalars: tuple  # the forward kernel's arguments after its pointers
    splits: int
    workspace: tuple  # shapes of the partial O and lse (splits > 1)
    merge_kernel_args: tuple
    merge_grid: tuple
    merge_scalars: tuple


def _attention_gpu(q, k, v, causal, scale, return_lse, out, batch, config):
    """Launch ``kernels/attention.cu``: one forward launch, plus the merge when keys are split.

    Workspace: with ``splits > 1`` the partial results take ``splits * B * Nq * (Dv + 1)``
    float32 (B = the flattened batch), freed when the call returns; nothing else is
    allocated besides ``out`` and lse. Inputs are never copied: broadcast dims get stride 0,
    strided views pass their strides (a non-unit last-axis stride takes the scalar-load path).
    """
    import cupy

    from ._loader import get_kernel

    with q.device:
        aligned = tuple(a.data.ptr % 16 == 0 for a in (q, k, v))
        plan = _launch_plan(q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, q.dtype, batch, causal,
                            scale, return_lse, aligned, q.device.id, config)
        if out is None:
            out = cupy.empty(plan.out_shape, dtype=q.dtype)
        lse = cupy.empty(plan.lse_shape, dtype=np.float32) if return_lse else None
        if out.size == 0:
            return (out, lse) if return_lse else out
        lse_arg = lse if return_lse else out  # not written without FLAG_WRITE_LSE
        if plan.splits > 1:  # the documented workspace: splits * B * Nq * (Dv + 1) float32
            partial_o = cupy.empty(plan.workspace[0], dtype=np.float32)
            partial_lse = cupy.empty(plan.workspace[1], dtype=np.float32)
            pointers = (q, k, v, out, lse_arg, partial_o, partial_lse)
        elif plan.takes_partials:
            pointers = (q, k, v, out, lse_arg, lse_arg, lse_arg)  # partials not touched with one split
        else:
            pointers = (q, k, v, out, lse_arg)
        kernel = get_kernel(*plan.kernel_args, dynamic_smem=plan.smem)
        kernel(plan.grid, plan.block, pointers + plan.scalars, shared_mem=plan.smem)
        if plan.splits > 1:
            merge = get_kernel(*plan.merge_kernel_args)
            merge(plan.merge_grid, (configs.MERGE_THREADS,),
                  (partial_o, partial_lse, out, lse_arg) + plan.merge_scalars)
    return (out, lse) if return_lse else out


@functools.lru_cache(maxsize=1024)
def _launch_plan(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, dtype, batch, causal, scale, return_lse,
                 aligned, device_id, config):
    """The ``_Launch`` of one call signature (pure apart from the device query)."""
    from ._configs import device_info

    itemsize = dtype.itemsize
    elem = {n: tuple(st // itemsize for st in strides) for n, strides in
            (("q", q_strides), ("k", k_strides), ("v", v_strides))}
    shapes = {"q": q_shape, "k": k_shape, "v": v_shape}
    n_q, head_dim = q_shape[-2:]
    n_k, head_dim_v = v_shape[-2:]
    batch_count = math.prod(batch)
    sizes, strides = batch_layout(batch, {n: (shapes[n], elem[n]) for n in shapes})
    vec_ok = {n: _vec16_ok(elem[n], head_dim_v if n == "v" else head_dim, strides[n], aligned[i])
              for i, n in enumerate(shapes)}
    dev = device_info(device_id)
    wgmma_operands = all(vec_ok.values()) and scale > 0
    if config is None:
        config = configs.select_config(n_q, n_k, head_dim, head_dim_v, batch_count, dtype, dev,
                                       vec_ok["k"] and vec_ok["v"], causal, wgmma_operands)
    # Kernel argument tail shared by the forward kernels: per-operand (row, col) strides,
    # then the BatchLayout (sizes of dims 1..3, then q, k, v batch strides).
    strides_args = tuple(np.int64(st) for n in shapes for st in elem[n][-2:])
    layout_args = tuple(np.int64(st) for st in sizes[1:]) + tuple(np.int64(st) for n in shapes for st in strides[n])
    flags = (configs.FLAG_CAUSAL if causal else 0) | (configs.FLAG_WRITE_LSE if return_lse else 0)
    dtype_name = ctype(dtype)
    shape_args = (np.int32(n_q), np.int32(n_k), np.int32(head_dim), np.int32(head_dim_v))
    common = dict(out_shape=batch + (n_q, head_dim_v), lse_shape=batch + (n_q,))
    no_merge = dict(splits=1, workspace=(), merge_kernel_args=(), merge_grid=(), merge_scalars=())

    tile = config.tile
    if tile is None:
        q_tiles = -(-n_q // configs.SIMT_WARPS)
        return _Launch(**common, **no_merge, kernel_args=_spec_args(configs.simt_spec(dtype_name)),
                       grid=(q_tiles * batch_count,), block=(32 * configs.SIMT_WARPS,), smem=0, takes_partials=False,
                       scalars=(*shape_args, np.int32(q_tiles), dtype.type(scale), np.int32(flags), *strides_args,
                                *layout_args))
    if tile.head_dim < max(head_dim, head_dim_v):
        raise ValueError(
            f"{_FN}: argument 'config' expected a tile head dim >= {max(head_dim, head_dim_v)}, got {tile.head_dim}"
        )
    for n, bit in (("q", configs.FLAG_VEC_Q), ("k", configs.FLAG_VEC_K), ("v", configs.FLAG_VEC_V)):
        if vec_ok[n]:
            flags |= bit
    scale_log2 = np.float32(scale * math.log2(math.e))
    if isinstance(tile, configs.WgmmaTile):
        _check_wgmma_config(config, dtype, dev, wgmma_operands, q_strides, k_strides, v_strides, scale)
        q_tiles = -(-n_q // tile.block_m)
        items = q_tiles * batch_count
        row_strides = tuple(np.int64(elem[n][-2]) for n in shapes)
        return _Launch(**common, **no_merge, kernel_args=_spec_args(tile.spec(dtype_name)),
                       grid=(configs.wgmma_grid(tile, items, dev),), block=(tile.threads,), smem=tile.smem_bytes,
                       takes_partials=False, scalars=(*shape_args, np.int32(q_tiles), np.int32(items), scale_log2,
                                                      np.int32(flags), *row_strides, *layout_args))
    splits = config.splits
    keys_per_split = config.keys_per_split if splits > 1 else n_k
    split_args = (np.int32(splits), np.int32(keys_per_split), scale_log2, np.int32(flags), *strides_args,
                  *layout_args)
    if isinstance(tile, configs.DecodeTile):
        if not vec_ok["k"] or not vec_ok["v"]:
            raise ValueError(
                f"{_FN}: argument 'config' expected k and v with 16-byte aligned rows for a decode tile, "
                f"got k strides {k_strides}, v strides {v_strides}"
            )
        launch = dict(kernel_args=_spec_args(tile.spec(dtype_name)), grid=(n_q * splits * batch_count,),
                      block=(tile.threads,), smem=0, takes_partials=True, scalars=(*shape_args, *split_args))
    else:
        q_tiles = -(-n_q // tile.block_m)
        launch = dict(kernel_args=_spec_args(tile.spec(dtype_name)), grid=(q_tiles * splits * batch_count,),
                      block=(tile.threads,), smem=tile.smem_bytes, takes_partials=True,
                      scalars=(*shape_args, np.int32(q_tiles), *split_args))
    if splits == 1:
        return _Launch(**common, **no_merge, **launch)
    rows = batch_count * n_q
    return _Launch(**common, **launch, splits=splits,
                   workspace=((splits, batch_count, n_q, head_dim_v), (splits, batch_count, n_q)),
                   merge_kernel_args=_spec_args(configs.merge_spec(dtype_name)), merge_grid=(rows,),
                   merge_scalars=(np.int64(rows), np.int32(head_dim_v), np.int32(splits), np.int32(return_lse)))


def _check_wgmma_config(config, dtype, dev, wgmma_operands, q_strides, k_strides, v_strides, scale):
    """An explicit ``WgmmaTile`` config must meet ``attention_fwd_wgmma``'s preconditions."""
    if not dev.has_wgmma:
        raise ValueError(f"{_FN}: argument 'config' asks for the wgmma kernel, which needs compute capability 9.0, "
                         f"got {dev.cc // 10}.{dev.cc % 10}")
    if ctype(dtype) not in configs.MMA_CTYPES:
        raise ValueError(f"{_FN}: argument 'config' asks for the wgmma kernel, which takes float16 or bfloat16, "
                         f"got {dtype}")
    if config.splits != 1:
        raise ValueError(f"{_FN}: argument 'config' expected one key split for a wgmma tile, got {config.splits}")
    if not wgmma_operands:
        raise ValueError(
            f"{_FN}: argument 'config' expected q, k and v with unit last-axis stride and 16-byte aligned rows and "
            f"a positive scale for a wgmma tile, got strides q {q_strides}, k {k_strides}, v {v_strides}, "
            f"scale {scale}"
        )


def _spec_args(spec):
    return (spec.source, spec.name, *spec.template_args)
