"""fused_linear_relu: ``max(x @ weight + bias, 0)`` in one GEMM with the bias and the
ReLU in its epilogue.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle of ``cufuse.reference``; CuPy inputs run ``kernels/linear_relu.cu``.
"""
from __future__ import annotations

import math

import numpy as np

from . import _launch, _tma, reference
from ._configs import current_device_info
from ._configs import linear as linear_configs
from ._loader import allow_dynamic_smem, get_kernel
from ._numpy_path import deliver
from ._validate import array_namespace, check_out, require_float, require_ndim, require_same_dtype

_FN = "fused_linear_relu"


def fused_linear_relu(x, weight, bias=None, *, out=None, config=None):
    """``np.maximum(x @ weight + bias, 0)`` for x ``(..., K)`` (or ``(K,)``), weight
    ``(K, N)`` with any strides (a transposed ``(N, K)`` array works without a copy)
    and bias ``(N,)`` or None. All arrays share one float dtype; accumulation is float32
    (float64 for float64). ``config`` overrides the chosen kernel configuration (GPU only,
    a ``cufuse._configs.linear.LinearConfig``).

    On CuPy arrays nothing is copied. x's leading axes must collapse into one row stride
    (a C-ordered stack of rows, its last axis sliced or strided included); any other x
    layout raises ValueError rather than being copied silently. Operands whose rows are
    16-byte aligned (unit stride along K for x, K a multiple of 16 bytes, the weight
    contiguous along K or along N) run on tensor cores: float16/bfloat16 on mma.sync, or on
    compute capability 9.0 on the TMA-fed warpgroup-MMA kernels (either weight layout; M <=
    64 with the operands swapped and launched with programmatic dependent launch);
    float32 as 3xTF32 (float32-level accuracy; an infinite input gives NaN where NumPy may
    give +-inf); float64 on DMMA. float32 with M <= 16 and float64 with M <= 4 stream the
    weight through a SIMT kernel instead (true float32 / float64 FMAs). Everything else
    runs on a SIMT kernel with arbitrary strides (true float32 / float64 arithmetic). For
    16-bit operands with M <= 64, float32 ones with M <= 16 and a row-major weight, or
    fewer output tiles than the GPU has block slots, the kernel splits K over blocks and
    reduces in a float32 workspace (through atomics, M x N floats, for one row, K-major
    few-tile shapes and the float32 weight stream; otherwise through slots, one tile of
    floats per block, at most about 2 x 17 MB on an H200), plus one int per output tile,
    allocated once per device, stream and reduction kind, and reused.
    """
    plan = _plans.get(_signature(x, weight, bias, out, config)) if _on_gpu(x, weight, bias, out) else None
    if plan is not None and (out is None or not plan.may_overlap(x, weight, bias, out)):
        return plan.launch(x, weight, bias, out)
    xp = array_namespace(_FN, optional=("bias",), x=x, weight=weight, bias=bias)
    require_float(_FN, "x", x)
    require_same_dtype(_FN, "x", x, weight=weight, bias=bias)
    require_ndim(_FN, "x", x, at_least=1)
    require_ndim(_FN, "weight", weight, exactly=2)
    k_dim, n_dim = weight.shape
    if x.shape[-1] != k_dim:
        raise ValueError(
            f"{_FN}: argument 'weight' expected shape ({x.shape[-1]}, N) to match x's last axis "
            f"of {x.shape[-1]}, got {weight.shape}"
        )
    if bias is not None and bias.shape != (n_dim,):
        raise ValueError(f"{_FN}: argument 'bias' expected shape ({n_dim},), got {bias.shape}")
    out_shape = x.shape[:-1] + (n_dim,)
    out = check_out(_FN, out, shape=out_shape, dtype=x.dtype, xp=xp, inputs={"x": x, "weight": weight, "bias": bias})
    if xp is np:
        return deliver(reference.fused_linear_relu(x, weight, bias), out, x.dtype)
    return _linear_relu_gpu(x, weight, bias, out, out_shape, config)


