"""The default selection of the softmax column kernels (pure; no GPU): the reduced axis strided
over a contiguous inner axis (``SoftmaxProblem.column_layout``), from the column's length, the
column count, the dtype and the ``DeviceInfo`` to one variant (``choose_cols``), and the column
rungs ``select.instantiations`` lists (``cols_rungs``). Every entry's measurement is in
docs/softmax.md."""
from __future__ import annotations

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK, ceil_div
from ..._core.dtypes import BFLOAT16
from .cols import ColsConfig, ColsShortConfig, ColsShortShiftedConfig, ColsShortVecConfig, ColsSplitConfig, ColsVecConfig
from .problem import vector_size

# exp_once keeps at most this many exps a thread (more spilled or slowed the block rows:
# 4096 x 16384 float16, 256 x 8 vectors, 0.66 -> 0.53x copy); the rows' rungs use it too.
EXP_ONCE_MAX_ELEMENTS = 32
# The scalar column kernel: 16 slices x 32 columns = 512 threads; loads in flight a thread by
# itemsize (24-32 KB in flight an SM; more spilled).
_COLS_SLICES = 16
_COLS_UNROLL = {2: 12, 4: 8, 8: 2}
# Columns of 2048+ rows split over a cluster, so that each block's second read hits L2:
# clusters of 4 for the scalar kernel (c4 0.29 / 0.46x copy against c8 0.27 / 0.41).
_COLS_CLUSTER, _COLS_CLUSTER_MIN_LENGTH = 4, 2048
# 16-byte column vectors by itemsize: float32 8 lanes x 4 columns in clusters of 8 (0.48x
# against 0.46 scalar c4); float16 lost, float64 spills.
_COLS_VEC = {4: dict(threads=256, col_lanes=8, unroll=4)}
_COLS_VEC_CLUSTER = 8
# Columns of up to 16 elements: a thread a column in registers, 256 threads a block (one
# read; the two-read kernels' 16 slices would sit mostly idle). 6 x 3000000 axis=0: float16
# 0.39, float32 0.59 of the copy (the layout now takes the vectors below).
_COLS_SHORT = ColsShortConfig(threads=256, max_length=16)
# Where the column vectors are aligned, a thread a 16-byte vector of columns, on the smallest
# rung of rows that holds the column: (MaxLength, BlocksPerSM) by itemsize, the launch bound
# capping the registers (51, 64, 128 a thread) so that a short column keeps more threads, and
# their loads, resident; float64's exps need more (64, 128, unbounded: tighter bounds spilled).
# Not measured yet.
_COLS_SHORT_VEC_THREADS = 256
_COLS_SHORT_VEC_RUNGS = {2: ((4, 5), (8, 4), (16, 2)), 4: ((4, 5), (8, 4), (16, 2)), 8: ((4, 4), (8, 2), (16, 1))}
# Short columns off the vector of up to 8 elements, 2- and 4-byte types: a thread a vector of
# them cut from two aligned vectors, on the smallest rung of (MaxLength, BlocksPerSM) that holds
# the column, the launch bound the fewest registers that did not spill (sm_90a ptxas: 51-80);
# exps kept for 2-byte types only (float32 3 x 5000001: 0.84 of the copy not kept, 0.77 kept;
# float16 6 x 3000001 0.63 kept, 0.57 not). 9 to 16 elements, and float64: a thread a column
# (a 16-row shifted rung took ~0.6x of its rate).
_COLS_SHORT_SHIFTED_THREADS, _COLS_SHORT_SHIFTED_RUNGS = 256, ((4, 4), (8, 3))
_COLS_SHORT_SHIFTED_ITEMSIZES = (2, 4)
# The persistent column split's geometries by dtype, 128-byte rows (16384 x 4096 axis=0:
# float16 0.59, float32 0.69x copy).
_COLS_SPLIT = {
    np.dtype(np.float16): (dict(threads=256, col_lanes=8, vecs=8, register_tile=False, blocks_per_sm=2),),
    BFLOAT16:             (dict(threads=256, col_lanes=8, vecs=8, register_tile=False, blocks_per_sm=2),),
    np.dtype(np.float32): (dict(threads=256, col_lanes=8, vecs=4, register_tile=False, blocks_per_sm=3),),
}
# cp_async_wait_pending waits with up to 7 younger groups pending: at most 8 shared-memory tiles.
_COLS_SPLIT_MAX_SMEM_TILES = 8
# A wave's exchange weighs about a tile's load and store in the cost of a grid (measured:
# fewer, longer parts won).
_COLS_SPLIT_EXCHANGE_TILES = 1.0


