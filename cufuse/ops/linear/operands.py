"""The operands of a fused_linear call as the kernels see them (pure; no GPU needed).

x is read as an (M, K) matrix (``rows_view``), the weight as (K, N) with any strides. Which
kernels can load them is a matter of layout and alignment: the tensor-core kernels copy
16-byte chunks (``mma_eligible``), the TMA-fed ones need tensor maps (``tma_eligible``),
the SIMT kernel takes anything. ``LinearProblem`` gathers those facts for one call on one
device; the selection (``select``) and every variant's ``check`` and ``plan`` read it.
Strides are in elements, pointers in bytes (only their alignment matters).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core import tma

FN = "fused_linear"
# The epilogue's activation as the kernels number it (kernels/linear/epilogue.cuh Activation).
ACTIVATION_CODES = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
MMA_MIN_CC = 80  # cp.async, ldmatrix and bfloat16 mma.sync
SMALL_M = 64  # at or below: the weight-streaming regime (the weight's bytes bound the time)
WGMMA_ATOM = 64  # 16-bit elements per 128-byte swizzle row (kernels/common/wgmma.cuh WGMMA_ATOM_N)
# The TMA maps' L2 promotion: the weight streams (M <= SMALL_M) fetch their 128-byte box rows
# as they are, the GEMMs keep the 256 bytes they were measured with (docs/linear.md).
STREAM_L2_PROMOTION, GEMM_L2_PROMOTION = 128, 256


def activation_code(fn: str, activation) -> int:
    """The kernels' number of ``activation``; ValueError naming ``fn`` for anything else."""
    try:
        return ACTIVATION_CODES[activation]
    except (KeyError, TypeError):
        raise ValueError(f"{fn}: argument 'activation' expected one of None, 'relu', 'gelu', 'gelu_tanh' or "
                         f"'silu', got {activation!r}") from None


def check_bias_shape(fn: str, shape: tuple, n: int) -> bool:
    """Whether a bias of ``shape`` is a whole (N,) row (True: ``(N,)`` or ``(1, N)``) or one
    value broadcast to every element (False: ``()``, ``(1,)``, ``(1, 1)``). Anything else,
    a bias that would differ from row to row included, is a ValueError naming ``fn``: it is
    not a bias of the GEMM's epilogue."""
    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        raise ValueError(f"{fn}: argument 'bias' expected shape ({n},), (1, {n}) or one value broadcast to every "
                         f"row ((), (1,)), got {tuple(shape)}")
    return bool(shape) and shape[-1] == n


def rows_view(shape, strides, fn: str = FN) -> tuple[int, int, int]:
    """(M, row stride, k stride) of an x of ``shape`` and ``strides`` (elements) seen as an
    (M, K) matrix, without a copy.

    The leading axes must collapse into one row axis with a single stride (any C-ordered
    stack of rows, including a sliced last axis); otherwise ValueError, since the only way
    to run it would be a silent copy. The last axis may have any stride.
    """
    lead = [(d, st) for d, st in zip(shape[:-1], strides[:-1]) if d != 1]
    m = math.prod(d for d, _ in lead)
    for (_, outer), (inner_dim, inner) in zip(lead, lead[1:]):
        if outer != inner * inner_dim:
            raise ValueError(
                f"{fn}: argument 'x' expected leading axes that collapse into one row stride "
                f"(e.g. a C-contiguous array or a slice of its last axis), got shape {tuple(shape)} with "
                f"strides {tuple(strides)} (elements); pass cupy.ascontiguousarray(x)"
            )
    row_stride = lead[-1][1] if lead else shape[-1]
    return m, row_stride, strides[-1]


def mma_eligible(dtype, k: int, n: int, x_ptr: int, x_row_stride: int, x_k_stride: int, m: int,
                 w_ptr: int, w_k_stride: int, w_n_stride: int) -> bool | None:
    """Whether the tensor-core kernels (16-bit types; float32 and float64 through
    ``linear_wide`` / ``linear_dmma``, and the gemv kernel) can load these operands
    with 16-byte copies, and with which weight layout: True (K-major: unit k stride), False
    (N-major: unit n stride) or None (not eligible)."""
    vec = 16 // np.dtype(dtype).itemsize  # elements per 16-byte chunk
    if k % vec or x_ptr % 16 or w_ptr % 16 or x_k_stride != 1:
        return None
    if m > 1 and x_row_stride % vec:
        return None
    if w_k_stride == 1 and (n == 1 or w_n_stride % vec == 0):
        return True
    if w_n_stride == 1 and n % vec == 0 and w_k_stride % vec == 0:
        return False
    return None


