"""``linear_simt`` (kernels/linear/simt.cu): a register-tiled SIMT GEMM with any strides
and alignment, true float32 / float64 arithmetic; the fallback for operands the 16-byte-chunk
kernels cannot load."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from .launches import single_launch
from .operands import require_problem_kind
from .tiling import RASTER_GROUP, tile_count


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimtTile:
    """Block tile BM x BN x BK of the SIMT kernel; each thread owns TM x TN outputs."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


# float32 takes the 128x128 register tile once it fills every SM; float64 and the 16-bit
# fallback keep the 64x64 tile (fewer registers a thread).
SIMT_LARGE = SimtTile(bm=128, bn=128, bk=8, tm=8, tn=8)
SIMT_SMALL = SimtTile(bm=64, bn=64, bk=16, tm=4, tn=4)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimtConfig:
    """``linear_simt`` on ``tile`` (no split-K); runs any operands."""

    kind: ClassVar[str] = "simt"
    kernel: ClassVar[str] = "linear_simt"
    gated: ClassVar[bool] = False
    tile: SimtTile
    raster_group: int = RASTER_GROUP

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        return KernelSpec("linear/simt.cu", self.kernel, (ctype(dtype), t.bm, t.bn, t.bk, t.tm, t.tn, kmajor))

    def check(self, problem, dev) -> None:
        """Any operands, any device (of its function: fused_linear, or the gated form)."""
        require_problem_kind(self, problem)

    def plan(self, problem, dev):
        """Arguments ``(x, weight, bias, out, m, n, k, x strides, weight strides, bias stride,
        raster group, activation)``; gated ``(x, w_gate, w_up, out, m, n, k, x strides, w_gate
        strides, w_up strides, raster group, activation)``."""
        p, i64 = problem, np.int64
        if p.gated:
            operands, rest = ("x", "w_gate", "w_up"), (i64(p.up_k_stride), i64(p.up_n_stride))
        else:
            operands, rest = ("x", "weight"), (p.bias_scalar,)
        scalars = (i64(p.m), i64(p.n), i64(p.k), i64(p.ldx), i64(p.x_k_stride), i64(p.w_k_stride),
                   i64(p.w_n_stride)) + rest + (np.int32(self.raster_group),)
        return single_launch(p, dev, self.spec(p.dtype, p.kmajor), (tile_count(p.m, p.tile_columns, self.tile), 1, 1),
                             (self.tile.threads, 1, 1), 0, operands, ((), None), scalars)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedSimtConfig(SimtConfig):
    """``gated_linear_simt`` (fused_gated_linear's config) on ``tile``: BN / 2 output columns of
    w_gate and of w_up a block; runs any operands."""

    kind: ClassVar[str] = "gated_simt"
    kernel: ClassVar[str] = "gated_linear_simt"
    gated: ClassVar[bool] = True
