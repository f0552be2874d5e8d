"""The default selection of the softmax kernels (pure; no GPU): from the collapsed problem
and the ``DeviceInfo`` to one variant, and ``instantiations(dev)``, every kernel it can pick.

Rows (the reduced axis contiguous, or it and the inner axis both strided), capacities in
16-byte vectors (``VS = 16 // itemsize`` elements), the first rung that holds the row wins
(contiguous rows that may start off a vector boundary count from the boundary below on the
register and one-block stashed rungs: ``SoftmaxProblem.max_row_misalignment`` elements more):

    vectors per row   kernel                                     config
    dense rows of up to 256 elements, the length not whole vectors:
                      softmax_rows_span, Group lanes a row        SpanRowsConfig(256, Group, 6 / 8 / 12)
    1 .. 32           softmax_rows, Group lanes per row          RowsConfig(256, Group, Vecs)
    33 .. 256         softmax_rows, one warp per row             RowsConfig(128, 32, 2 / 3 / 4 / 5 / 6 / 8)
                      (2-byte types: 33 .. 112 8 or 16 lanes a row RowsConfig(128, 8 / 16, 4 .. 7), then
                                                                  RowsConfig(128, 32, 4 / 5 / 6 / 8))
    257 .. 4096       softmax_block_rows, one block per row      RowsConfig(t, t, v) (block_rows: v 8 / 6 / 5,
                                                                  t <= 512 threads: most rows resident, then the
                                                                  row filling the block; one row an SM: stashed)
    4097 .. 16384     2- and 4-byte types: softmax_rows_stashed  StashedRowsConfig(t, 4, s, 2 / 1) (stashed_rows:
                                                                  the fewest tiles s, t sized to the row)
    4097 .. 16384     float64 (sm_90): softmax_rows_cluster      ClusterConfig(512, 4, 4 / 8)
    49152 .. 65536    float32 (sm_90): softmax_rows_stashed_cluster  StashedRowsConfig(256, 8, 3, 2, 8)
    beyond            softmax_rows_split, persistent             SplitConfig (choose_rows_split)

The stashed rows take two blocks an SM where their shared memory fits, else one, and none
where one block's does not fit (the A100 holds fewer tiles: it takes the split kernel
beyond); the clusters need sm_90. Columns (the reduced
axis strided over a contiguous inner axis): ``choose_cols``; columns of up to 16 elements
``softmax_cols_short_vec`` (a thread a 16-byte vector of columns, rungs of 4, 8, 16 rows)
where the column vectors are aligned, else ``softmax_cols_short_shifted`` (2- and 4-byte types,
up to 8 elements: the vectors cut from aligned ones) or ``softmax_cols_short`` (a thread a
column). Every entry's measurement
is in docs/softmax.md.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK, ceil_div
from ..._core.dtypes import BFLOAT16, FLOAT_DTYPES
from .cols import ColsConfig, ColsShortConfig, ColsShortShiftedConfig, ColsShortVecConfig, ColsSplitConfig, ColsVecConfig
from .layout import SoftmaxProblem, row_share, vector_size
from .rows import STASHED_MAX_THREADS, ClusterConfig, RowsConfig, SpanRowsConfig, StashedRowsConfig, block_rows_registers
from .split import SplitConfig
from . import partials

# Every variant a ``config=`` may be (the api checks the type).
VARIANTS = (RowsConfig, SpanRowsConfig, StashedRowsConfig, ClusterConfig, SplitConfig, ColsConfig, ColsVecConfig, ColsSplitConfig,
            ColsShortConfig, ColsShortVecConfig, ColsShortShiftedConfig)

# Block rows (one block a row, its width fixed at launch): for each rung of _BLOCK_VECS
# vectors a lane, the fewest threads (a multiple of 32, _BLOCK_MIN_THREADS to
# _BLOCK_MAX_THREADS) that hold the row; of those, the one that keeps the most rows resident
# an SM (its width x its register cap against the register file), then the best filled, then
# the most vectors a lane. A rung that keeps one row an SM yields to the stashed rows (two an
# SM) where they hold the row. Runs S18-1..3: every row held in flight counts (6500 float16
# elements: 128 x 8, 7 rows an SM, 0.93 of the copy; 224 x 4, 4 rows, 0.82; 30000: 480 x 8,
# one row, 0.68, stashed 256 x 4 + 3, two, 0.88), and the row filling its block (16500:
# 512 x 8 0.46, 288 x 8 0.88); 2 and 3 vectors a lane lost from 256 threads (0.55-0.78).
_BLOCK_VECS = (8, 6, 5)
_BLOCK_MIN_THREADS, _BLOCK_MAX_THREADS = 64, 512
# An SM's register file, threads and blocks (sm_80 and sm_90 alike).
_SM_REGISTERS, _SM_THREADS, _SM_BLOCKS = 65536, 2048, 32
# Warp rows in 128-thread blocks (run 7), the first rung of vectors a lane that holds the row.
_WARP_THREADS, _WARP_VECS = 128, (2, 3, 4, 5, 6, 8)
# (Group, Vecs) of the sub-warp rows by capacity, 2-byte types then wider ones: one vector a
# lane for 2-byte types, two for wider ones, except the v7 winners (run S3-E): 16 vectors of a
# 2-byte type g8 v2, 8 float32 vectors g8 v1; and 2 vectors g2 v1 (2097152 x 8 float32: 0.96-0.97
# of the copy against g1 v2's 0.48-0.49, session 14 runs 3, 5, 6).
_SUBWARP_LADDER_2BYTE = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (32, 1))
_SUBWARP_LADDER = ((1, 1), (2, 1), (2, 2), (8, 1), (8, 2), (16, 2))
_SUBWARP_THREADS = 256
# 2-byte rows past the sub-warp ladder, 33-112 vectors (257-~900 elements): a warp held them in
# one to three vectors a lane, too few bytes in flight (261123 x 257 float16 g32 v2: 0.43 of the
# copy); 8 or 16 lanes a row at 4-7 vectors a lane in 128-thread blocks, exps kept where they
# fit (4 vectors; kept at 5-7 they tied or lost: 777 g16 v7 0.88 kept, 0.94 not): 257 g8 v5
# 0.85, 300 0.88, 501 g16 v4 0.90, 601 g16 v5 0.89, 700 g16 v6 0.92 (runs S20-2, S20-4). The
# warp rungs follow from 4 vectors a lane (900 g32 v4 0.86-0.90).
_WIDE_SUBWARP_LADDER_2BYTE = ((8, 5), (16, 4), (16, 5), (16, 6), (16, 7))
_WARP_VECS_2BYTE = (4, 5, 6, 8)
# Span rows (dense rows whose length is not whole vectors), (Group, PerLane) by capacity in
# elements, steps of 4/3 and 3/2: every slot of a lane is computed, so a row fills most of its
# rung; up to 12 slots a lane, fewer lanes a row (fewer shuffles: 2097152 x 9 float16 g1 p12
# 0.75 of the copy against g2 p6 0.65, run 5 of session 14; 16 slots spilled at 40 registers);
# blocks an SM by itemsize (the launch bound: float64 spilled at 6).
_SPAN_THREADS = 256
_SPAN_LADDER = ((1, 6), (1, 8), (1, 12), (2, 8), (2, 12), (4, 8), (4, 12), (8, 8), (8, 12), (16, 8), (16, 12), (32, 8))
_SPAN_BLOCKS_PER_SM = {2: 6, 4: 6, 8: 4}
# Bytes of rows a block stages, by itemsize: 4- and 8-byte rows keep more in flight (1048576 x 33
# float32: 32 KB 0.76 of the copy against 16 KB 0.72, run 5 of session 14; 2-byte rows tie or lose).
_SPAN_TILE_BYTES = {2: 16384, 4: 32768, 8: 32768}
# exp_once keeps at most this many exps a thread (more spilled or slowed the block rows:
# 4096 x 16384 float16, 256 x 8 vectors, 0.66 -> 0.53x copy).
_EXP_ONCE_MAX_ELEMENTS = 32
# (Threads, Vecs, Cluster) of the float64 cluster rungs; the 2- and 4-byte types lost theirs
# to the split and stashed kernels (v7, run S3-E).
_CLUSTER_LADDER_FLOAT64 = ((512, 4, 4), (512, 4, 8))
# Devices without the ladder's largest cluster take the split kernel.
_CLUSTER_LADDER_SIZE = max(c for _, _, c in _CLUSTER_LADDER_FLOAT64)
# Stashed rows (2- and 4-byte types; float64 has none): 4 vectors a lane; two blocks an SM
# where their shared memory fits, else one; the fewest shared-memory tiles (at most
# _STASHED_MAX_TILES) that hold the row at the kernel's widest block (rows.STASHED_MAX_THREADS),
# the threads then the fewest that hold it. Run S18-1: 33331 float16 elements 352 x 4 + 2 tiles 0.88 of the copy (512 x 4 + 3:
# 0.63), 16500 float32 352 x 4 + 2 0.94 (256 x 8 + 3: 0.65), 40000 float32 448 x 4 + 5 one
# an SM 0.82 (512 x 4 + 7: 0.72); 8 vectors a lane lost everywhere (0.51-0.90).
_STASHED_ITEMSIZES = (2, 4)
_STASHED_VECS, _STASHED_MAX_TILES = 4, 7
# Clusters of stashed blocks by itemsize: the geometry and its clusters (float32 128 x 262144:
# c8 0.80-0.81 against the split's 0.74, run S6-5; 2-byte types lost). A rung takes only rows
# that fill 3/4 of it (each cluster block and barrier costs a few microseconds).
_STASHED_CLUSTER_LADDER = {4: ((256, 8, 3, 2), (8,))}
_STASHED_CLUSTER_MIN_FILL = 0.75
# The split kernel: 256 threads x 4 vectors, two blocks an SM (__launch_bounds__(256, 2)) with
# at most half an SM's shared memory each, so that the whole grid is resident.
_SPLIT_THREADS, _SPLIT_VECS = 256, 4
_SPLIT_BLOCKS_PER_SM = 2
# A row block's static shared memory, at most (BlockSlots; a cluster's inbox), besides the
# hardware's reserve: what the split and stashed blocks' budgets leave for it.
_ROW_STATIC_SMEM = 1024
# Dtypes whose split kernel is pipelined (v6: float16 16 x 1M 0.51 -> 0.54, float32
# 1024 x 65536 0.65 -> 0.69); bfloat16's pipelined kernel spills 8 bytes since the split rows
# hold misaligned rows from the boundary below (session 14).
_SPLIT_PIPELINED = {np.dtype(np.float16), np.dtype(np.float32)}
# The scalar column kernel: 16 slices x 32 columns = 512 threads; loads in flight a thread by
# itemsize (24-32 KB in flight an SM; more spilled).
_COLS_SLICES = 16
_COLS_UNROLL = {2: 12, 4: 8, 8: 2}
# Columns of 2048+ rows split over a cluster, so that each block's second read hits L2:
# clusters of 4 for the scalar kernel (run 9, 14:18: c4 0.29 / 0.46x copy against c8 0.27 / 0.41).
_COLS_CLUSTER, _COLS_CLUSTER_MIN_LENGTH = 4, 2048
# 16-byte column vectors by itemsize: float32 8 lanes x 4 columns in clusters of 8 (v6: 0.48x
# against 0.46 scalar c4); float16 lost, float64 spills.
_COLS_VEC = {4: dict(threads=256, col_lanes=8, unroll=4)}
_COLS_VEC_CLUSTER = 8
# Columns of up to 16 elements: a thread a column in registers, 256 threads a block (one
# read; the two-read kernels' 16 slices would sit mostly idle). 6 x 3000000 axis=0: float16
# 0.39, float32 0.59 of the copy (run S24-1; the layout now takes the vectors below).
_COLS_SHORT = ColsShortConfig(256, 16)
# Short columns off the vector of up to 8 elements, 2- and 4-byte types: a thread a vector of
# them cut from two aligned vectors, on the smallest rung of (MaxLength, BlocksPerSM) that holds
# the column, the launch bound the fewest registers that did not spill (sm_90a ptxas: 48-80);
# exps kept for 2-byte types only (float32 3 x 5000001: 0.84 of the copy not kept, 0.77 kept;
# float16 6 x 3000001 0.63 kept, 0.57 not; run S20-5). 9 to 16 elements, and float64: a thread
# a column (16 rows shifted took ~0.6x of its rate).
_COLS_SHORT_SHIFTED_THREADS, _COLS_SHORT_SHIFTED_RUNGS = 256, ((4, 4), (8, 3))
_COLS_SHORT_STAGED_THREADS, _COLS_SHORT_STAGED_RUNGS = 256, (4, 8, 16)
# Where the column vectors are aligned, a thread a 16-byte vector of columns, on the smallest
# rung of rows that holds the column: (MaxLength, BlocksPerSM) by itemsize, the launch bound
# capping the registers (51, 64, 128 a thread) so that a short column keeps more threads, and
# their loads, resident; float64's exps need more (64, 128, unbounded: tighter bounds spilled).
# Not measured yet.
_COLS_SHORT_VEC_THREADS = 256
_COLS_SHORT_VEC_RUNGS = {2: ((4, 5), (8, 4), (16, 2)), 4: ((4, 5), (8, 4), (16, 2)), 8: ((4, 4), (8, 2), (16, 1))}
# The persistent column split (Threads, ColLanes, Vecs, RegisterTile, BlocksPerSM) by dtype,
# 128-byte rows (run S6-7, 16384 x 4096 axis=0: float16 0.59, float32 0.69x copy).
_COLS_SPLIT = {
    np.dtype(np.float16): ((256, 8, 8, False, 2),),
    BFLOAT16: ((256, 8, 8, False, 2),),
    np.dtype(np.float32): ((256, 8, 4, False, 3),),
}
# cp_async_wait_pending waits with up to 7 younger groups pending: at most 8 shared-memory tiles.
_COLS_SPLIT_MAX_SMEM_TILES = 8
# A wave's exchange weighs about a tile's load and store in the cost of a grid (run S6-7:
# fewer, longer parts won).
_COLS_SPLIT_EXCHANGE_TILES = 1.0


def rows_ladder(dtype) -> list:
    """The sub-warp and warp RowsConfig rungs for ``dtype``, by increasing capacity (exp_once
    not set); longer rows take ``block_rows``."""
    if np.dtype(dtype).itemsize != 2:
        return [RowsConfig(_SUBWARP_THREADS, g, v) for g, v in _SUBWARP_LADDER] + [RowsConfig(_WARP_THREADS, 32, v) for v in _WARP_VECS]
    return ([RowsConfig(_SUBWARP_THREADS, g, v) for g, v in _SUBWARP_LADDER_2BYTE]
            + [RowsConfig(_WARP_THREADS, g, v) for g, v in _WIDE_SUBWARP_LADDER_2BYTE]
            + [RowsConfig(_WARP_THREADS, 32, v) for v in _WARP_VECS_2BYTE])


def _fewest_threads(vectors: int, per_thread: int, least: int) -> int:
    """The fewest threads, a multiple of 32 and at least ``least``, that hold ``vectors`` at
    ``per_thread`` vectors a thread."""
    return max(least, ceil_div(vectors, per_thread * 32) * 32)


def resident_rows(config: RowsConfig, dtype) -> int:
    """Blocks of a block-rows config resident an SM: its threads x its register cap against
    the register file, the threads and the blocks an SM hold."""
    registers = config.threads * block_rows_registers(dtype, config.vecs)
    return min(_SM_REGISTERS // registers, _SM_THREADS // config.threads, _SM_BLOCKS)


def block_rows(vectors: int, dtype):
    """The one-block-a-row RowsConfig for rows of ``vectors`` 16-byte vectors of ``dtype``
    (exp_once not set): of the rungs of _BLOCK_VECS vectors a lane at their fewest threads, the
    one of most resident rows an SM, then best filled, then most vectors a lane; None past
    512 x 8."""
    best = None
    for vecs in _BLOCK_VECS:
        threads = _fewest_threads(vectors, vecs, _BLOCK_MIN_THREADS)
        if threads <= _BLOCK_MAX_THREADS:
            config = RowsConfig(threads, threads, vecs)
            key = (resident_rows(config, dtype), vectors / config.capacity_vectors)
            if best is None or key > best[0]:
                best = (key, config)
    return None if best is None else best[1]


def block_rows_rungs(dtype) -> list:
    """A block-rows RowsConfig for each vectors a lane that block_rows picks for ``dtype`` (the
    kernel's width is set at launch: one instantiation a rung of vectors a lane)."""
    picked = {}
    for vectors in range(_BLOCK_MIN_THREADS * min(_BLOCK_VECS) + 1, _BLOCK_MAX_THREADS * max(_BLOCK_VECS) + 1):
        config = block_rows(vectors, dtype)
        picked.setdefault(config.vecs, config)
    return [picked[v] for v in sorted(picked)]


def with_exp_once(config: RowsConfig, dtype) -> RowsConfig:
    """config with exp_once where a thread's exps fit in _EXP_ONCE_MAX_ELEMENTS registers."""
    return dataclasses.replace(config, exp_once=config.vecs * vector_size(dtype) <= _EXP_ONCE_MAX_ELEMENTS)


def row_cluster_rungs(dtype, dev) -> list:
    """The ClusterConfig rungs of ``dtype`` (float64 only) on devices with clusters of 8."""
    if np.dtype(dtype).itemsize != 8 or dev.max_cluster_size < _CLUSTER_LADDER_SIZE:
        return []
    return [ClusterConfig(t, v, c) for t, v, c in _CLUSTER_LADDER_FLOAT64]


def _split_smem_per_block(dev) -> int:
    """The shared memory a split block's tiles may take at _SPLIT_BLOCKS_PER_SM an SM."""
    smem = min(dev.max_smem_per_block, dev.smem_per_sm // _SPLIT_BLOCKS_PER_SM)
    return smem - SMEM_RESERVED_PER_BLOCK - _ROW_STATIC_SMEM


def _stashed_fits(config: StashedRowsConfig, dev) -> bool:
    """Whether config's blocks_per_sm blocks fit ``dev``'s shared memory."""
    block = config.smem_bytes + SMEM_RESERVED_PER_BLOCK + _ROW_STATIC_SMEM
    return block <= dev.max_smem_per_block and config.blocks_per_sm * block <= dev.smem_per_sm


def stashed_rows(vectors: int, dtype, dev):
    """The stashed rung for rows of ``vectors`` 16-byte vectors of ``dtype`` on ``dev`` (the
    rule above), or None (float64; rows longer than the largest rung; a block's tiles that
    do not fit ``dev``'s shared memory)."""
    if np.dtype(dtype).itemsize not in _STASHED_ITEMSIZES:
        return None
    for blocks_per_sm in (2, 1):
        tiles = ceil_div(vectors, STASHED_MAX_THREADS[_STASHED_VECS, blocks_per_sm] * _STASHED_VECS) - 1
        if 1 <= tiles <= _STASHED_MAX_TILES:
            threads = _fewest_threads(vectors, _STASHED_VECS * (tiles + 1), 32)
            config = StashedRowsConfig(threads, _STASHED_VECS, tiles, blocks_per_sm)
            if _stashed_fits(config, dev):
                return config
    return None


def stashed_rungs(dtype, dev) -> list:
    """A stashed StashedRowsConfig for each blocks_per_sm the rule can take on ``dev`` (the
    kernel's width and tiles are set at launch: one instantiation a blocks_per_sm), none
    where the dtype has no stashed rows."""
    rungs, widest = {}, max(STASHED_MAX_THREADS[_STASHED_VECS, b] for b in (1, 2)) * _STASHED_VECS
    for vectors in range(widest // 4, widest * (_STASHED_MAX_TILES + 1) + 1, 32):
        config = stashed_rows(vectors, dtype, dev)
        if config is not None:
            rungs[config.blocks_per_sm] = config
    return [rungs[b] for b in sorted(rungs, reverse=True)]


def stashed_cluster_rungs(dtype, dev) -> list:
    """The stashed cluster rungs of ``dtype`` on ``dev``, smallest cluster first (none without
    clusters of 8 or one-block stashed rungs: the A100)."""
    geometry, clusters = _STASHED_CLUSTER_LADDER.get(np.dtype(dtype).itemsize, (None, ()))
    if geometry is None or dev.max_cluster_size < 8 or not _stashed_fits(StashedRowsConfig(*geometry), dev):
        return []
    return [StashedRowsConfig(*geometry, cluster) for cluster in clusters]


def span_ladder(dtype) -> list:
    """Every SpanRowsConfig of the default ladder for ``dtype``, by increasing capacity."""
    itemsize = np.dtype(dtype).itemsize
    return [SpanRowsConfig(_SPAN_THREADS, group, per_lane, _SPAN_BLOCKS_PER_SM[itemsize], _SPAN_TILE_BYTES[itemsize])
            for group, per_lane in _SPAN_LADDER]


def choose_span(problem: SoftmaxProblem):
    """The span rung for dense rows whose length is not a whole number of 16-byte vectors
    (most rows then start off a vector boundary) and that a rung holds, else None."""
    if not problem.dense_rows or problem.length % vector_size(problem.dtype) == 0:
        return None
    return next((c for c in span_ladder(problem.dtype) if problem.length <= c.capacity_elements), None)


def choose_rows_split(length: int, rows: int, dtype, dev, misalignment: int = 0) -> SplitConfig:
    """Persistent split: as many register tiles per row as the row needs while the resident
    grid has them; longer rows give each block several tiles (shared memory, then streamed).
    The chunks hold ``misalignment`` elements more: a row that starts off a vector boundary
    is held from the boundary below."""
    length += misalignment
    tile = _SPLIT_THREADS * _SPLIT_VECS * vector_size(dtype)
    resident = dev.sm_count * _SPLIT_BLOCKS_PER_SM
    max_smem_tiles = _split_smem_per_block(dev) // (_SPLIT_THREADS * _SPLIT_VECS * 16)
    tiles = ceil_div(length, tile)
    # Fewest tiles per block that take every row in one wave of the resident grid; when the
    # rows do not fit on chip at once, full blocks (fewer waves, fewer arrival waits).
    tiles_per_block = max(ceil_div(tiles * rows, resident), ceil_div(tiles, resident))
    if tiles_per_block > 1 + max_smem_tiles:
        tiles_per_block = max(1 + max_smem_tiles, ceil_div(tiles, resident))
    blocks_per_row = ceil_div(tiles, tiles_per_block)
    chunk = row_share(length, blocks_per_row, dtype)
    blocks_per_row = ceil_div(length, chunk)  # rounding the chunk up may leave a block idle
    tiles_per_block = ceil_div(chunk, tile)
    smem_tiles = min(max_smem_tiles, tiles_per_block - 1)
    rows_per_wave = min(rows, resident // blocks_per_row)
    return SplitConfig(_SPLIT_THREADS, _SPLIT_VECS, _SPLIT_BLOCKS_PER_SM, blocks_per_row, rows_per_wave * blocks_per_row,
                       chunk, smem_tiles, tiles_per_block - 1 > smem_tiles, np.dtype(dtype) in _SPLIT_PIPELINED)


def choose_rows(length: int, rows: int, dtype, dev, misalignment: int = 0):
    """Config for ``rows`` rows of ``length`` elements on the row kernels (the ladder above).
    ``misalignment``: the most elements past a 16-byte boundary a row starts
    (``SoftmaxProblem.max_row_misalignment``); the register and one-block stashed rungs hold
    their rows from the boundary below, that many elements more."""
    vs = vector_size(dtype)
    vectors = ceil_div(length, vs)
    aligned_vectors = ceil_div(length + misalignment, vs)
    for config in rows_ladder(dtype):
        if aligned_vectors <= config.capacity_vectors:
            return with_exp_once(config, dtype)
    block, stashed = block_rows(aligned_vectors, dtype), stashed_rows(aligned_vectors, dtype, dev)
    if block is not None and (stashed is None or resident_rows(block, dtype) > 1):
        return with_exp_once(block, dtype)
    if stashed is not None:
        return stashed
    for config in stashed_cluster_rungs(dtype, dev):
        if _STASHED_CLUSTER_MIN_FILL * config.capacity_vectors <= vectors <= config.capacity_vectors:
            return config
    for config in row_cluster_rungs(dtype, dev):
        if vectors <= config.capacity_vectors:
            return config
    return choose_rows_split(length, rows, dtype, dev, misalignment)


def cols_split_config(length: int, columns: int, dtype, dev, geometry):
    """The ColsSplitConfig of one geometry (Threads, ColLanes, Vecs, RegisterTile, BlocksPerSM)
    for ``columns`` columns of ``length``, or None where a column is shorter than a tile or
    longer than the resident grid holds. Parts are whole tiles; the tiles a block takes
    minimise its work over the call: waves (the resident grid holds strips_per_wave strips of
    blocks_per_strip blocks) x (tiles a part + an exchange), ties to the larger part."""
    threads, col_lanes, vecs, register_tile, blocks_per_sm = geometry
    probe = ColsSplitConfig(threads, col_lanes, vecs, register_tile, blocks_per_sm, 1, 1, 0, 0)
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
    return ColsSplitConfig(threads, col_lanes, vecs, register_tile, blocks_per_sm, blocks, strips_per_wave,
                           tiles * tile_rows, tiles - int(register_tile))


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
    an exp replaces its element) or at most _EXP_ONCE_MAX_ELEMENTS a thread."""
    itemsize = np.dtype(dtype).itemsize
    max_length, blocks_per_sm = next(rung for rung in _COLS_SHORT_VEC_RUNGS[itemsize] if length <= rung[0])
    exp_once = itemsize >= 4 or max_length * vector_size(dtype) <= _EXP_ONCE_MAX_ELEMENTS
    return ColsShortVecConfig(_COLS_SHORT_VEC_THREADS, max_length, blocks_per_sm, exp_once)


def cols_short_shifted(length: int, dtype) -> ColsShortShiftedConfig | None:
    """The shifted short-column rung that holds columns of ``length``, None past 8 elements and
    for float64."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in (2, 4) or length > _COLS_SHORT_SHIFTED_RUNGS[-1][0]:
        return None
    max_length, blocks_per_sm = next(rung for rung in _COLS_SHORT_SHIFTED_RUNGS if length <= rung[0])
    return ColsShortShiftedConfig(_COLS_SHORT_SHIFTED_THREADS, max_length, blocks_per_sm, exp_once=itemsize == 2)


def choose_cols(length: int, columns: int, dtype, dev, vectorizable: bool = False):
    """Config for ``columns`` columns of ``length`` (the reduced axis strided over a
    contiguous inner axis; ``vectorizable``: what ``cols_vectorizable`` says of the layout).
    Short columns in registers, a thread a vector of them (cut from two aligned vectors where
    the layout is not vectorizable, up to 8 elements; else a thread a column); the column split
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
    return ColsConfig(_COLS_SLICES, _COLS_UNROLL[np.dtype(dtype).itemsize], cluster(_COLS_CLUSTER))


def choose(problem: SoftmaxProblem, dev):
    """The default variant of a problem: the column kernels for column layouts, else the rows."""
    if problem.column_layout:
        return choose_cols(problem.length, problem.rows, problem.dtype, dev, problem.vectorizable)
    span = choose_span(problem)
    if span is not None:
        return span
    return choose_rows(problem.length, problem.rows, problem.dtype, dev, problem.max_row_misalignment)


def instantiations(dev) -> list:
    """Every KernelSpec the default selection can pick on ``dev``: each rows and span rung, the
    stashed and cluster rungs the device holds, the split kernel, the column kernels with
    and without their clusters, and the short-column kernels (every vector rung)."""
    specs = []
    for dtype in FLOAT_DTYPES:
        rungs = [with_exp_once(c, dtype) for c in rows_ladder(dtype) + block_rows_rungs(dtype)] + span_ladder(dtype)
        rungs += stashed_rungs(dtype, dev) + stashed_cluster_rungs(dtype, dev) + row_cluster_rungs(dtype, dev)
        rungs.append(choose_rows_split(1 << 30, 1, dtype, dev))
        for length in (_COLS_SHORT.max_length + 1, 1 << 30):  # shorter columns one block, long ones a cluster where there is one
            rungs += [choose_cols(length, 1, dtype, dev, vectorizable) for vectorizable in (False, True)]
        rungs += [ColsSplitConfig(*geometry, 1, 1, 0, 0) for geometry in _COLS_SPLIT.get(dtype, ())]
        rungs += [cols_short_vec(length, dtype) for length, _ in _COLS_SHORT_VEC_RUNGS[dtype.itemsize]]
        rungs += [_COLS_SHORT] + [c for c in (cols_short_shifted(n, dtype) for n, _ in _COLS_SHORT_SHIFTED_RUNGS) if c is not None]
        specs += [c.spec(dtype, log) for log in (False, True) for c in rungs]
    specs += partials.instantiations(dev)  # cufuse.dask's rows that span chunks
    return list(dict.fromkeys(specs))