def l2_promotion(m: int) -> int:
    """The TMA maps' L2 promotion in bytes for an M-row problem."""
    return STREAM_L2_PROMOTION if m <= SMALL_M else GEMM_L2_PROMOTION


def operand_maps(dtype, m: int, n: int, k: int, ldx: int, ldw: int, kmajor: bool, x_rows: int, w_rows: int,
                 promotion: int) -> tuple:
    """The ``tma.MapGeometry`` of x ({K, M}, boxes of 64 x ``x_rows``) and of the weight
    (K-major: {K, N}, N-major: {N, K}, boxes of 64 x ``w_rows``: the tile's BN K-major, its BK
    N-major) for the TMA kernels: 64 16-bit elements = 128 bytes per box row, swizzled over
    128 bytes (the layout of the kernels' shared-memory descriptors)."""
    x_map = tma.geometry(dtype, k, m, ldx, WGMMA_ATOM, x_rows, l2_promotion=promotion)
    if kmajor:
        return x_map, tma.geometry(dtype, k, n, ldw, WGMMA_ATOM, w_rows, l2_promotion=promotion)
    return x_map, tma.geometry(dtype, n, k, ldw, WGMMA_ATOM, w_rows, l2_promotion=promotion)


def tma_eligible(dtype, k: int, n: int, x_ptr: int, x_row_stride: int, m: int, w_ptr: int, w_k_stride: int,
                 w_n_stride: int, kmajor: bool | None) -> bool:
    """Whether the TMA kernels can read these operands (already ``mma_eligible`` with weight
    layout ``kmajor``): both tensor maps must be buildable (``tma.map_problem``: 16-byte
    aligned bases and row strides, rows not overlapping, K > 0); the boxes of the largest
    tile (128 x 64 of x, 256 x 64 or 64 x 64 of the weight) stand for every tile's."""
    if kmajor is None or np.dtype(dtype).itemsize != 2:
        return False
    ldw = w_n_stride if kmajor else w_k_stride
    maps = operand_maps(dtype, m, n, k, x_row_stride, ldw, kmajor, 128, 256 if kmajor else 64, l2_promotion(m))
    return all(tma.map_problem(g, ptr) is None for g, ptr in zip(maps, (x_ptr, w_ptr)))


@dataclasses.dataclass(frozen=True)
class LinearProblem:
    """One (M, K) @ (K, N) call on one device, as its variants need it.

    ``layout``: ``mma_eligible``'s answer. ``tensor_ok``: the 16-byte-chunk kernels (tensor
    cores, gemv) can run (eligible and compute capability 8.0+). ``tma_ok``: tensor maps
    describe both operands on a device with the TMA kernels. ``kmajor``: the weight layout
    the kernel is compiled for (the SIMT kernel's: the weight's unit stride runs along k).
    ``out_ptr``: None for a fresh (256-byte aligned) output. ``activation``: the epilogue's
    (``ACTIVATION_CODES``). ``fn``: the public function, for error messages.
    """

    m: int
    n: int
    k: int
    dtype: np.dtype
    ldx: int  # x's row stride
    x_k_stride: int
    w_k_stride: int
    w_n_stride: int
    bias_stride: int | None  # None: no bias
    out_ptr: int | None
    layout: bool | None
    tensor_ok: bool
    tma_ok: bool
    kmajor: bool
    activation: int = 1
    fn: str = FN

    gated: bool = dataclasses.field(default=False, init=False)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def tile_columns(self) -> int:
        """The columns the kernels tile: N (a gated problem: its 2N of gate and up)."""
        return self.n

    @property
    def ldw(self) -> int:
        """The weight's stride between rows of its contiguous axis (n K-major, k N-major)."""
        return self.w_n_stride if self.kmajor else self.w_k_stride

    @property
    def paired_store(self) -> bool:
        """Two output elements a 32-bit store: N even and out aligned to two elements (out is
        C-contiguous; a fresh one 256-byte aligned; the plan's key holds out's alignment)."""
        return self.n % 2 == 0 and (self.out_ptr is None or self.out_ptr % (2 * self.itemsize) == 0)

    @property
    def bias_scalar(self) -> np.int64:
        return np.int64(0 if self.bias_stride is None else self.bias_stride)


