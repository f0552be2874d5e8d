"""``linear_mma`` (kernels/linear/mma.cu): float16 / bfloat16 on mma.sync tensor cores,
sm_80 and later. One template serves the GEMM tiles and the weight-streaming tiles of M <=
64; split-K through per-split slots summed in split order."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK
from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .operands import MMA_MIN_CC, require_16bit_tensor_operands, require_problem_kind
from .tiling import TiledConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemmTile:
    """Block tile BM x BN x BK of ``linear_mma``, its warp grid and pipeline depth.

    ``max_blocks_per_sm``: blocks an SM's registers hold (the kernel's launch bounds: two for
    4 warps); ``blocks_per_sm`` adds the device's shared memory. ``relative_speed``: the
    throughput of a full tile relative to the 128x256 one, only to compare tiles
    (``tiling.gemm_score``)."""

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    max_blocks_per_sm: int
    relative_speed: float

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def smem_bytes(self, itemsize: int = 2) -> int:
        return self.stages * (self.bm * self.bk + self.bk * self.bn) * itemsize

    def blocks_per_sm(self, dev) -> int:
        return min(self.max_blocks_per_sm, dev.smem_per_sm // (self.smem_bytes() + SMEM_RESERVED_PER_BLOCK))


# GEMM tiles, largest first (docs/linear.md, "mma"): 128x256 keeps the most reuse per shared-
# memory byte (one block an SM); 128x128 and 64x128 fill the machine on medium shapes.
LARGE_TILE = GemmTile(bm=128, bn=256, bk=64, warps_m=2, warps_n=4, stages=3, max_blocks_per_sm=1, relative_speed=1.0)
MEDIUM_TILE = GemmTile(bm=128, bn=128, bk=64, warps_m=2, warps_n=2, stages=3, max_blocks_per_sm=2, relative_speed=0.9)
SMALL_TILE = GemmTile(bm=64, bn=128, bk=64, warps_m=2, warps_n=2, stages=4, max_blocks_per_sm=2, relative_speed=0.75)
GEMM_TILES = (LARGE_TILE, MEDIUM_TILE, SMALL_TILE)
# M <= 16: the weight stream with a deep pipeline (3.50 TB/s at 16 x 8192^2 split 2).
STREAM_TILE = GemmTile(bm=16, bn=128, bk=64, warps_m=1, warps_n=4, stages=6, max_blocks_per_sm=2, relative_speed=0.25)
# M = 17..64 (compute capability 8.x): more weight bytes in flight per SM for the same blocks
# (64 x 8192^2 split 2 through slots: 2.88 TB/s against 2.16 for 64x128 split 4).
STREAM64_TILE = GemmTile(bm=64, bn=64, bk=64, warps_m=2, warps_n=2, stages=6, max_blocks_per_sm=2, relative_speed=0.6)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MmaConfig(TiledConfig):
    """``linear_mma`` on a ``GemmTile``, K split ``splits`` ways (1: no workspace): each
    split stores its partial tile to its own slot, the last block sums them in split order
    (tiles x splits x BM x BN floats)."""

    kind: ClassVar[str] = "mma"
    kernel: ClassVar[str] = "linear_mma"
    gated: ClassVar[bool] = False

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        args = (ctype(dtype), t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, kmajor)
        return KernelSpec("linear/mma.cu", self.kernel, args, min_cc=MMA_MIN_CC)

    def check(self, problem, dev) -> None:
        require_16bit_tensor_operands(self.kind, problem)
        require_problem_kind(self, problem)

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor),
                          flags=(np.int32(problem.paired_store),))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedMmaConfig(TiledConfig):
    """``gated_linear_mma`` (fused_gated_linear's config) on a ``GemmTile``: the tile's BN
    columns are BN / 2 output columns of w_gate and of w_up (each warp half and half), K split
    ``splits`` ways through slots."""

    kind: ClassVar[str] = "gated_mma"
    kernel: ClassVar[str] = "gated_linear_mma"
    gated: ClassVar[bool] = True
    spec, check, plan = MmaConfig.spec, MmaConfig.check, MmaConfig.plan
