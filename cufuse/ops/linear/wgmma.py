"""The Hopper warpgroup-MMA GEMM kernels (sm_90a), float16 / bfloat16: ``linear_wgmma``
(kernels/linear/wgmma.cu, operands loaded by cp.async) and ``linear_wgmma_tma``
(kernels/linear/wgmma_tma.cu, fed by TMA). Same tiles and epilogue; split-K through slots.
fused_gated_linear's ``gated_linear_wgmma_tma`` (same file) runs the TMA tiles with each
stage's weight columns half w_gate's, half w_up's."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK
from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .operands import config_error, require_16bit_tensor_operands, require_problem_kind
from .tiling import TiledConfig

WGMMA_MIN_CC = 90
WGMMA_STATIC_SMEM = 16  # upper bound of the kernels' static shared memory (last_to_arrive's flag)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WgmmaGemmTile:
    """A tile of ``linear_wgmma``: BM x BN x BK (BM 64 or 128: one wgmma m64nBNk16 row of
    64 per warpgroup; BK 64 or 128), a ``stages``-deep cp.async pipeline, ``pending`` wgmma
    groups left in flight across the next barrier (the loads then run stages - 1 - pending
    tiles ahead). ``max_blocks_per_sm``: the kernel's MIN_BLOCKS (its registers allow that
    many); ``relative_speed`` against the mma kernel's 128x256 tile (``tiling.gemm_score``)."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    max_blocks_per_sm: int = 1
    relative_speed: float = 1.5
    bk: int = 64
    pending: int = 1

    @property
    def threads(self) -> int:
        return 2 * self.bm

    def smem_bytes(self, itemsize: int = 2) -> int:
        """Dynamic shared memory, with 1 KB to align the stages for the 128-byte swizzle."""
        return self.stages * (self.bm + self.bn) * self.bk * itemsize + 1024

    def blocks_per_sm(self, dev) -> int:
        """Resident blocks per SM: the static shared memory counts too, so two 64x64 s7 blocks
        (2 x 113 KB + 2 KB = the H200's 228 KB exactly) do not fit."""
        per_block = self.smem_bytes() + SMEM_RESERVED_PER_BLOCK + WGMMA_STATIC_SMEM
        return min(self.max_blocks_per_sm, dev.smem_per_sm // per_block)


# The cp.async tiles: 128x256 once its tiles fill every SM; fewer tiles, the best score of
# the others (512 x 4096^2: 128x128 s5 363-366 TFLOP/s); M = 17..64 the 64x64
# stream tile, two an SM (64 x 8192^2 split 2: 3.14-3.17 TB/s). docs/linear.md, "wgmma".
WGMMA_TILE = WgmmaGemmTile()
WGMMA_128x128 = WgmmaGemmTile(bm=128, bn=128, stages=5, max_blocks_per_sm=1, relative_speed=1.35)
WGMMA_64x256 = WgmmaGemmTile(bm=64, bn=256, stages=4, max_blocks_per_sm=1, relative_speed=1.3)
WGMMA_64x128 = WgmmaGemmTile(bm=64, bn=128, stages=4, max_blocks_per_sm=2, relative_speed=1.1)
WGMMA_64x64 = WgmmaGemmTile(bm=64, bn=64, stages=6, max_blocks_per_sm=2, relative_speed=0.8)
WGMMA_TILES = (WGMMA_TILE, WGMMA_128x128, WGMMA_64x256, WGMMA_64x128, WGMMA_64x64)
WGMMA_STREAM_TILE = WGMMA_64x64


@dataclasses.dataclass(frozen=True, kw_only=True)
class TmaGemmTile(WgmmaGemmTile):
    """A tile of ``linear_wgmma_tma``: the cp.async kernel's tile and stage layout, plus
    one producer warp (the block's last 32 threads) and 2 x ``stages`` mbarriers (8 bytes
    each) after the stages. ``cost``: the time model of ``tiling.tma_time`` in microseconds
    on the H200, (a k tile, a wave, a split-K launch, each split), fitted to the
    sweep in docs/linear.md ("TMA tile and split model"); the selection reads it, not the
    inherited ``relative_speed`` (the cp.async tiles' ``gemm_score``)."""

    cost: tuple = (0.0, 0.0, 0.0, 0.0)

    @property
    def threads(self) -> int:
        return 2 * self.bm + 32

    def smem_bytes(self, itemsize: int = 2) -> int:
        return super().smem_bytes(itemsize) + 2 * 8 * self.stages


# One TMA tile per cp.async block shape; stages fill the shared memory the blocks per SM
# leave (8192^3 711 TFLOP/s against the cp.async 522). Costs: least squares (weights
# 1 / time, non-negative) over 672 timed configs of fused_linear and the gated kernel, M 65 to
# 2048, seven model projections, splits 1-4 (docs/linear.md).
TMA_TILE = TmaGemmTile(bm=128, bn=256, stages=4, max_blocks_per_sm=1, cost=(0.69, 12.49, 0.0, 3.39))
TMA_128x128 = TmaGemmTile(bm=128, bn=128, stages=6, max_blocks_per_sm=1, cost=(0.44, 5.36, 3.10, 2.63))
TMA_64x256 = TmaGemmTile(bm=64, bn=256, stages=5, max_blocks_per_sm=1, cost=(0.44, 6.39, 4.51, 2.46))
TMA_64x128 = TmaGemmTile(bm=64, bn=128, stages=4, max_blocks_per_sm=2, cost=(0.44, 7.83, 0.74, 2.35))
TMA_64x64 = TmaGemmTile(bm=64, bn=64, stages=6, max_blocks_per_sm=2, cost=(0.36, 3.40, 8.92, 0.19))
TMA_TILES = (TMA_TILE, TMA_128x128, TMA_64x256, TMA_64x128, TMA_64x64)
# The gated kernel's tiles: BN / 2 columns of each weight a stage, whole 64-column swizzle
# atoms of a row-major one (so not the 64x64 tile); the one-block-an-SM tiles, the ones
# measured.
GATED_TMA_TILES = (TMA_TILE, TMA_128x128, TMA_64x256)
GATED_TMA_TILES_NAMES = ", ".join(f"{t.bm}x{t.bn}" for t in GATED_TMA_TILES)


def require_hopper(kind: str, problem, dev) -> None:
    if not dev.has_wgmma:
        raise config_error(problem, kind, f"needs compute capability 9.0, got {dev.cc}")


def require_tensor_maps(kind: str, problem) -> None:
    if not problem.tma_ok:
        raise config_error(problem, kind, "needs operands a TMA tensor map can describe (K > 0, rows 16-byte aligned and not "
                                 "overlapping)")


def _spec(name: str, source: str, tile: WgmmaGemmTile, dtype, kmajor: bool) -> KernelSpec:
    t = tile
    args = (ctype(dtype), t.bm, t.bn, t.bk, t.stages, t.pending, t.max_blocks_per_sm, kmajor)
    return KernelSpec(source, name, args, min_cc=WGMMA_MIN_CC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WgmmaConfig(TiledConfig):
    """``linear_wgmma`` (cp.async) on a ``WgmmaGemmTile``, K split through slots."""

    kind: ClassVar[str] = "wgmma"

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        return _spec("linear_wgmma", "linear/wgmma.cu", self.tile, dtype, kmajor)

    def check(self, problem, dev) -> None:
        require_16bit_tensor_operands(self.kind, problem)
        require_hopper(self.kind, problem, dev)

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor),
                          flags=(np.int32(problem.paired_store),))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TmaConfig(TiledConfig):
    """``linear_wgmma_tma`` on a ``TmaGemmTile``, K split through slots; x and the weight
    passed as tensor maps (``operands.operand_maps``)."""

    kind: ClassVar[str] = "wgmma_tma"
    kernel: ClassVar[str] = "linear_wgmma_tma"
    gated: ClassVar[bool] = False

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        return _spec(self.kernel, "linear/wgmma_tma.cu", self.tile, dtype, kmajor)

    def check(self, problem, dev) -> None:
        require_16bit_tensor_operands(self.kind, problem)
        require_problem_kind(self, problem)
        require_hopper(self.kind, problem, dev)
        require_tensor_maps(self.kind, problem)

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor), tma_x_rows=self.tile.bm,
                          flags=(np.int32(problem.paired_store),))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedTmaConfig(TmaConfig):
    """``gated_linear_wgmma_tma`` (fused_gated_linear's config) on a ``TmaGemmTile`` of
    ``GATED_TMA_TILES``: the tile's BN columns are BN / 2 output columns of w_gate and of w_up
    (one wgmma chain over both), K split ``splits`` ways through slots."""

    kind: ClassVar[str] = "gated_wgmma_tma"
    kernel: ClassVar[str] = "gated_linear_wgmma_tma"
    gated: ClassVar[bool] = True

    def check(self, problem, dev) -> None:
        super().check(problem, dev)
        if self.tile not in GATED_TMA_TILES:
            raise config_error(problem, self.kind, f"takes the tiles of {GATED_TMA_TILES_NAMES}, got "
                                                   f"{self.tile.bm}x{self.tile.bn}")