def linear_problem(m: int, ldx: int, x_k_stride: int, x_ptr: int, k: int, n: int, w_strides, w_ptr: int,
                   bias_stride, out_ptr, dtype, dev, activation: int = 1, fn: str = FN) -> LinearProblem:
    dtype = np.dtype(dtype)
    w_k_stride, w_n_stride = w_strides
    layout = mma_eligible(dtype, k, n, x_ptr, ldx, x_k_stride, m, w_ptr, w_k_stride, w_n_stride)
    tensor_ok = layout is not None and dev.cc >= MMA_MIN_CC
    tma_ok = tensor_ok and dev.has_wgmma and tma_eligible(dtype, k, n, x_ptr, ldx, m, w_ptr, w_k_stride, w_n_stride,
                                                          layout)
    # The SIMT kernel coalesces along k when the weight's k stride is the unit one.
    kmajor = layout if tensor_ok else (abs(w_k_stride) == 1 and abs(w_n_stride) != 1)
    return LinearProblem(m, n, k, dtype, ldx, x_k_stride, w_k_stride, w_n_stride, bias_stride, out_ptr, layout,
                         tensor_ok, tma_ok, bool(kmajor), activation, fn)


@dataclasses.dataclass(frozen=True)
class GatedProblem(LinearProblem):
    """One fused_gated_linear call: the gate weight's facts as a ``LinearProblem``'s (no
    bias) plus w_up's strides. ``tensor_ok``: both weights ``mma_eligible`` with one layout;
    ``tma_ok``: tensor maps describe x and both weights."""

    up_k_stride: int = 0
    up_n_stride: int = 0
    gated: bool = dataclasses.field(default=True, init=False)

    @property
    def tile_columns(self) -> int:
        return 2 * self.n

    @property
    def ldw_up(self) -> int:
        return self.up_n_stride if self.kmajor else self.up_k_stride


def gated_problem(m: int, ldx: int, x_k_stride: int, x_ptr: int, k: int, n: int, gate_strides, gate_ptr: int,
                  up_strides, up_ptr: int, out_ptr, dtype, dev, activation: int, fn: str) -> GatedProblem:
    gate = linear_problem(m, ldx, x_k_stride, x_ptr, k, n, gate_strides, gate_ptr, None, out_ptr, dtype, dev,
                          activation, fn)
    up_layout = mma_eligible(gate.dtype, k, n, x_ptr, ldx, x_k_stride, m, up_ptr, *up_strides)
    tensor_ok = gate.tensor_ok and up_layout == gate.layout
    tma_ok = tensor_ok and gate.tma_ok and tma_eligible(gate.dtype, k, n, x_ptr, ldx, m, up_ptr, *up_strides,
                                                        up_layout)
    fields = {f.name: getattr(gate, f.name) for f in dataclasses.fields(gate) if f.init}
    fields.update(tensor_ok=tensor_ok, tma_ok=tma_ok, up_k_stride=up_strides[0], up_n_stride=up_strides[1])
    return GatedProblem(**fields)


def config_error(problem: LinearProblem, kind: str, why: str) -> ValueError:
    """The ValueError of a ``config=`` that cannot run the call: ``kind`` names its kernel."""
    return ValueError(f"{problem.fn}: argument 'config' asks for the {kind} kernel, which {why}")


def require_problem_kind(config, problem: LinearProblem) -> None:
    """A gated variant (``config.gated``) runs fused_gated_linear only, the others fused_linear."""
    if problem.gated != config.gated:
        raise config_error(problem, config.kind, f"runs {'fused_gated_linear' if config.gated else 'fused_linear'} only")


def require_16bit_tensor_operands(kind: str, problem: LinearProblem) -> None:
    """The 16-bit tensor-core kernels' rule: float16 / bfloat16 operands ``mma_eligible``."""
    if not (problem.tensor_ok and problem.itemsize == 2):
        raise config_error(problem, kind, "these operands' dtype or alignment rule out")
