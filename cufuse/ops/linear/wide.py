"""``linear_wide`` (kernels/linear/wide.cu): float32 on tensor cores at float32 accuracy
(3xTF32) and float64 on DMMA (compute capability 8.x; 9.0 runs float64 on ``dmma``), for
operands ``mma_eligible``; split-K through slots of accumulators."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..._core.dtypes import ctype, dtype_name
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .mma import GemmTile
from .operands import MMA_MIN_CC, config_error
from .tiling import TiledConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class WideTile(GemmTile):
    """Block tile of ``linear_wide`` (float32 3xTF32 when ``itemsize`` is 4, float64
    DMMA when 8). Rows are padded in shared memory (x and a K-major weight by 4 elements, a
    row-major weight by 32 bytes: no bank conflicts); both weight layouts get the larger of
    the two sizes."""

    itemsize: int = 4

    def smem_bytes(self, itemsize: int | None = None) -> int:
        """Dynamic shared memory for elements of ``itemsize`` bytes (default: the tile's)."""
        itemsize = itemsize or self.itemsize
        a = self.bm * (self.bk + 4)
        b = max(self.bn * (self.bk + 4), self.bk * (self.bn + 32 // itemsize))
        return self.stages * (a + b) * itemsize


# float32: 8 warps of 64x32 (64 accumulators plus 64 for the per-stage partial sum, 200-254
# registers), one block an SM (61.6 TFLOP/s at 4096^3, CuPy unfused 48.4).
TF32_TILE = WideTile(bm=128, bn=128, bk=32, warps_m=2, warps_n=4, stages=4, max_blocks_per_sm=1, relative_speed=1.0)
# float32 with M = 5..64: tiles that hold the rows without padding past 16 / 32 / 64 and split
# K to fill the SMs (16 rows 3.37 TB/s against the 128-row tile's 0.51).
TF32_M16_TILE = WideTile(bm=16, bn=128, bk=32, warps_m=1, warps_n=4, stages=4, max_blocks_per_sm=4, relative_speed=1.0)
TF32_M32_TILE = WideTile(bm=32, bn=128, bk=32, warps_m=1, warps_n=4, stages=4, max_blocks_per_sm=3, relative_speed=1.0)
TF32_M64_TILE = WideTile(bm=64, bn=128, bk=32, warps_m=1, warps_n=4, stages=4, max_blocks_per_sm=2, relative_speed=1.0)
TF32_FEW_ROW_TILES = (TF32_M16_TILE, TF32_M32_TILE, TF32_M64_TILE)  # fewest rows first
# float64 on compute capability 8.x: 8 warps of 32x64 (64 double accumulators).
DMMA_TILE = WideTile(bm=128, bn=128, bk=16, warps_m=4, warps_n=2, stages=3, max_blocks_per_sm=1, relative_speed=1.0,
                     itemsize=8)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _WideConfig(TiledConfig):
    """``linear_wide`` on a ``WideTile`` of the config's dtype, K split through slots
    (float64 slots take two float32 cells a value)."""

    kind: ClassVar[str]
    dtype: ClassVar[np.dtype]

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        args = (ctype(dtype), t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, kmajor)
        return KernelSpec("linear/wide.cu", "linear_wide", args, min_cc=MMA_MIN_CC)

    def check(self, problem, dev) -> None:
        if not (problem.tensor_ok and problem.dtype == self.dtype):
            came = (f"{dtype_name(problem.dtype)} operands" if problem.dtype != self.dtype
                    else f"rows or a device (compute capability {dev.cc}) that do not qualify")
            raise config_error(problem, self.kind, f"needs {dtype_name(self.dtype)} operands with 16-byte aligned rows on "
                                          f"compute capability 8.0 or later, got {came}")
        if type(self.tile) is not WideTile or self.tile.itemsize != self.dtype.itemsize:
            raise ValueError(f"{problem.fn}: argument 'config' expected a {self.kind} config on a {dtype_name(self.dtype)} "
                             f"WideTile (itemsize {self.dtype.itemsize}), got {self.tile}")

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor),
                          value_cells=self.dtype.itemsize // 4)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tf32x3Config(_WideConfig):
    """float32 at float32 accuracy: each operand split into two tf32 parts, three mma.sync
    m16n8k8 per product (finite inputs only: an infinite operand gives NaN where NumPy gives
    +-inf)."""

    kind: ClassVar[str] = "tf32x3"
    dtype: ClassVar[np.dtype] = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DmmaConfig(_WideConfig):
    """float64 on mma.sync f64 (m8n8k4 on sm_80, m16n8k16 on sm_90; IEEE fused multiply-adds)."""

    kind: ClassVar[str] = "dmma"
    dtype: ClassVar[np.dtype] = np.dtype(np.float64)
