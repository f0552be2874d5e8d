"""``linear_swap_tma`` (kernels/linear/swap_tma.cu): the weight stream of M <= 64 on
Hopper with the operands swapped (out^T = W^T x^T: the weight's columns as wgmma's M, x's
rows padded to 8, 16 or 64 as its N), fed by TMA; split-K through slots. fused_gated_linear's
``gated_linear_swap_tma`` (same file): 64 output columns a block, w_gate's and w_up's 64
columns in each stage."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..._core.device import SMEM_RESERVED_PER_BLOCK
from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .operands import require_16bit_tensor_operands, require_problem_kind
from .tiling import TiledConfig
from .wgmma import WGMMA_MIN_CC, WGMMA_STATIC_SMEM, require_hopper, require_tensor_maps


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwapTile:
    """A tile of the swapped kernel (M <= ``mx``): ``bn`` weight columns a block (64 or 128:
    one or two consumer warpgroups, each a wgmma m64n{mx}k16 chain with the weight as A and x
    as B), x rows padded to ``mx`` (8, 16 or 64: wgmma's N and the x box's rows), a
    ``stages``-deep TMA ring of ``bk`` k (64, 128 or 256: one to four 128-byte boxes per weight
    row and stage). ``l2_hints``: the loads ask L2 to evict the weight first and keep x."""

    bn: int
    mx: int
    stages: int
    bk: int = 64
    l2_hints: bool = False

    def __post_init__(self):
        if self.bn not in (64, 128) or self.mx not in (8, 16, 64) or self.bk not in (64, 128, 256):
            raise ValueError(f"SwapTile: bn 64 or 128, mx 8, 16 or 64, bk 64, 128 or 256; got {self}")

    @property
    def bm(self) -> int:
        """The output rows a block covers (``tile_count``, the split-K slots of bm x bn floats)."""
        return self.mx

    @property
    def threads(self) -> int:
        return 2 * self.bn + 32  # bn / 64 consumer warpgroups and the producer warp

    def smem_bytes(self, itemsize: int = 2) -> int:
        """The stages, 1 KB to align them for the 128-byte swizzle, 2 x ``stages`` mbarriers."""
        return self.stages * (self.mx + self.bn) * self.bk * itemsize + 1024 + 2 * 8 * self.stages

    def blocks_per_sm(self, dev) -> int:
        """Resident blocks per SM: shared memory decides (a consumer thread holds mx / 2
        accumulators; the registers allow more blocks than shared memory does)."""
        return dev.smem_per_sm // (self.smem_bytes() + SMEM_RESERVED_PER_BLOCK + WGMMA_STATIC_SMEM)


# The defaults by x padding: 256 / 128 k a stage and the L2 hints (eager bf16 with
# PDL, (K,N) / (N,K).T: 1 x 8192^2 4.16 / 4.06 TB/s, 16 x 8192^2 4.10 / 4.03, 64 x 8192^2
# 3.89 / 3.72; docs/linear.md, "swap_tma").
SWAP_DEFAULT_TILES = {
    8: SwapTile(bn=64, mx=8, stages=5, bk=256, l2_hints=True),
    16: SwapTile(bn=64, mx=16, stages=5, bk=256, l2_hints=True),
    64: SwapTile(bn=64, mx=64, stages=6, bk=128, l2_hints=True),
}
SWAP_MAX_M = 64  # the largest x padding (wgmma N)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedSwapTile(SwapTile):
    """A tile of ``gated_linear_swap_tma``: ``bn`` = 128 stage rows (w_gate's 64 columns, then
    w_up's: 64 output columns a block), one consumer warpgroup running both chains."""

    def __post_init__(self):
        super().__post_init__()
        if self.bn != 128:
            raise ValueError(f"GatedSwapTile: bn 128 (64 columns of each weight), got {self}")

    @property
    def threads(self) -> int:
        return 128 + 32


# The gated stream's defaults: 128 k a stage (a stage holds 128 weight rows), 4 stages, L2
# hints (`experiments/linear/measure_classes.py --sweep`: at 1 / 16 x 4096 x 14336
# 4.16-4.19 TB/s against 3.79-4.02 with 6 stages; 4096 x 11008 and 8192 x 28672 within 2 % of
# the best of 64 k s10 / 128 k s4 / s6 / 256 k s3, both layouts).
GATED_SWAP_DEFAULT_TILES = {
    8: GatedSwapTile(bn=128, mx=8, stages=4, bk=128, l2_hints=True),
    16: GatedSwapTile(bn=128, mx=16, stages=4, bk=128, l2_hints=True),
    64: GatedSwapTile(bn=128, mx=64, stages=4, bk=128, l2_hints=True),
}


def swap_padding(m: int) -> int:
    """The x padding (wgmma N) of an M-row problem, M <= SWAP_MAX_M."""
    return 8 if m <= 8 else 16 if m <= 16 else 64


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwapConfig(TiledConfig):
    """``linear_swap_tma`` on a ``SwapTile``, K split through slots."""

    kind: ClassVar[str] = "swap_tma"
    kernel: ClassVar[str] = "linear_swap_tma"
    gated: ClassVar[bool] = False

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        shape = (t.mx,) if self.gated else (t.bn, t.mx)
        return KernelSpec("linear/swap_tma.cu", self.kernel,
                          (ctype(dtype),) + shape + (t.bk, t.stages, kmajor, t.l2_hints), min_cc=WGMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        require_16bit_tensor_operands(self.kind, problem)
        require_problem_kind(self, problem)
        if isinstance(self.tile, GatedSwapTile) != self.gated:
            raise ValueError(f"{problem.fn}: argument 'config' asks for the {self.kind} kernel, which takes "
                             f"{'a GatedSwapTile' if self.gated else 'a SwapTile'}, got {self.tile}")
        require_hopper(self.kind, problem, dev)
        require_tensor_maps(self.kind, problem)
        mx = self.tile.mx
        if problem.m > mx:
            raise ValueError(f"{problem.fn}: argument 'config' asks for the {self.kind} kernel with x rows padded to {mx}, "
                             f"which takes at most M = {mx} rows, got M = {problem.m}")

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor), tma_x_rows=self.tile.mx)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedSwapConfig(SwapConfig):
    """``gated_linear_swap_tma`` (fused_gated_linear's config) on a ``GatedSwapTile``, K split
    through slots."""

    kind: ClassVar[str] = "gated_swap_tma"
    kernel: ClassVar[str] = "gated_linear_swap_tma"
    gated: ClassVar[bool] = True
