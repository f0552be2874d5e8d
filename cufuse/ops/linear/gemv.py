"""``linear_gemv`` (kernels/linear/gemv.cu): the weight streamed straight to registers
for a few rows of x, float32 / float64 FMAs (no tensor-core rounding). K-major weights need
no split; row-major float32 ones split K through float32 slots (splits x M x N cells)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..._core.dtypes import ctype, dtype_name
from ..._core.loader import KernelSpec
from .launches import single_launch, workspace
from .operands import config_error

GEMV_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
GEMV_SPLIT_ROWS = 64  # k rows a split is a multiple of: kernels/linear/gemv.cu GEMV_WARPS x GEMV_ROW_LOADS


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemvTile:
    """The weight-streaming kernel for M <= ``rows`` (a few rows of x per thread)."""

    rows: int
    threads: int = 256

    def columns_per_block(self, kmajor: bool, itemsize: int) -> int:
        """Output columns one block covers. K-major: 2 warp groups x the columns a warp keeps
        within 64 32-bit accumulator registers (1 to 8; ``gemv_kmajor_warp_cols`` of the
        kernel); row-major: 32 lanes x one 16-byte vector of columns each."""
        if kmajor:
            accum_words = 2 if itemsize == 8 else 1
            return 2 * max(1, min(8, 64 // (self.rows * accum_words)))
        return 32 * (16 // itemsize)


# float32 with M <= 4 and float64 with M = 1: past those rows the stream's FMAs limit it and
# the few-row tensor-core tiles win (docs/linear.md, "gemv").
GEMV_TILES = {np.dtype(np.float32): (GemvTile(rows=1), GemvTile(rows=4)), np.dtype(np.float64): (GemvTile(rows=1),)}
GEMV_MAX_ROWS = {dtype: tiles[-1].rows for dtype, tiles in GEMV_TILES.items()}
GEMV_MIN_SPLIT_ROWS = 256  # k rows per split at least: 8 warps x 8 rows in flight, 4 times over
# Row-major: split K until the blocks fill the SMs this often (float32 1 row 17
# splits 4.20 TB/s, 8 splits 4.12, 32 splits 4.17).
GEMV_WAVES = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemvConfig:
    """``linear_gemv`` on ``tile``; a row-major weight splits K ``splits`` ways (float32
    only: the split sums meet in a float32 workspace), a K-major one never."""

    kind: ClassVar[str] = "gemv"
    tile: GemvTile
    splits: int = 1

    def spec(self, dtype, kmajor: bool) -> KernelSpec:
        return KernelSpec("linear/gemv.cu", "linear_gemv", (ctype(dtype), self.tile.rows, kmajor))

    def check(self, problem, dev) -> None:
        if problem.dtype not in GEMV_DTYPES:
            raise config_error(problem, self.kind, f"takes float32 or float64 operands, got {dtype_name(problem.dtype)}")
        if not problem.tensor_ok:
            raise config_error(problem, self.kind, "needs 16-byte aligned rows on compute capability 8.0 or later")
        if problem.itemsize == 8 and not problem.kmajor and self.splits > 1:
            raise ValueError(f"{problem.fn}: argument 'config' expected splits=1 for the float64 gemv kernel on a row-major "
                             f"weight (its split sums would meet in float32), got {self.splits}")
        if problem.m > self.tile.rows:
            raise ValueError(f"{problem.fn}: argument 'config' expected a gemv tile of at least M = {problem.m} rows, "
                             f"got {self.tile.rows}")

    def plan(self, problem, dev):
        """K = 0: one block, bias and activation only. Splits are whole runs of 64 k rows, so that a
        warp's x vectors never straddle two splits."""
        p = problem
        col_blocks = math.ceil(p.n / self.tile.columns_per_block(p.kmajor, p.itemsize))
        splits = 1 if p.kmajor else max(1, min(self.splits, p.k))
        k_rows_per_split = math.ceil(max(1, math.ceil(p.k / splits)) / GEMV_SPLIT_ROWS) * GEMV_SPLIT_ROWS
        splits = max(1, math.ceil(p.k / k_rows_per_split))
        i64 = np.int64
        scalars = (i64(p.m), i64(p.n), i64(p.k), i64(p.ldx), i64(p.ldw), p.bias_scalar, i64(k_rows_per_split))
        return single_launch(p, dev, self.spec(p.dtype, p.kmajor), (col_blocks, splits, 1), (self.tile.threads, 1, 1),
                             0, ("x", "weight"), workspace(splits, splits * p.m * p.n, col_blocks), scalars)
