"""The ping-pong GEMM kernels (sm_90a), float16 / bfloat16: ``linear_pingpong_tma`` and
``gated_linear_pingpong_tma`` (kernels/linear/pingpong_tma.cu). A persistent block of two
consumer warpgroups and a producer warpgroup walks its tiles through one TMA ring, the
warpgroups taking tiles in turn, so each tile's epilogue runs under the other warpgroup's main
loop. Operands, tensor maps and arguments are the cooperative TMA kernel's (``wgmma.py``); the
tiles are never split."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK
from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from .launches import tiled_plan
from .operands import config_error, require_16bit_tensor_operands, require_problem_kind
from .tiling import TiledConfig, tile_count
from .wgmma import WGMMA_MIN_CC, WGMMA_STATIC_SMEM, require_hopper, require_tensor_maps


@dataclasses.dataclass(frozen=True, kw_only=True)
class PingPongTile:
    """A consumer warpgroup's tile of ``linear_pingpong_tma``: ``bm`` rows (64 or 128: one or
    two wgmma slices) x ``bn`` columns (bm x bn = 16384, 128 accumulators a thread), ``bk`` k a
    stage, a ``stages``-deep ring, ``pending`` wgmma groups in flight. ``cost``: (a k tile,
    a block's fill and last epilogue) in microseconds, the model of ``pingpong_time``."""

    bm: int = 128
    bn: int = 128
    bk: int = 64
    stages: int = 6
    pending: int = 1
    cost: tuple = (0.0, 0.0)
    threads: ClassVar[int] = 384  # two consumer warpgroups, one producer warpgroup

    def smem_bytes(self, itemsize: int = 2) -> int:
        """The stages, 1 KB to align them for the 128-byte swizzle, 2 x ``stages`` mbarriers."""
        return self.stages * (self.bm + self.bn) * self.bk * itemsize + 1024 + 2 * 8 * self.stages

    def blocks_per_sm(self, dev) -> int:
        return 1 if self.smem_bytes() + SMEM_RESERVED_PER_BLOCK + WGMMA_STATIC_SMEM <= dev.smem_per_sm else 0


# Predicted costs, not yet measured: a k tile at the cooperative 128x256 tile's rate (0.69 us
# for twice the work) plus 4 % for the weight re-read a 128-column tile costs in L2, and one
# fill and one unhidden epilogue a block (docs/linear.md, "Ping-pong"). Other tiles (64x256,
# other depths) run through config= (experiments/linear/sweep_linear.py).
PINGPONG_128x128 = PingPongTile(bm=128, bn=128, stages=6, cost=(0.36, 8.0))
PINGPONG_TILES = (PINGPONG_128x128,)
PINGPONG_SHAPES = ((128, 128), (64, 256))  # a warpgroup's rows x columns the kernel takes


def pingpong_tiles_fill(m: int, columns: int, tile, dev) -> bool:
    """Whether every consumer warpgroup of a full persistent grid has a tile (at least two
    tiles a block): below that the second warpgroup idles and nothing hides an epilogue."""
    return tile_count(m, columns, tile) >= 2 * dev.sm_count


def pingpong_time(m: int, columns: int, k: int, tile, dev) -> float:
    """Predicted microseconds of the ping-pong GEMM on an M x ``columns`` output (the gated
    kernel: 2N): the busiest block's tiles one after another (``tile.cost`` a k tile), plus one
    fill and one epilogue (the last tile's, which nothing hides)."""
    per_k_tile, per_block = tile.cost
    tiles_per_block = math.ceil(tile_count(m, columns, tile) / dev.sm_count)
    return tiles_per_block * max(1, math.ceil(k / tile.bk)) * per_k_tile + per_block


@dataclasses.dataclass(frozen=True, kw_only=True)
class PingPongConfig(TiledConfig):
    """``linear_pingpong_tma`` on a ``PingPongTile``: a persistent grid of min(tiles, SMs)
    blocks, never split; x and the weight passed as tensor maps (``operands.operand_maps``)."""

    kind: ClassVar[str] = "pingpong_tma"
    kernel: ClassVar[str] = "linear_pingpong_tma"
    gated: ClassVar[bool] = False

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        t = self.tile
        return KernelSpec("linear/pingpong_tma.cu", self.kernel,
                          (ctype(dtype), t.bm, t.bn, t.bk, t.stages, t.pending, kmajor), min_cc=WGMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        require_16bit_tensor_operands(self.kind, problem)
        require_problem_kind(self, problem)
        require_hopper(self.kind, problem, dev)
        require_tensor_maps(self.kind, problem)
        t = self.tile
        if (t.bm, t.bn) not in PINGPONG_SHAPES or t.bk not in (64, 128) or not 0 <= t.pending < t.stages:
            raise config_error(problem, self.kind, f"takes warpgroup tiles of 128x128 or 64x256, k 64 or 128 a "
                                                   f"stage and 0 <= pending < stages, got {t.bm}x{t.bn}, k {t.bk}, "
                                                   f"pending {t.pending}, stages {t.stages}")
        if self.splits != 1:
            raise config_error(problem, self.kind, f"never splits K (splits=1), got splits={self.splits}")

    def plan(self, problem, dev):
        return tiled_plan(self, problem, dev, self.spec(problem.dtype, problem.kmajor), tma_x_rows=self.tile.bm,
                          flags=(np.int32(problem.paired_store),), persistent_blocks=dev.sm_count)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedPingPongConfig(PingPongConfig):
    """``gated_linear_pingpong_tma`` (fused_gated_linear's config) on a ``PingPongTile``: the
    tile's ``bn`` columns are bn / 2 output columns of w_gate and of w_up (one wgmma chain over
    both)."""

    kind: ClassVar[str] = "gated_pingpong_tma"
    kernel: ClassVar[str] = "gated_linear_pingpong_tma"
    gated: ClassVar[bool] = True
