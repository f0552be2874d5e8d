"""``linear_dmma`` (kernels/linear/dmma.cu): float64 on sm_90 DMMA with the fragment
loads pipelined (cuBLAS's Hopper DGEMM shape), for operands ``mma_eligible``; split-K through
slots of doubles."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..._core.dtypes import dtype_name
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .tiling import TiledConfig
from .wide import WideTile

DMMA_MIN_CC = 90  # mma.sync m16n8k8 / m16n8k16 .f64


@dataclasses.dataclass(frozen=True, kw_only=True)
class DmmaTile(WideTile):
    """A tile of ``linear_dmma``: BK 16, DMMA m16n8k{dmma_k} (8 or 16), unpadded
    swizzled rows."""

    itemsize: int = 8
    dmma_k: int = 8

    def smem_bytes(self, itemsize: int | None = None) -> int:
        return self.stages * (self.bm + self.bn) * self.bk * (itemsize or self.itemsize)


# cuBLAS's Hopper DGEMM tile: 128x64x16, 4 warps of 64x32, 2 blocks an SM, 3 stages, m16n8k8
# (4096^3: 57.0 / 54.5 TFLOP/s against linear_wide's 44.6 / 48.3).
DMMA_PIPELINED_TILE = DmmaTile(bm=128, bn=64, bk=16, warps_m=2, warps_n=2, stages=3, max_blocks_per_sm=2,
                               relative_speed=1.0)
# M = 2..64: 4 warps of 32x32, 16x32 or 16x16 that split K (16 rows 3.9-4.2
# TB/s, CuPy unfused 3.77-3.92; docs/linear.md, "dmma").
DMMA_M16_TILE = DmmaTile(bm=16, bn=64, bk=16, warps_m=1, warps_n=4, stages=6, max_blocks_per_sm=4, relative_speed=1.0)
DMMA_M32_TILE = DmmaTile(bm=32, bn=64, bk=16, warps_m=2, warps_n=2, stages=4, max_blocks_per_sm=4, relative_speed=1.0)
DMMA_M64_TILE = DmmaTile(bm=64, bn=64, bk=16, warps_m=2, warps_n=2, stages=4, max_blocks_per_sm=3, relative_speed=1.0)
DMMA_FEW_ROW_TILES = (DMMA_M16_TILE, DMMA_M32_TILE, DMMA_M64_TILE)  # fewest rows first


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelinedDmmaConfig(TiledConfig):
    """``linear_dmma`` on a ``DmmaTile``, K split through slots of doubles (two float32
    cells a value)."""

    kind: ClassVar[str] = "dmma_pipelined"

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        return KernelSpec("linear/dmma.cu", "linear_dmma",
                          (t.bm, t.bn, t.warps_m, t.warps_n, t.stages, t.dmma_k, kmajor), min_cc=DMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        if not (problem.tensor_ok and problem.dtype == np.float64 and dev.cc >= DMMA_MIN_CC):
            raise ValueError(f"{problem.fn}: argument 'config' asks for the pipelined float64 kernel (linear_dmma), which "
                             f"needs float64 operands with 16-byte aligned rows on compute capability 9.0, got "
                             f"{dtype_name(problem.dtype)} operands on compute capability {dev.cc}")
        if not isinstance(self.tile, DmmaTile):
            raise ValueError(f"{problem.fn}: argument 'config' expected a DmmaTile, got {self.tile}")

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor), value_cells=2)
