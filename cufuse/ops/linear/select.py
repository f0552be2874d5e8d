"""The default kernel configuration of a linear problem (pure: shape, dtype, operand layout
and device facts in, a variant out), and every kernel it can reach on a device.

The rules, by dtype (the measurements behind each are in docs/linear.md):

* float32 / float64 with ``mma_eligible`` operands (compute capability 8.0+): the weight
  stream (gemv) for float32 M <= 4 and float64 M = 1; else the tensor cores (3xTF32; float64
  DMMA, pipelined on 9.0) on tiles of 16-64 rows up to 64 rows, 128 rows beyond, K split
  where the tiles leave SMs idle. Other operands: SIMT.
* float16 / bfloat16, operands not ``mma_eligible``: SIMT.
* float16 / bfloat16 on compute capability 9.0 with tensor maps: M <= 64 the swapped TMA
  stream; beyond, the TMA GEMM with the least predicted time (``choose_tma_config``): the
  cooperative kernel on a tile and split count (``tiling.tma_time``), or the ping-pong kernel
  where its tiles give every block two (``pingpong.pingpong_time``). Without tensor maps
  (cp.async wgmma): M = 17..64, or M > 64 with fewer 128x256 tiles than SMs, the best wgmma tile
  (``choose_wgmma_config``); M > 64 otherwise, where the 128x256 tile scores above the mma
  tiles, the best-scoring one-block wgmma tile, 128x256 / 128x128 / 64x256
  (``choose_wave_tile``: a last wave the large tile leaves mostly idle takes a smaller one).
* float16 / bfloat16 elsewhere (and the 9.0 cases not above): mma.sync: M <= 16 the stream
  tile, M = 17..64 the 64x64 one, beyond the best-scoring GEMM tile, split K where the tiles
  leave block slots idle.

The gated form (``choose`` on a ``GatedProblem``), on its 2N columns of gate and up: on compute
capability 9.0 with tensor maps over x and both weights, M <= 64 the gated swapped stream
(``gated_linear_swap_tma``, x padded as the linear stream pads it), beyond
``gated_linear_wgmma_tma`` on the 128x256 / 128x128 / 64x256 tile and split, or
``gated_linear_pingpong_tma``, with the least predicted time over 2N columns
(``choose_tma_config``, the linear models). Other 16-bit weights of one layout the tensor
cores can load run ``gated_linear_mma`` (every device): the stream tiles for M <= 16 and
M <= 64, the 64x128 tile beyond (the 128-row tiles hold two accumulator sets in 255 registers
and spill with a row-major weight), K split where the tiles leave SMs idle; everything else
``gated_linear_simt``'s 64x64 tile.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import BFLOAT16
from .dmma import DMMA_FEW_ROW_TILES, DMMA_MIN_CC, DMMA_PIPELINED_TILE, PipelinedDmmaConfig
from .gemv import GEMV_MAX_ROWS, GEMV_MIN_SPLIT_ROWS, GEMV_TILES, GEMV_WAVES, GemvConfig
from .mma import GEMM_TILES, MEDIUM_TILE, SMALL_TILE, STREAM64_TILE, STREAM_TILE, GatedMmaConfig, MmaConfig
from .operands import MMA_MIN_CC, SMALL_M, GatedProblem
from .pingpong import PINGPONG_TILES, GatedPingPongConfig, PingPongConfig, pingpong_tiles_fill, pingpong_time
from .simt import SIMT_LARGE, SIMT_SMALL, GatedSimtConfig, SimtConfig
from .swap_tma import GATED_SWAP_DEFAULT_TILES, SWAP_DEFAULT_TILES, SWAP_MAX_M, GatedSwapConfig, SwapConfig, \
    swap_padding
from .tiling import MAX_SPLITS, choose_k_splits, effective_splits, gemm_score, stream_splits, tile_count, tma_time
from .wgmma import GATED_TMA_TILES, TMA_TILES, WGMMA_STREAM_TILE, WGMMA_TILE, WGMMA_TILES, GatedTmaConfig, TmaConfig, \
    WgmmaConfig
from .wide import DMMA_TILE, TF32_FEW_ROW_TILES, TF32_TILE, DmmaConfig, Tf32x3Config

# What ``config=`` takes: every variant class of the op.
VARIANTS = (MmaConfig, WgmmaConfig, TmaConfig, PingPongConfig, SwapConfig, GemvConfig, Tf32x3Config, DmmaConfig,
            PipelinedDmmaConfig, SimtConfig)
# What fused_gated_linear's ``config=`` takes.
GATED_VARIANTS = (GatedTmaConfig, GatedPingPongConfig, GatedSwapConfig, GatedMmaConfig, GatedSimtConfig)

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def choose(problem, dev):
    """The default variant for ``problem`` on ``dev``: a gated variant over the 2N columns of an
    ``operands.GatedProblem``, else a plain one for an ``operands.LinearProblem``."""
    p = problem
    if isinstance(p, GatedProblem):
        return _choose_gated(p.m, p.tile_columns, p.k, p.dtype, p.tensor_ok and p.itemsize == 2, p.tma_ok, dev)
    return _choose(p.m, p.n, p.k, p.dtype, p.tensor_ok, dev, p.kmajor, p.tma_ok)


@functools.lru_cache(maxsize=1024)
def _choose(m: int, n: int, k: int, dtype, tensor_ok: bool, dev, kmajor: bool, tma_ok: bool):
    if np.dtype(dtype).itemsize >= 4:
        if tensor_ok and m <= GEMV_MAX_ROWS[np.dtype(dtype)]:
            return choose_gemv_config(m, n, k, dtype, kmajor, dev)
        return choose_wide_config(m, n, k, dtype, tensor_ok, dev)
    if not tensor_ok:
        return SimtConfig(tile=choose_simt_tile(m, n, dtype, dev))
    if tma_ok:  # compute capability 9.0 only
        if m <= SWAP_MAX_M:
            return choose_swap_config(m, n, k, dev)
        return choose_tma_config(m, n, k, dev, TMA_TILES, TmaConfig, PingPongConfig)
    if m > STREAM_TILE.bm and dev.has_wgmma and (m <= SMALL_M or tile_count(m, n, WGMMA_TILE) < dev.sm_count):
        return choose_wgmma_config(m, n, k, dev)
    if m <= STREAM_TILE.bm:
        return MmaConfig(tile=STREAM_TILE, splits=stream_splits(m, n, k, STREAM_TILE, dev))
    if m <= SMALL_M:
        return MmaConfig(tile=STREAM64_TILE, splits=choose_k_splits(m, n, k, STREAM64_TILE, dev))
    if prefers_wgmma(m, n, dev):
        return WgmmaConfig(tile=choose_wave_tile(m, n, dev))
    tile = choose_gemm_tile(m, n, dev)
    if not kmajor and tile_count(m, n, MEDIUM_TILE) < dev.sm_count * MEDIUM_TILE.blocks_per_sm(dev):
        # A row-major weight and at most one wave of 128x128 tiles: split K.
        return MmaConfig(tile=MEDIUM_TILE, splits=choose_k_splits(m, n, k, MEDIUM_TILE, dev))
    if tile_count(m, n, tile) < dev.sm_count * tile.blocks_per_sm(dev):
        # Fewer tiles than block slots: split K too (the workspace then stays below slots x
        # tile area floats, 17 MB on the H200).
        return MmaConfig(tile=tile, splits=choose_k_splits(m, n, k, tile, dev))
    return MmaConfig(tile=tile)


@functools.lru_cache(maxsize=1024)
def _choose_gated(m: int, columns: int, k: int, dtype, tensor_ok: bool, tma_ok: bool, dev):
    if not tensor_ok:  # the 64x64 tile: two float32 accumulator sets of 128x128 spill on sm_80
        return GatedSimtConfig(tile=SIMT_SMALL)
    if tma_ok:  # compute capability 9.0 only
        if m <= SWAP_MAX_M:
            return choose_gated_swap_config(m, columns, k, dev)
        return choose_tma_config(m, columns, k, dev, GATED_TMA_TILES, GatedTmaConfig, GatedPingPongConfig)
    if m <= STREAM_TILE.bm:
        return GatedMmaConfig(tile=STREAM_TILE, splits=stream_splits(m, columns, k, STREAM_TILE, dev))
    tile = STREAM64_TILE if m <= SMALL_M else SMALL_TILE
    if tile_count(m, columns, tile) < dev.sm_count * tile.blocks_per_sm(dev):
        return GatedMmaConfig(tile=tile, splits=choose_k_splits(m, columns, k, tile, dev))
    return GatedMmaConfig(tile=tile)


def choose_tma_config(m: int, columns: int, k: int, dev, tiles, make, make_pingpong):
    """The TMA GEMM with the least predicted time: the cooperative kernel (``make``: TmaConfig,
    or GatedTmaConfig over 2N ``columns``) on a tile and split count of ``tiles``
    (``tiling.tma_time``), or the ping-pong kernel (``make_pingpong``) on a tile of
    ``PINGPONG_TILES`` that gives every consumer warpgroup a tile (``pingpong.pingpong_time``);
    ties go to the cooperative kernel, the earlier tile and the fewer splits. Over the
    cooperative model's sweep (M 65-2048, seven projections, both kernels) it picks configs at
    0.978 / 0.988 of the fastest measured (geometric mean; the same fitted on six projections
    and tested on the seventh), where the wave-fill scores picked at 0.925 / 0.958."""
    k_tiles = max(1, math.ceil(k / 64))
    splits = sorted({effective_splits(k_tiles, s) for s in range(1, min(MAX_SPLITS, k_tiles) + 1)})
    timed = [(tma_time(m, columns, k, t, s, dev), make(tile=t, splits=s)) for t in tiles for s in splits]
    timed += [(pingpong_time(m, columns, k, t, dev), make_pingpong(tile=t)) for t in PINGPONG_TILES
              if pingpong_tiles_fill(m, columns, t, dev)]
    return min(timed, key=lambda c: c[0])[1]


def choose_gemv_config(m: int, n: int, k: int, dtype, kmajor: bool, dev) -> GemvConfig:
    """The weight stream with the fewest rows that cover M. A row-major float32 weight splits
    K until the blocks fill the SMs GEMV_WAVES times (float64's split sums would meet in
    float32); a K-major one has a block per few columns and needs none."""
    dtype = np.dtype(dtype)
    tile = next(t for t in GEMV_TILES[dtype] if t.rows >= m)
    if kmajor or dtype.itemsize == 8:
        return GemvConfig(tile=tile)
    col_blocks = ceil_div(n, tile.columns_per_block(False, dtype.itemsize))
    splits = max(1, min(ceil_div(GEMV_WAVES * dev.sm_count, col_blocks), k // GEMV_MIN_SPLIT_ROWS))
    return GemvConfig(tile=tile, splits=splits)


def choose_wide_config(m: int, n: int, k: int, dtype, tensor_ok: bool, dev):
    """float32 / float64: the tensor cores where they can load the operands (3xTF32; DMMA,
    ``linear_dmma`` on 9.0), else SIMT. The fewest-row tile that holds M (float64: on 9.0
    only), else the 128-row tile; K split where the tiles leave SMs idle."""
    if not tensor_ok:
        return SimtConfig(tile=choose_simt_tile(m, n, dtype, dev))
    if np.dtype(dtype) == F32:
        make, tile, few_rows = Tf32x3Config, TF32_TILE, TF32_FEW_ROW_TILES
    elif dev.cc >= DMMA_MIN_CC:
        make, tile, few_rows = PipelinedDmmaConfig, DMMA_PIPELINED_TILE, DMMA_FEW_ROW_TILES
    else:
        make, tile, few_rows = DmmaConfig, DMMA_TILE, ()
    tile = next((t for t in few_rows if t.bm >= m), tile)
    return make(tile=tile, splits=choose_k_splits(m, n, k, tile, dev))


def choose_simt_tile(m: int, n: int, dtype, dev):
    """float32 takes the 128x128 register tile once it fills every SM; float64 and the
    16-bit fallback keep the 64x64 tile (fewer registers per thread)."""
    if np.dtype(dtype) == F32 and tile_count(m, n, SIMT_LARGE) >= dev.sm_count:
        return SIMT_LARGE
    return SIMT_SMALL


def choose_gemm_tile(m: int, n: int, dev):
    """The mma GEMM tile for M > 64 with the best ``gemm_score``."""
    return max(GEMM_TILES, key=lambda tile: gemm_score(m, n, tile, tile.blocks_per_sm(dev), dev))


def prefers_wgmma(m: int, n: int, dev) -> bool:
    """The wgmma tiles when the 128x256 tiles fill every SM at least once and it scores above
    the best mma tile (fewer tiles: ``choose_wgmma_config``)."""
    if not dev.has_wgmma or tile_count(m, n, WGMMA_TILE) < dev.sm_count:
        return False
    mma_tile = choose_gemm_tile(m, n, dev)
    return gemm_score(m, n, WGMMA_TILE, 1, dev) >= gemm_score(m, n, mma_tile, mma_tile.blocks_per_sm(dev), dev)


def choose_wave_tile(m: int, n: int, dev):
    """Where the 128x256 tiles fill the SMs: the one-block-an-SM wgmma tile (128x256, 128x128,
    64x256) with the best ``gemm_score``, so that a last wave left mostly idle by the large tile
    takes the smaller one (docs/linear.md: 512 x 4096 x 11008 0.60x -> 0.70x
    cuBLASLt; geometric mean of the 30 shapes it covers +2 %)."""
    tiles = [t for t in WGMMA_TILES if t.max_blocks_per_sm == 1]
    return max(tiles, key=lambda t: gemm_score(m, n, t, 1, dev))


def choose_wgmma_config(m: int, n: int, k: int, dev) -> WgmmaConfig:
    """The wgmma tile and split-K for M = 17..64 (the stream tile) and for fewer 128x256 tiles
    than SMs (the best ``gemm_score``); K split where the tiles leave block slots idle."""
    if m <= SMALL_M:
        tile = WGMMA_STREAM_TILE
    else:
        tile = max(WGMMA_TILES, key=lambda t: gemm_score(m, n, t, t.blocks_per_sm(dev), dev))
    if tile_count(m, n, tile) >= dev.sm_count * tile.blocks_per_sm(dev):
        return WgmmaConfig(tile=tile)
    return WgmmaConfig(tile=tile, splits=choose_k_splits(m, n, k, tile, dev))


def choose_swap_config(m: int, n: int, k: int, dev) -> SwapConfig:
    """The swapped stream with x padded to 8, 16 or 64 rows, split-K by ``stream_splits``
    (one block an SM at most: split 1 3.58 / 3.51 TB/s, split 2 3.12-3.40)."""
    tile = SWAP_DEFAULT_TILES[swap_padding(m)]
    return SwapConfig(tile=tile, splits=stream_splits(m, n, k, tile, dev))


def choose_gated_swap_config(m: int, columns: int, k: int, dev) -> GatedSwapConfig:
    """The gated stream (``columns``: 2N) with x padded as ``choose_swap_config`` pads it."""
    tile = GATED_SWAP_DEFAULT_TILES[swap_padding(m)]
    return GatedSwapConfig(tile=tile, splits=stream_splits(m, columns, k, tile, dev))


def reachable_configs(dev) -> list:
    """(variant, dtypes) of every configuration the default selection can reach on ``dev``,
    split counts aside (runtime arguments, not compiled)."""
    half, f32, f64 = (np.dtype(np.float16), BFLOAT16), (F32,), (F64,)
    reached = [(SimtConfig(tile=SIMT_SMALL), half + f32 + f64), (SimtConfig(tile=SIMT_LARGE), f32)]
    if dev.cc < MMA_MIN_CC:
        return reached
    reached += [(GemvConfig(tile=t), f32) for t in GEMV_TILES[F32]]
    reached += [(GemvConfig(tile=t), f64) for t in GEMV_TILES[F64]]
    reached += [(Tf32x3Config(tile=t), f32) for t in (TF32_TILE,) + TF32_FEW_ROW_TILES]
    if dev.cc >= DMMA_MIN_CC:
        reached += [(PipelinedDmmaConfig(tile=t), f64) for t in (DMMA_PIPELINED_TILE,) + DMMA_FEW_ROW_TILES]
    else:
        reached.append((DmmaConfig(tile=DMMA_TILE), f64))
    if dev.has_wgmma:
        # The mma kernel keeps M <= 16 without tensor maps and the M > 64 shapes where the
        # 128x128 / 64x128 tiles outscore wgmma's 128x256; its 128x256 tile never does (the
        # wgmma one has the same shape and a higher speed), its 64x64 stream tile is wgmma's.
        reached += [(MmaConfig(tile=t), half) for t in (MEDIUM_TILE, SMALL_TILE, STREAM_TILE)]
        reached += [(WgmmaConfig(tile=t), half) for t in WGMMA_TILES]
        reached += [(TmaConfig(tile=t), half) for t in TMA_TILES]
        reached += [(PingPongConfig(tile=t), half) for t in PINGPONG_TILES]
        reached += [(SwapConfig(tile=t), half) for t in SWAP_DEFAULT_TILES.values()]
    else:
        reached += [(MmaConfig(tile=t), half) for t in GEMM_TILES + (STREAM_TILE, STREAM64_TILE)]
    return reached


def reachable_gated_configs(dev) -> list:
    """(variant, dtypes) of every gated configuration ``choose`` can reach on ``dev``."""
    half, every = (np.dtype(np.float16), BFLOAT16), (np.dtype(np.float16), BFLOAT16, F32, F64)
    reached = [(GatedSimtConfig(tile=SIMT_SMALL), every)]
    if dev.cc >= MMA_MIN_CC:
        reached += [(GatedMmaConfig(tile=t), half) for t in (SMALL_TILE, STREAM_TILE, STREAM64_TILE)]
    if dev.has_wgmma:
        reached += [(GatedTmaConfig(tile=t), half) for t in GATED_TMA_TILES]
        reached += [(GatedPingPongConfig(tile=t), half) for t in PINGPONG_TILES]
        reached += [(GatedSwapConfig(tile=t), half) for t in GATED_SWAP_DEFAULT_TILES.values()]
    return reached


def instantiations(dev) -> list:
    """Every kernel instantiation the default selections can reach on ``dev`` (both weight
    layouts of every reachable configuration, gated ones included)."""
    return [config.spec(dtype, kmajor) for config, dtypes in reachable_configs(dev) + reachable_gated_configs(dev)
            for dtype in dtypes for kmajor in (True, False)]
