"""Tile and split-K arithmetic shared by the linear variants and their selection (pure).

A tile is anything with ``bm``, ``bn`` (output rows and columns a block covers), ``bk`` (k a
pipeline stage), ``stages`` and ``blocks_per_sm(dev)``.
"""
from __future__ import annotations

import dataclasses
import math

RASTER_GROUP = 8  # tile rows walked together so that neighbouring blocks share L2 lines
MAX_SPLITS = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class TiledConfig:
    """The fields of a tiled kernel's variant: its ``tile``, K split ``splits`` ways (1: no
    workspace), ``raster_group`` tile rows walked together. Subclasses add the kernel
    (``spec``), its rule (``check``) and its launch (``plan``)."""

    tile: object
    splits: int = 1
    raster_group: int = RASTER_GROUP


def tile_count(m: int, n: int, tile) -> int:
    return math.ceil(m / tile.bm) * math.ceil(n / tile.bn)


def wave_efficiency(blocks: int, slots: int) -> float:
    """Fraction of the machine's block slots doing work, over all waves (last wave's fill)."""
    if blocks <= 0:
        return 0.0
    waves = math.ceil(blocks / slots)
    return blocks / (waves * slots)


def gemm_score(m: int, n: int, tile, blocks_per_sm: int, dev) -> float:
    """Estimated throughput of ``tile`` on an M x N output: tile speed x last-wave fill x the
    fraction of the tiles' area inside the matrix."""
    tiles = tile_count(m, n, tile)
    area = m * n / (tiles * tile.bm * tile.bn)
    return tile.relative_speed * wave_efficiency(tiles, dev.sm_count * blocks_per_sm) * area


def effective_splits(k_tiles: int, splits: int) -> int:
    """The split count after rounding k tiles per split up: no split is left empty."""
    return math.ceil(k_tiles / math.ceil(k_tiles / splits))


def choose_k_splits(m: int, n: int, k: int, tile, dev) -> int:
    """Split-K count with the least estimated time: waves of blocks over the SMs' block
    slots x (k tiles per split + the pipeline fill and the split's reduction, about
    ``tile.stages + 1`` k tiles). Ties go to fewer splits; no split is left empty."""
    slots = dev.sm_count * tile.blocks_per_sm(dev)
    tiles = tile_count(m, n, tile)
    k_tiles = max(1, math.ceil(k / tile.bk))

    def cost(splits: int) -> int:
        per_split = math.ceil(k_tiles / splits)
        overhead = tile.stages + 1 if splits > 1 else 0
        return math.ceil(tiles * splits / slots) * (per_split + overhead)

    candidates = {effective_splits(k_tiles, s) for s in range(1, min(MAX_SPLITS, k_tiles) + 1)}
    return min(sorted(candidates), key=cost)


def tma_time(m: int, n: int, k: int, tile, splits: int, dev) -> float:
    """Predicted microseconds of the TMA GEMM (``tile.cost`` = (a k tile, a wave, a split-K
    launch, each split)) on an M x N output (the gated kernel: its 2N columns): waves of
    blocks over the block slots x (k tiles a split x the k-tile cost + the wave cost), plus
    the split terms where K is split. Median error 4-7 % over the sweep it was fitted to."""
    per_k_tile, per_wave, split_launch, per_split = tile.cost
    k_tiles = max(1, math.ceil(k / tile.bk))
    splits = effective_splits(k_tiles, splits)
    waves = math.ceil(tile_count(m, n, tile) * splits / (dev.sm_count * tile.blocks_per_sm(dev)))
    split_cost = split_launch + per_split * splits if splits > 1 else 0.0
    return waves * (math.ceil(k_tiles / splits) * per_k_tile + per_wave) + split_cost


def stream_splits(m: int, n: int, k: int, tile, dev) -> int:
    """Split-K count for the weight-streaming tiles (the mma stream tile, the swapped
    kernel): the fewest splits whose blocks cover 90 % of the SMs once. The time is the
    weight's bytes over the SMs that stream them; more blocks than SMs add only reduction
    traffic (docs/linear.md)."""
    tiles = tile_count(m, n, tile)
    k_tiles = max(1, math.ceil(k / tile.bk))
    wanted = math.ceil(0.9 * dev.sm_count / tiles)
    return effective_splits(k_tiles, max(1, min(wanted, MAX_SPLITS, k_tiles)))