def cols_split_config(length: int, columns: int, dtype, dev, geometry):
    """The ColsSplitConfig of one geometry (threads, col_lanes, vecs, register_tile, blocks_per_sm)
    for ``columns`` columns of ``length``, or None where a column is shorter than a tile or
    longer than the resident grid holds. Parts are whole tiles; the tiles a block takes
    minimise its work over the call: waves (the resident grid holds strips_per_wave strips of
    blocks_per_strip blocks) x (tiles a part + an exchange), ties to the larger part."""
    register_tile, blocks_per_sm = geometry["register_tile"], geometry["blocks_per_sm"]
    probe = ColsSplitConfig(**geometry, blocks_per_strip=1, strips_per_wave=1, part=0, smem_tiles=0)
    tile_rows, width = probe.tile_rows, probe.columns(dtype)
    if length < tile_rows:
        return None
    smem = min(dev.max_smem_per_block, dev.smem_per_sm // blocks_per_sm - SMEM_RESERVED_PER_BLOCK) - probe.static_smem(dtype)
    max_tiles = min(smem // probe.tile_bytes, _COLS_SPLIT_MAX_SMEM_TILES) + int(register_tile)
    resident, strips = blocks_per_sm * dev.sm_count, ceil_div(columns, width)
    best = None
    for tiles in range(1, min(max_tiles, ceil_div(length, tile_rows)) + 1):
        blocks = ceil_div(length, tiles * tile_rows)
        if blocks > resident:
            continue
        strips_per_wave = min(strips, resident // blocks)
        cost = ceil_div(strips, strips_per_wave) * (tiles + _COLS_SPLIT_EXCHANGE_TILES)
        if best is None or cost <= best[0]:
            best = (cost, tiles, blocks, strips_per_wave)
    if best is None:
        return None
    _, tiles, blocks, strips_per_wave = best
    return ColsSplitConfig(**geometry, blocks_per_strip=blocks, strips_per_wave=strips_per_wave, part=tiles * tile_rows,
                           smem_tiles=tiles - int(register_tile))


def choose_cols_split(length: int, columns: int, dtype, dev):
    """The persistent column split's config for a layout that ``cols_vectorizable``, or None
    (no geometry for the dtype, columns shorter than a tile or longer than the grid holds)."""
    for geometry in _COLS_SPLIT.get(np.dtype(dtype), ()):
        config = cols_split_config(length, columns, dtype, dev, geometry)
        if config is not None:
            return config
    return None


def cols_short_vec(length: int, dtype) -> ColsShortVecConfig:
    """The short-column vector rung that holds columns of ``length`` (at most 16), with
    exp_once where the kept exps take no more registers than the elements (float32, float64:
    an exp replaces its element) or at most EXP_ONCE_MAX_ELEMENTS a thread."""
    itemsize = np.dtype(dtype).itemsize
    max_length, blocks_per_sm = next(rung for rung in _COLS_SHORT_VEC_RUNGS[itemsize] if length <= rung[0])
    exp_once = itemsize >= 4 or max_length * vector_size(dtype) <= EXP_ONCE_MAX_ELEMENTS
    return ColsShortVecConfig(threads=_COLS_SHORT_VEC_THREADS, max_length=max_length, blocks_per_sm=blocks_per_sm,
                              exp_once=exp_once)


def cols_short_shifted(length: int, dtype):
    """The shifted short-column rung (a ColsShortShiftedConfig) that holds columns of
    ``length``, None past 8 elements and for float64."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in _COLS_SHORT_SHIFTED_ITEMSIZES or length > _COLS_SHORT_SHIFTED_RUNGS[-1][0]:
        return None
    max_length, blocks_per_sm = next(rung for rung in _COLS_SHORT_SHIFTED_RUNGS if length <= rung[0])
    return ColsShortShiftedConfig(threads=_COLS_SHORT_SHIFTED_THREADS, max_length=max_length, blocks_per_sm=blocks_per_sm,
                                  exp_once=itemsize == 2)


def choose_cols(length: int, columns: int, dtype, dev, vectorizable: bool = False):
    """Config for ``columns`` columns of ``length`` (the reduced axis strided over a
    contiguous inner axis; ``vectorizable``: what ``cols_vectorizable`` says of the layout).
    Short columns in registers: a thread a vector of them where vectorizable, else one cut from
    two aligned vectors (2- and 4-byte types, up to 8 elements), else a thread a column; the column split
    where it applies (one read); else the two-read kernels, long columns over a cluster where
    there is one, so that the second read hits L2. The split and vector two-read kernels take
    2- and 4-byte types only (their tables hold no float64)."""

    def cluster(size):
        return size if dev.max_cluster_size >= size and length >= _COLS_CLUSTER_MIN_LENGTH else 1

    if length <= _COLS_SHORT.max_length:
        if vectorizable:
            return cols_short_vec(length, dtype)
        return cols_short_shifted(length, dtype) or _COLS_SHORT
    split = choose_cols_split(length, columns, dtype, dev) if vectorizable else None
    if split is not None:
        return split
    vec = _COLS_VEC.get(np.dtype(dtype).itemsize) if vectorizable else None
    if vec is not None:
        return ColsVecConfig(**vec, cluster=cluster(_COLS_VEC_CLUSTER))
    return ColsConfig(slices=_COLS_SLICES, unroll=_COLS_UNROLL[np.dtype(dtype).itemsize],
                      cluster=cluster(_COLS_CLUSTER))


def cols_rungs(dtype, dev) -> list:
    """Every column config ``choose_cols`` can pick for ``dtype`` on ``dev``: the two-read
    kernels with and without their clusters, the split's geometries and the short-column rungs
    (the vector rungs, a thread a column, the shifted rungs of 2- and 4-byte types)."""
    dtype = np.dtype(dtype)
    rungs = []
    for length in (_COLS_SHORT.max_length + 1, 1 << 30):  # shorter columns one block, long ones a cluster where there is one
        rungs += [choose_cols(length, 1, dtype, dev, vectorizable) for vectorizable in (False, True)]
    rungs += [ColsSplitConfig(**geometry, blocks_per_strip=1, strips_per_wave=1, part=0, smem_tiles=0)
              for geometry in _COLS_SPLIT.get(dtype, ())]
    rungs += [_COLS_SHORT] + [cols_short_vec(length, dtype) for length, _ in _COLS_SHORT_VEC_RUNGS[dtype.itemsize]]
    return rungs + [c for c in (cols_short_shifted(length, dtype) for length, _ in _COLS_SHORT_SHIFTED_RUNGS) if c is not None]