def _rows_view(x):
    """(M, row stride, k stride) of x seen as an (M, K) matrix, in elements, without a copy.

    The leading axes must collapse into one row axis with a single stride (any C-ordered
    stack of rows, including a sliced last axis); otherwise ValueError, since the only way
    to run it would be a silent copy. The last axis may have any stride.
    """
    itemsize = x.dtype.itemsize
    lead = [(d, st // itemsize) for d, st in zip(x.shape[:-1], x.strides[:-1]) if d != 1]
    m = math.prod(d for d, _ in lead)
    for (_, outer), (inner_dim, inner) in zip(lead, lead[1:]):
        if outer != inner * inner_dim:
            raise ValueError(
                f"{_FN}: argument 'x' expected leading axes that collapse into one row stride "
                f"(e.g. a C-contiguous array or a slice of its last axis), got shape {x.shape} with "
                f"strides {x.strides}; pass cupy.ascontiguousarray(x)"
            )
    row_stride = lead[-1][1] if lead else x.shape[-1]
    return m, row_stride, x.strides[-1] // itemsize


# ----------------------------------------------------------------------------- hot path
# A call's validation and launch parameters depend only on its arrays' shapes, strides,
# dtypes, devices and pointer alignments (and ``config``), never on the values of the
# pointers. The first call of a signature validates in full and records a ``_Plan``; later
# calls of the same signature reuse it: one dict lookup, then the launch. Only the overlap
# of ``out`` with an input depends on the pointers: the plan keeps each input's byte
# extent, and a call whose ``out`` range meets one takes the full path (exact check).

_ndarray = None  # cupy.ndarray once cupy is imported


def _on_gpu(x, weight, bias, out) -> bool:
    global _ndarray
    if _ndarray is None:
        try:
            import cupy
        except ImportError:
            return False
        _ndarray = cupy.ndarray
    nd = _ndarray
    return (type(x) is nd and type(weight) is nd and (bias is None or type(bias) is nd)
            and (out is None or type(out) is nd))


def _signature(x, weight, bias, out, config):
    xd, wd = x.data, weight.data
    return (x.shape, x.strides, x.dtype, xd.ptr & 15, xd.device_id,
            weight.shape, weight.strides, weight.dtype, wd.ptr & 15, wd.device_id,
            None if bias is None else (bias.shape, bias.strides, bias.dtype, bias.data.device_id),
            None if out is None else (out.shape, out.strides, out.dtype, out.data.ptr & 15, out.data.device_id),
            config)


def _byte_extent(a) -> tuple[int, int]:
    """[lo, hi) bytes around a.data.ptr that the array can touch."""
    lo = sum((d - 1) * st for d, st in zip(a.shape, a.strides) if st < 0)
    hi = sum((d - 1) * st for d, st in zip(a.shape, a.strides) if st > 0) + a.itemsize
    return lo, hi


_MAX_PLANS = 4096
_plans: dict = {}


class _Plan:
    """Everything one signature's launches share: the kernel, grid, block, shared memory,
    the scalar arguments and the split-K workspace size."""

    __slots__ = ("out_shape", "dtype", "kernel", "grid", "block", "smem", "scalars", "workspace", "extents", "empty",
                 "maps", "pdl")

    def __init__(self, out_shape, dtype, kernel, grid, block, smem, scalars, workspace, extents, empty=False,
                 maps=None):
        self.out_shape, self.dtype, self.kernel, self.grid, self.block = out_shape, dtype, kernel, grid, block
        self.smem, self.scalars, self.workspace, self.extents, self.empty = smem, scalars, workspace, extents, empty
        self.maps = maps  # TMA kernel: the MapGeometry of x and of the weight, passed instead of their pointers
        self.pdl = None  # a _launch.PdlLaunch once use_pdl() is called

    def use_pdl(self, dev):
        """Launch through ``cuLaunchKernelEx`` with programmatic dependent launch (every
        linear kernel waits for the previous grid before touching memory: kernels/common.cuh),
        one-wave grids with one block an SM (``pdl_smem``)."""
        operands = (_launch.MAP,) * 2 if self.maps is not None else (_launch.POINTER,) * 2
        workspace = (_launch.POINTER,) * 2 if self.workspace is not None else ()
        kinds = operands + (_launch.POINTER, _launch.POINTER) + workspace + tuple(self.scalars)
        smem = linear_configs.pdl_smem(self.smem, self.kernel.shared_size_bytes, math.prod(self.grid), dev)
        allow_dynamic_smem(self.kernel, smem)
        self.pdl = _launch.PdlLaunch(self.kernel, self.grid, self.block, smem, kinds)

    def may_overlap(self, x, weight, bias, out) -> bool:
        out_lo, out_hi = out.data.ptr, out.data.ptr + out.nbytes
        for a, extent in zip((x, weight, bias), self.extents):
            if a is not None and a.data.ptr + extent[0] < out_hi and out_lo < a.data.ptr + extent[1]:
                return True
        return False

    def launch(self, x, weight, bias, out):
        import cupy

        with x.device:
            if out is None:
                out = cupy.empty(self.out_shape, dtype=self.dtype)
            if self.empty:
                return out
            workspace = () if self.workspace is None else _split_workspace(cupy, *self.workspace)
            if self.pdl is not None:
                pointers = (0 if bias is None else bias.data.ptr, out.data.ptr) + tuple(a.data.ptr for a in workspace)
                stream = cupy.cuda.get_current_stream().ptr
                if self.maps is None:
                    self.pdl(stream, (x.data.ptr, weight.data.ptr) + pointers)
                else:  # the map tuples stay referenced until the launch has copied the bytes
                    x_map = _tma.cached_map(self.maps[0], x.data.ptr)
                    w_map = _tma.cached_map(self.maps[1], weight.data.ptr)
                    self.pdl(stream, pointers, (x_map[2], w_map[2]))
                return out
            bias_arg = bias if bias is not None else _NULL
            if self.maps is None:
                operands = (x, weight, bias_arg, out)
            else:
                operands = (_tma.tensor_map(self.maps[0], x.data.ptr), _tma.tensor_map(self.maps[1], weight.data.ptr),
                            bias_arg, out)
            self.kernel(self.grid, self.block, operands + workspace + self.scalars, shared_mem=self.smem)
        return out


def _linear_relu_gpu(x, weight, bias, out, out_shape, config):
    plan = _make_plan(x, weight, bias, out, out_shape, config)
    dev = current_device_info()
    if not plan.empty and linear_configs.uses_pdl(_rows_view(x)[0], dev):
        plan.use_pdl(dev)
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[_signature(x, weight, bias, out, config)] = plan
    return plan.launch(x, weight, bias, out)


def _make_plan(x, weight, bias, out, out_shape, config):
    """Config choice and launch parameters of one (validated) signature."""
    m, x_row_stride, x_k_stride = _rows_view(x)
    k, n = weight.shape
    extents = tuple(None if a is None else _byte_extent(a) for a in (x, weight, bias))
    with x.device:
        if math.prod(out_shape) == 0:
            return _Plan(out_shape, x.dtype, None, None, None, 0, (), None, extents, empty=True)
        itemsize = x.dtype.itemsize
        w_k_stride, w_n_stride = (s // itemsize for s in weight.strides)
        b_kmajor = linear_configs.mma_eligible(
            x.dtype, k, n, x.data.ptr, x_row_stride, x_k_stride, m, weight.data.ptr, w_k_stride, w_n_stride
        )
        dev = current_device_info()
        mma_ok = b_kmajor is not None and dev.cc >= linear_configs.MMA_MIN_CC
        tma_ok = mma_ok and linear_configs.wgmma_supported(dev) and linear_configs.tma_eligible(
            x.dtype, k, n, x.data.ptr, x_row_stride, m, weight.data.ptr, w_k_stride, w_n_stride, b_kmajor)
        if config is None:
            config = linear_configs.choose_config(m, n, k, x.dtype, mma_ok, dev, kmajor=b_kmajor is True, tma_ok=tma_ok)
        tma_kinds = ("wgmma_tma", "swap_tma")
        if config.kind in ("mma", "wgmma") + tma_kinds and not (mma_ok and itemsize == 2):
            raise ValueError(f"{_FN}: argument 'config' asks for the {config.kind} kernel, which these operands' "
                             f"dtype or alignment rule out")
        if config.kind == "gemv" and not mma_ok:
            raise ValueError(f"{_FN}: argument 'config' asks for the gemv kernel, which needs 16-byte aligned rows "
                             f"on compute capability {linear_configs.MMA_MIN_CC // 10}.0 or later")
        if config.kind == "gemv" and itemsize == 8 and b_kmajor is False and config.splits > 1:
            raise ValueError(f"{_FN}: argument 'config' expected splits=1 for the float64 gemv kernel on a "
                             f"row-major weight (its split sums would meet in float32), got {config.splits}")
        wide_dtype = linear_configs.WIDE_KINDS.get(config.kind)
        if wide_dtype is not None and not (mma_ok and x.dtype == wide_dtype):
            came = (f"{x.dtype} operands" if x.dtype != wide_dtype
                    else f"rows or a device (compute capability {dev.cc}) that do not qualify")
            raise ValueError(f"{_FN}: argument 'config' asks for the {config.kind} kernel, which needs {wide_dtype} "
                             f"operands with 16-byte aligned rows on compute capability 8.0 or later, got {came}")
        if wide_dtype is not None and getattr(config.tile, "dmma_k", 0) and (
                config.kind != "dmma" or dev.cc < linear_configs.DMMA_PIPELINED_MIN_CC):
            raise ValueError(f"{_FN}: argument 'config' asks for the pipelined float64 kernel (dmma_k "
                             f"{config.tile.dmma_k}), which needs kind 'dmma' and compute capability "
                             f"{linear_configs.DMMA_PIPELINED_MIN_CC // 10}.0, got kind {config.kind!r} on {dev.cc}")
        if config.kind in ("wgmma",) + tma_kinds and not linear_configs.wgmma_supported(dev):
            raise ValueError(f"{_FN}: argument 'config' asks for the {config.kind} kernel, which needs compute "
                             f"capability 9.0, got {dev.cc}")
        if config.kind in tma_kinds and not tma_ok:
            raise ValueError(f"{_FN}: argument 'config' asks for the {config.kind} kernel, which needs operands a TMA "
                             f"tensor map can describe (K > 0, rows 16-byte aligned and not overlapping)")
        if config.kind == "swap_tma" and m > config.tile.mx:
            raise ValueError(f"{_FN}: argument 'config' asks for the swap_tma kernel with x rows padded to "
                             f"{config.tile.mx}, which takes at most M = {config.tile.mx} rows, got M = {m}")
        if config.kind in ("wgmma", "tf32x3", "dmma") + tma_kinds and config.splits > 1 and config.reduction != "slots":
            raise ValueError(f"{_FN}: argument 'config' expected reduction='slots' for a split {config.kind} "
                             f"config (the kernel's only split-K reduction), got {config.reduction!r}")
        if config.kind == "gemv" and m > config.tile.rows:
            raise ValueError(f"{_FN}: argument 'config' expected a gemv tile of at least M = {m} rows, "
                             f"got {config.tile.rows}")
        if not mma_ok:  # the SIMT kernel coalesces along k when the weight's k stride is the unit one
            b_kmajor = abs(w_k_stride) == 1 and abs(w_n_stride) != 1
        spec = linear_configs.kernel_spec(config, x.dtype, b_kmajor)
        tile = config.tile
        bias_stride = np.int64(bias.strides[0] // itemsize if bias is not None else 0)
        i64 = np.int64
        if config.kind == "gemv":
            return _gemv_plan(out_shape, x.dtype, spec, config, m, n, k, x_row_stride,
                              w_n_stride if b_kmajor else w_k_stride, b_kmajor, bias_stride, extents)
        tiles = linear_configs.tile_count(m, n, tile)
        if config.kind == "simt":
            kernel = get_kernel(spec.source, spec.name, *spec.template_args)
            scalars = (i64(m), i64(n), i64(k), i64(x_row_stride), i64(x_k_stride), i64(w_k_stride), i64(w_n_stride),
                       bias_stride, np.int32(config.raster_group))
            return _Plan(out_shape, x.dtype, kernel, (tiles, 1, 1), (tile.threads, 1, 1), 0, scalars, None, extents)
        # out is C-contiguous (check_out), a fresh one 256-byte aligned, and the plan's
        # signature holds out's alignment.
        paired_store = n % 2 == 0 and (out is None or out.data.ptr % (2 * itemsize) == 0)
        # The tensor-core kernels (mma, wgmma, wgmma_tma, swap_tma, tf32x3, dmma): same arguments,
        # but for mma's reduction flag, the TMA kernels' tensor maps in place of x, the weight and
        # their strides, and the paired-store flag only where the store has one (not the swapped
        # kernel's transposed store, not the float32 / float64 kernels' scalar stores).
        k_tiles = -(-k // tile.bk)
        splits = linear_configs.effective_splits(max(k_tiles, 1), config.splits)
        k_tiles_per_split = -(-k_tiles // splits)
        smem = tile.smem_bytes(itemsize)
        kernel = get_kernel(spec.source, spec.name, *spec.template_args, dynamic_smem=smem)
        ldw = w_n_stride if b_kmajor else w_k_stride
        maps = None
        if config.kind in tma_kinds:
            maps = linear_configs.operand_maps(tile, x.dtype, m, n, k, x_row_stride, ldw, b_kmajor)
            strides = ()
        else:
            strides = (i64(x_row_stride), i64(ldw))
        scalars = (i64(m), i64(n), i64(k)) + strides + (bias_stride, np.int32(k_tiles_per_split),
                                                        np.int32(config.raster_group))
        if config.kind != "swap_tma" and wide_dtype is None:
            scalars += (np.int32(paired_store),)
        if config.kind == "mma":
            scalars += (np.int32(config.reduction == "slots"),)
        workspace = (config.workspace_floats(m, n, splits), tiles, config.reduction)
        return _Plan(out_shape, x.dtype, kernel, (tiles, 1, splits), (tile.threads, 1, 1), smem,
                     *_workspace_args(scalars, splits, workspace), extents, maps=maps)


_GEMV_SPLIT_ROWS = 64  # kernels/linear_relu.cu: GEMV_WARPS x GEMV_ROW_LOADS


def _gemv_plan(out_shape, dtype, spec, config, m, n, k, ldx, ldw, b_kmajor, bias_stride, extents):
    """The weight-streaming kernel: K-major weights need no split; row-major ones split K
    over ``config.splits`` blocks per block of columns (float32 workspace, as for the mma
    kernel; K = 0: one block, bias and ReLU only)."""
    tile = config.tile
    col_blocks = -(-n // tile.columns_per_block(b_kmajor, np.dtype(dtype).itemsize))
    splits = 1 if b_kmajor else max(1, min(config.splits, k))
    # Whole runs of 8 warps x 8 rows a split, so a warp's x vectors never straddle two splits.
    k_rows_per_split = -(-max(1, -(-k // splits)) // _GEMV_SPLIT_ROWS) * _GEMV_SPLIT_ROWS
    splits = max(1, -(-k // k_rows_per_split))
    kernel = get_kernel(spec.source, spec.name, *spec.template_args)
    scalars = (np.int64(m), np.int64(n), np.int64(k), np.int64(ldx), np.int64(ldw), bias_stride,
               np.int64(k_rows_per_split))
    return _Plan(out_shape, dtype, kernel, (col_blocks, splits, 1), (tile.threads, 1, 1), 0,
                 *_workspace_args(scalars, splits, (m * n, col_blocks, "atomic")), extents)


def _workspace_args(scalars, splits, workspace):
    """(scalars, workspace) of a _Plan for a kernel taking (workspace, counters) before its
    scalars: null pointers without split-K, else the workspace's (floats, counters, kind),
    bound per launch."""
    return ((_NULL, _NULL) + scalars, None) if splits == 1 else (scalars, workspace)


_NULL = np.uint64(0)  # a null pointer argument


# Split-K workspace, one per (device, stream, reduction kind): float32 cells and one int
# counter per output tile. Kernels leave the counters zeroed (and, with atomics, the
# cells), so it is allocated (zeroed) only when a larger one is needed and reused by every
# later split-K call on that stream; calls on one stream are ordered, so they never share
# it concurrently. Its size is bounded by the configs (``choose_config`` splits only when
# the tiles are fewer than the block slots).
_workspaces: dict = {}


def _split_workspace(cupy, cells: int, tiles: int, kind: str):
    key = (cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, kind)
    held = _workspaces.get(key)
    if held is None or held[0].size < cells or held[1].size < tiles:
        size = max(cells, held[0].size if held else 0), max(tiles, held[1].size if held else 0)
        held = (cupy.zeros(size[0], dtype=np.float32), cupy.zeros(size[1], dtype=np.int32))
        _workspaces[key] = held
    return held
