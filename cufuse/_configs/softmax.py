"""Kernel configurations of the softmax op (pure; no GPU needed).

A problem is a row length (``length``, elements of the reduced axis), a row count, the
dtype and the layout class (reduced axis contiguous -> row kernels; reduced axis strided
with a contiguous inner axis -> the column kernel). Capacities are counted in 16-byte
vectors (``VS = 16 // itemsize`` elements), so one ladder serves every dtype:

    vectors per row   kernel                              config
    1 .. 32           softmax_rows, Group lanes per row   RowsConfig(256, Group, Vecs)
    33 .. 256         softmax_rows, one warp per row      RowsConfig(128, 32, Vecs)
    257 .. 4096       softmax_rows, one block per row     RowsConfig(Threads, Threads, Vecs)
    4097 .. 8192      2-byte types: softmax_rows_stashed  StashedRowsConfig(512, 4, 3 tiles, 2/SM)
    4097 .. 16384     float32: softmax_rows_stashed       StashedRowsConfig(256, 8, 3, 2) / (512, 4, 7, 1)
    4097 .. 16384     float64: softmax_rows_cluster (sm_90)  ClusterConfig(512, 4, 4 / 8)
    49153 .. 65536    float32 (sm_90): softmax_rows_stashed_cluster  StashedRowsConfig(256, 8, 3, 2, cluster 8)
    beyond            softmax_rows_split, persistent      SplitConfig(256, 4, 2 blocks/SM, ...)

Sub-warp rows: one vector a lane for 2-byte types, two for wider ones, except the measured
winners of softmax v7 (H200 session 3, run S3-E; v7 cut the instructions per element, which
moved the balance): 16 vectors of a 2-byte type g8 v2 (262144 x 128 float16 0.98x copy vs
g16 v1 0.94x), 8 vectors of float32 g8 v1 (1M x 32 0.97x vs g4 v2 0.90x). Before v7 (run 9):
1M x 32 float16 g4 v1 0.92x vs g2 v2 0.85x, 262144 x 128 float16 g16 v1 0.90x vs g8 v2
0.85x; float32 g16 v2 0.97x vs g32 v1 0.92x.
128-thread blocks for warp rows measured fastest (H200 run 7). softmax (not log_softmax)
keeps its exps in registers (``exp_once``) where they take at most 32 registers a thread.

The split kernel holds 16 KB of a row in each block's registers and up to 7 more 16 KB
tiles in its shared memory (H200: 264 resident blocks, about 33 MB of rows on chip).

The stashed rows (softmax v9, ``_STASHED_LADDER``; one block a row: a register tile and
shared-memory tiles, two blocks an SM up to 128 KB rows) replaced the split kernel there:
1024 x 65536 float16 0.76-0.78 -> 0.91-0.92x copy, 2048 x 32768 float32 0.82 -> 0.92x.

Without clusters (sm_80) float64 takes the split kernel from 4097 vectors.

The cluster rung (``ClusterConfig(256, 8, 4)``) lost to the split kernel for 2- and 4-byte
types in softmax v7 (H200 session 3, run S3-E, fraction of the copy: 2048 x 32768 float32 0.74 ->
0.82, 1024 x 65536 float16 0.74 -> 0.76): only float64 keeps its clusters. The prefetching
row kernels of v5 (persistent grids with the next rows in flight through cp.async) lost to
the plain rows on every shape after v7 and were removed in v7.1 (design: bench/NOTES.md).
``SplitConfig(pipelined=True)`` merges each shared-memory tile as soon as it lands and
requests the next row's tiles as the output pass frees them -- 2- and 4-byte types
(``_SPLIT_PIPELINED``). Columns: 16-byte vectors across columns for float32
(``_COLS_VEC``), clusters of 4 for the scalar column kernel; one-read strips of columns held
on chip by a cluster (``_COLS_STRIP``, ``choose_cols_strip``; ``_COLS_STRIP_DEFAULT``) where they fit;
the same strips split over co-resident blocks of a persistent grid that exchange their column
statistics through global memory (``_COLS_SPLIT``, ``choose_cols_split``; ``_COLS_SPLIT_DEFAULT``):
the default where it applies since run S6-7.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .._dtypes import BFLOAT16, ctype

SOURCE = "softmax.cu"

# (Threads, Vecs) of the block-per-row kernel, by capacity; every step doubles it.
_BLOCK_LADDER = ((128, 4), (128, 8), (256, 8), (512, 8))
_WARP_THREADS, _WARP_VECS = 128, (2, 4, 8)
# (Group, Vecs) of the sub-warp rows by capacity: 2-byte types, then wider ones.
_SUBWARP_LADDER_2BYTE = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (32, 1))
_SUBWARP_LADDER = ((1, 1), (1, 2), (2, 2), (8, 1), (8, 2), (16, 2))
_SUBWARP_THREADS = 256
# The exps kept by exp_once: at most this many accumulators a thread (more spilled or slowed
# the block rows: 4096 x 16384 float16, 256 x 8 vectors, 0.66 -> 0.53x copy).
_EXP_ONCE_MAX_ELEMENTS = 32
# (Threads, Vecs, Cluster) by capacity, 2- and 4-byte types: none since softmax v7 (the
# split kernel won, see the module docstring). Before (H200 run 9, 1024 x 65536 float16):
# 256 x 8 c4 0.72x copy, 512 x 4 c4 0.57x, 256 x 4 c8 0.52x, split 0.53x.
_CLUSTER_LADDER = ()
_CLUSTER_LADDER_FLOAT64 = ((512, 4, 4), (512, 4, 8))
_MAX_CLUSTER = max(c for _, _, c in _CLUSTER_LADDER + _CLUSTER_LADDER_FLOAT64)
# Rows of one block with a register tile and shared-memory tiles (``StashedRowsConfig``:
# Threads, Vecs, StashTiles, BlocksPerSM), by itemsize, tried after the block ladder: the
# first that holds the row wins (float64 has none: its long rows keep the cluster ladder).
# H200 run S5-8 (fraction of the copy against the split kernel): float16 1024 x 65536
# 512 x 4 + 3 tiles 0.91-0.92 against 0.76-0.78 (256 x 8 + 3 0.88-0.89, 256 x 4 + 7 0.89-0.90);
# float32 2048 x 32768 256 x 8 + 3 0.92 against 0.82-0.83 (512 x 4 spills 48 bytes under the 64
# registers of two 512-thread blocks); float32 1024 x 65536 (256 KB rows, one block an SM)
# 512 x 4 + 7 0.85 against 0.81 (512 x 8 + 3 0.84).
_STASHED_LADDER = {
    2: ((512, 4, 3, 2),),  # float16 / bfloat16 rows of up to 64 K elements: 128 KB, two blocks an SM
    4: ((256, 8, 3, 2), (512, 4, 7, 1)),  # float32 up to 32 K (128 KB, two an SM) and 64 K elements (256 KB, one)
}
_STASHED_ROWS_DEFAULT = True
# Longer rows over a cluster of 128 KB stashed blocks (``StashedRowsConfig(..., cluster)``,
# ``softmax_rows_stashed_cluster``, sm_90; statistics pushed through distributed shared memory,
# softmax v10): by itemsize, the geometry (256 x 8 vectors: bfloat16 spills 32 bytes at 512 x 4
# in clusters) and the clusters of the ladder. H200 runs S6-5 / S6-6, fraction of the copy:
# 128 x 262144 float32 c8 0.80-0.81 against the split kernel's 0.74; float16 c4 0.68-0.72
# (split 0.72-0.73), 16 x 1M float16 c16 0.55-0.59 (0.71): 2-byte types keep the split kernel.
# A rung takes only rows that fill 3/4 of it: smaller blocks measured far slower (each block
# and each cluster barrier costs a few microseconds whatever its bytes: 1024 x 65536 float32
# c2 0.81, c4 0.63, c8 0.32).
_STASHED_CLUSTERS = (2, 4, 8, 16)  # every cluster the kernel is built for (16: non-portable)
_STASHED_CLUSTER_LADDER = {4: ((256, 8, 3, 2), (8,))}
_STASHED_CLUSTER_MIN_FILL = 0.75
_STASHED_CLUSTERS_DEFAULT = True
_SPLIT_THREADS, _SPLIT_VECS = 256, 4
# The split kernel's __launch_bounds__(Threads, 2) and at most half an SM's shared memory
# per block guarantee two resident blocks per SM; its grid never exceeds that, so every
# block of a row is resident at once (two per SM: one block's loads overlap another's stores).
_SPLIT_BLOCKS_PER_SM = 2
_SMEM_RESERVE = 2048  # the driver's 1 KB per block plus the kernel's static shared memory
_SMEM_RESERVED_PER_BLOCK = 1024  # the driver's
# The pipelined split kernel, by itemsize: float16 16 x 1M 0.51 -> 0.54, 4 x 4M 0.51 -> 0.53,
# 128 x 262144 and axis=None equal; float32 (v6 kernel, H200 14:56) 1024 x 65536 0.65 -> 0.69,
# 128 x 262144 0.61 -> 0.63, 1M / 4M equal.
_SPLIT_PIPELINED = {2, 4}
# 16 slices x 32 columns = 512 threads, two blocks per SM (__launch_bounds__(512, 2)); loads
# in flight per thread by element size, so that an SM keeps 24-32 KB of loads in flight (about
# the latency-bandwidth product) with 2-byte scalar loads too.
_COLS_SLICES = 16
_COLS_UNROLL = {2: 12, 4: 8, 8: 2}  # more spills (2-byte: 16; double: 4, exp(double) needs registers)
# Columns of at least this length go to a cluster column kernel: each block then still walks
# 256+ rows. Scalar kernel in clusters of 4 (H200 16384 x 4096 axis=0: c4 0.29 / 0.46x copy vs
# c8 0.27 / 0.41 for float16 / float32 at 14:18; float32 0.47 vs 0.44 in run 9).
_COLS_CLUSTER, _COLS_CLUSTER_MIN_LENGTH = 4, 2048
# 16-byte vectors across columns where the layout allows (``cols_vectorizable``), by itemsize:
# float32 8 lanes x 4 columns, clusters of 8 (0.48x vs c8 scalar 0.41, c4 scalar 0.46);
# float16 lost (best 0.24 vs 0.27) and float64 spills on sm_90a: both keep the scalar kernel.
_COLS_VEC = {4: dict(threads=256, col_lanes=8, unroll=4)}
_COLS_VEC_CLUSTER = 8
# One-read column strips (``softmax_cols_strip``, sm_90 clusters of up to 16 blocks; one block
# without clusters): geometries (Threads, ColLanes, Vecs, RegisterTile, BlocksPerSM) by
# dtype, the first whose strip fits on chip wins. 2-byte types keep no register tile (with
# one, 512 x 4 vectors spilled under the 64 registers of two 512-thread blocks an SM) and take
# 64-byte rows (16384 rows x 64 B over 16 blocks: 2 shared-memory tiles a block; 128-byte rows
# would need 128 KB a block); float32 128-byte rows with a register tile (16384 x 128 B: 1 +
# 3 tiles a block, 58-61 registers), then 64-byte rows for columns up to 24576.
_COLS_STRIP_WIDE_ROWS = (512, 4, 4, False, 2)
_COLS_STRIP = {
    # float16: 256 threads x 8 vectors, three blocks an SM first (H200 run S4-4, 16384 x 4096
    # axis=0: 0.44x copy against 0.32 for 512 x 4 vectors two an SM); bfloat16 spills 88-96 B
    # at that geometry's 80 registers (its conversions), so it keeps 512 x 4.
    np.dtype(np.float16): ((256, 4, 8, False, 3), _COLS_STRIP_WIDE_ROWS),
    np.dtype(BFLOAT16): (_COLS_STRIP_WIDE_ROWS,),
    np.dtype(np.float32): ((512, 8, 4, True, 2), _COLS_STRIP_WIDE_ROWS),
}
_COLS_STRIP_CLUSTERS = (1, 2, 4, 8, 16)  # 16: non-portable, sm_90 (the host sets the attribute)
# The strip kernel replaces the two-read column kernels where it holds the column (H200 run
# S4-4, 16384 x 4096 axis=0: float16 0.30 -> 0.44x copy, float32 0.47 -> 0.56x).
_COLS_STRIP_DEFAULT = True
# The persistent column split (softmax v10, ``softmax_cols_split``): the strip kernel's twin
# without clusters, a strip's rows split over blocks_per_strip co-resident blocks that exchange
# their column statistics through global memory (the rows split kernel's scheme). Geometries
# (Threads, ColLanes, Vecs, RegisterTile, BlocksPerSM) by dtype, the first that applies wins:
# 128-byte rows (bench/probe_cluster_cost.py: strip copies of 64-byte rows reach 0.72-0.78 of
# the copy, 128-byte ones 0.85-0.88). H200 run S6-7, 16384 x 4096 axis=0, fraction of the copy
# (the cluster strips 0.51 / 0.67): float16 256 x 8 vectors two an SM 0.59 at 22 blocks a strip
# (0.55 at 32, 0.36 at 64; with a register tile 0.43: 256 x 8 spills there), float32 256 x 4
# three an SM 0.69 at 32 blocks (256 x 8 + a register tile 0.49-0.55, without 0.66).
_COLS_SPLIT = {
    np.dtype(np.float16): ((256, 8, 8, False, 2),),
    np.dtype(BFLOAT16): ((256, 8, 8, False, 2),),
    np.dtype(np.float32): ((256, 8, 4, False, 3),),
}
# cp_async_wait_pending waits with up to 7 younger groups pending: at most 8 shared-memory tiles.
_COLS_SPLIT_MAX_SMEM_TILES = 8
# A wave's exchange (an L2 round trip and the arrival wait of the strip's blocks) weighs about
# a tile's load and store in the chooser's cost of a grid (run S6-7: fewer, longer parts won).
_COLS_SPLIT_EXCHANGE_TILES = 1.0
_COLS_SPLIT_DEFAULT = True


def vector_size(dtype) -> int:
    return 16 // np.dtype(dtype).itemsize


def row_share(length: int, parts: int, dtype) -> int:
    """Elements of a row of ``length`` that each of ``parts`` blocks holds: whole 16-byte
    vectors, so that every block's share starts aligned where the row does."""
    vs = vector_size(dtype)
    return _ceil_div(_ceil_div(length, parts), vs) * vs


@dataclasses.dataclass(frozen=True)
class RowsConfig:
    """``softmax_rows``: ``group`` threads per row, rows of up to group*vecs vectors.
    ``exp_once`` (softmax only; log_softmax ignores it): the exps of the sum stay in
    registers for the store, one exp an element instead of two (``choose_rows`` sets it
    where they fit, see ``_EXP_ONCE_MAX_ELEMENTS``)."""

    threads: int
    group: int
    vecs: int
    exp_once: bool = False

    @property
    def capacity_vectors(self) -> int:
        return self.group * self.vecs

    @property
    def rows_per_block(self) -> int:
        return self.threads // self.group

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        exp_once = self.exp_once and not log
        return KernelSpec(SOURCE, "softmax_rows", (ctype(dtype), log, self.threads, self.group, self.vecs, exp_once))


@dataclasses.dataclass(frozen=True)
class StashedRowsConfig:
    """``softmax_rows_stashed``: one block of ``threads`` per row, rows of up to
    (``stash_tiles`` + 1) tiles of threads x vecs vectors: the last tile in registers, the
    others in dynamic shared memory, ``blocks_per_sm`` blocks an SM (the launch bound). With
    ``cluster`` > 1 (``softmax_rows_stashed_cluster``, sm_90), a cluster of such blocks a row."""

    threads: int
    vecs: int
    stash_tiles: int
    blocks_per_sm: int
    cluster: int = 1

    @property
    def capacity_vectors(self) -> int:
        return self.threads * self.vecs * (self.stash_tiles + 1) * self.cluster

    @property
    def smem_bytes(self) -> int:
        return self.stash_tiles * self.threads * self.vecs * 16

    def chunk(self, length: int, dtype) -> int:
        """Elements of the row a block holds (whole 16-byte vectors)."""
        return row_share(length, self.cluster, dtype)

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        args = (ctype(dtype), log, self.threads, self.vecs, self.stash_tiles, self.blocks_per_sm)
        if self.cluster == 1:
            return KernelSpec(SOURCE, "softmax_rows_stashed", args)
        return KernelSpec(SOURCE, "softmax_rows_stashed_cluster", args + (self.cluster,), min_cc=90)


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """``softmax_rows_cluster``: ``cluster`` blocks of ``threads`` x ``vecs`` vectors per row;
    a grid of rows / ``rows_per_cluster`` clusters, each looping over its rows (a run-time
    parameter: same kernel)."""

    threads: int
    vecs: int
    cluster: int
    rows_per_cluster: int = 1

    @property
    def capacity_vectors(self) -> int:
        return self.threads * self.vecs * self.cluster

    def chunk(self, length: int, dtype) -> int:
        """Elements of the row a block holds (whole 16-byte vectors)."""
        return row_share(length, self.cluster, dtype)

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        return KernelSpec(
            SOURCE,
            "softmax_rows_cluster",
            (ctype(dtype), log, self.threads, self.vecs, self.cluster),
            min_cc=90,
        )


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """``softmax_rows_split``: ``blocks_per_row`` blocks per row, ``grid`` co-resident blocks.

    Each block owns ``chunk`` elements of a row (a multiple of the vector size), cut into
    tiles of threads*vecs vectors: the last tile in registers, up to ``smem_tiles`` in
    dynamic shared memory; any others are streamed and read twice (``streams``).
    """

    threads: int
    vecs: int
    blocks_per_sm: int
    blocks_per_row: int
    grid: int
    chunk: int
    smem_tiles: int
    streams: bool
    pipelined: bool = False  # each shared-memory tile merged as soon as it lands

    @property
    def smem_bytes(self) -> int:
        return self.smem_tiles * self.threads * self.vecs * 16

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        return KernelSpec(
            SOURCE, "softmax_rows_split", (ctype(dtype), log, self.threads, self.vecs, self.blocks_per_sm, self.pipelined)
        )


@dataclasses.dataclass(frozen=True)
class ColsConfig:
    """``softmax_cols`` (cluster 1) or ``softmax_cols_cluster``: 32 columns x ``slices``
    slices of the reduced axis per block, ``unroll`` loads in flight per thread, the reduced
    axis split over ``cluster`` blocks."""

    slices: int
    unroll: int
    cluster: int = 1

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        if self.cluster == 1:
            return KernelSpec(SOURCE, "softmax_cols", (ctype(dtype), log, self.slices, self.unroll))
        return KernelSpec(
            SOURCE, "softmax_cols_cluster", (ctype(dtype), log, self.slices, self.unroll, self.cluster), min_cc=90
        )


@dataclasses.dataclass(frozen=True)
class ColsVecConfig:
    """``softmax_cols_vec`` (cluster 1) or ``softmax_cols_vec_cluster``: ``col_lanes`` 16-byte
    vectors of adjacent columns x ``threads / col_lanes`` slices of the reduced axis per block,
    ``unroll`` vectors in flight per thread, the reduced axis split over ``cluster`` blocks.
    Only where ``cols_vectorizable``."""

    threads: int
    col_lanes: int
    unroll: int
    cluster: int = 1

    def columns(self, dtype) -> int:
        return self.col_lanes * vector_size(dtype)

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        args = (ctype(dtype), log, self.threads, self.col_lanes, self.unroll)
        if self.cluster == 1:
            return KernelSpec(SOURCE, "softmax_cols_vec", args)
        return KernelSpec(SOURCE, "softmax_cols_vec_cluster", args + (self.cluster,), min_cc=90)


class _StripTiles:
    """The tiles of the one-read column kernels (strip and split): a block of ``threads`` holds
    ``col_lanes`` 16-byte vectors of adjacent columns x tiles of ``tile_rows`` rows, each tile
    ``vecs`` vectors a thread; ``smem_tiles`` in shared memory, plus the register tile."""

    def columns(self, dtype) -> int:
        return self.col_lanes * vector_size(dtype)

    @property
    def tile_rows(self) -> int:
        return self.threads // self.col_lanes * self.vecs

    @property
    def tile_bytes(self) -> int:
        return self.threads * self.vecs * 16

    @property
    def smem_bytes(self) -> int:
        return self.smem_tiles * self.tile_bytes

    @property
    def tiles_per_block(self) -> int:
        return self.smem_tiles + int(self.register_tile)


@dataclasses.dataclass(frozen=True)
class ColsStripConfig(_StripTiles):
    """``softmax_cols_strip`` (cluster 1) or ``softmax_cols_strip_cluster``: a strip of
    ``col_lanes`` 16-byte vectors of adjacent columns held on chip by ``cluster`` blocks, each
    ceil(length / cluster) rows of it in tiles of ``tile_rows`` rows: ``smem_tiles`` in dynamic
    shared memory plus, with ``register_tile``, the last one in registers; ``blocks_per_sm``
    blocks an SM (the kernel's launch bound). Only where ``cols_vectorizable``."""

    threads: int
    col_lanes: int
    vecs: int
    register_tile: bool
    blocks_per_sm: int
    cluster: int
    smem_tiles: int

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        args = (ctype(dtype), log, self.threads, self.col_lanes, self.vecs, self.register_tile, self.blocks_per_sm)
        if self.cluster == 1:
            return KernelSpec(SOURCE, "softmax_cols_strip", args)
        return KernelSpec(SOURCE, "softmax_cols_strip_cluster", args + (self.cluster,), min_cc=90)


@dataclasses.dataclass(frozen=True)
class ColsSplitConfig(_StripTiles):
    """``softmax_cols_split``: a persistent grid of ``strips_per_wave`` x ``blocks_per_strip``
    co-resident blocks (``blocks_per_sm`` an SM: the kernel's launch bound). A strip of
    ``col_lanes`` 16-byte vectors of adjacent columns is split over ``blocks_per_strip`` blocks,
    each ``part`` rows of it in tiles of ``tile_rows`` rows: ``smem_tiles`` in dynamic shared
    memory plus, with ``register_tile``, the last one in registers; the blocks' column
    statistics meet in a global scratch (``scratch``). Only where ``cols_vectorizable``."""

    threads: int
    col_lanes: int
    vecs: int
    register_tile: bool
    blocks_per_sm: int
    blocks_per_strip: int
    strips_per_wave: int
    part: int
    smem_tiles: int

    @property
    def grid(self) -> int:
        return self.strips_per_wave * self.blocks_per_strip

    def scratch(self, dtype) -> tuple:
        """(accumulators, arrival counters) of the exchange: (max, sum) pairs of every column of
        every block, twice (a block may publish its next strip while its slot still reads this
        one), and a counter a strip slot."""
        return 2 * self.grid * self.columns(dtype) * 2, self.strips_per_wave

    def spec(self, dtype, log: bool):
        from .._loader import KernelSpec

        return KernelSpec(
            SOURCE,
            "softmax_cols_split",
            (ctype(dtype), log, self.threads, self.col_lanes, self.vecs, self.register_tile, self.blocks_per_sm),
        )


def cols_vectorizable(outer: int, inner: int, so: int, sl: int, dtype) -> bool:
    """Whether a column layout (inner axis contiguous) can be read and written as 16-byte
    vectors of adjacent columns: every vector starts at a multiple of the vector size."""
    vs = vector_size(dtype)
    return np.dtype(dtype).itemsize <= 4 and inner % vs == 0 and sl % vs == 0 and (outer == 1 or so % vs == 0)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _rows_configs(dtype):
    """Every RowsConfig of the ladder for ``dtype``, by increasing capacity (exp_once not yet set)."""
    subwarp = _SUBWARP_LADDER_2BYTE if np.dtype(dtype).itemsize == 2 else _SUBWARP_LADDER
    return (
        [RowsConfig(_SUBWARP_THREADS, g, v) for g, v in subwarp]
        + [RowsConfig(_WARP_THREADS, 32, v) for v in _WARP_VECS]
        + [RowsConfig(t, t, v) for t, v in _BLOCK_LADDER]
    )


def with_exp_once(config: RowsConfig, dtype) -> RowsConfig:
    """config with exp_once where a thread's exps fit in _EXP_ONCE_MAX_ELEMENTS registers."""
    return dataclasses.replace(config, exp_once=config.vecs * vector_size(dtype) <= _EXP_ONCE_MAX_ELEMENTS)


def _cluster_configs(dtype):
    ladder = _CLUSTER_LADDER_FLOAT64 if np.dtype(dtype).itemsize == 8 else _CLUSTER_LADDER
    return [ClusterConfig(t, v, c) for t, v, c in ladder]


def _stashed_configs(dtype, dev):
    """The stashed rungs of ``dtype`` whose blocks fit ``dev``'s shared memory at their
    blocks_per_sm (the A100's 164 KB an SM holds none of them)."""
    rungs = [StashedRowsConfig(*geometry) for geometry in _STASHED_LADDER.get(np.dtype(dtype).itemsize, ())]
    return [
        c for c in rungs
        if c.smem_bytes + _SMEM_RESERVE <= dev.max_smem_per_block and c.blocks_per_sm * (c.smem_bytes + _SMEM_RESERVE) <= dev.smem_per_sm
    ]


def _stashed_cluster_configs(dtype, dev):
    """The stashed cluster rungs of ``dtype`` on ``dev``, smallest cluster first (none without
    clusters of 8: the A100)."""
    geometry, clusters = _STASHED_CLUSTER_LADDER.get(np.dtype(dtype).itemsize, (None, ()))
    if geometry is None or dev.max_cluster_size < 8 or not _stashed_configs(dtype, dev):
        return []
    return [StashedRowsConfig(*geometry, cluster) for cluster in clusters]


def choose_split(length: int, rows: int, dtype, dev) -> SplitConfig:
    """Persistent split: as many register tiles per row as the row needs while the resident
    grid has them; longer rows give each block several tiles (shared memory, then streamed)."""
    vs = vector_size(dtype)
    tile = _SPLIT_THREADS * _SPLIT_VECS * vs
    tile_bytes = _SPLIT_THREADS * _SPLIT_VECS * 16
    resident = dev.sm_count * _SPLIT_BLOCKS_PER_SM
    smem_per_block = min(dev.max_smem_per_block, dev.smem_per_sm // _SPLIT_BLOCKS_PER_SM) - _SMEM_RESERVE
    max_smem_tiles = smem_per_block // tile_bytes
    tiles = _ceil_div(length, tile)
    # Fewest tiles per block that take every row in one wave of the resident grid; when the
    # rows do not fit on chip at once, full blocks (fewer waves, fewer arrival waits).
    tiles_per_block = max(_ceil_div(tiles * rows, resident), _ceil_div(tiles, resident))
    if tiles_per_block > 1 + max_smem_tiles:
        tiles_per_block = max(1 + max_smem_tiles, _ceil_div(tiles, resident))
    blocks_per_row = _ceil_div(tiles, tiles_per_block)
    chunk = row_share(length, blocks_per_row, dtype)
    blocks_per_row = _ceil_div(length, chunk)  # rounding the chunk up may leave a block idle
    tiles_per_block = _ceil_div(chunk, tile)
    smem_tiles = min(max_smem_tiles, tiles_per_block - 1)
    rows_per_wave = min(rows, resident // blocks_per_row)
    return SplitConfig(
        _SPLIT_THREADS,
        _SPLIT_VECS,
        _SPLIT_BLOCKS_PER_SM,
        blocks_per_row,
        rows_per_wave * blocks_per_row,
        chunk,
        smem_tiles,
        tiles_per_block - 1 > smem_tiles,
        np.dtype(dtype).itemsize in _SPLIT_PIPELINED,
    )


def choose_rows(length: int, rows: int, dtype, dev):
    """Config for rows of ``length`` contiguous-or-strided elements (reduced axis contiguous)."""
    vectors = _ceil_div(length, vector_size(dtype))
    for config in _rows_configs(dtype):
        if vectors <= config.capacity_vectors:
            return with_exp_once(config, dtype)
    if _STASHED_ROWS_DEFAULT:
        for config in _stashed_configs(dtype, dev):
            if vectors <= config.capacity_vectors:
                return config
    if _STASHED_CLUSTERS_DEFAULT:
        for config in _stashed_cluster_configs(dtype, dev):
            if _STASHED_CLUSTER_MIN_FILL * config.capacity_vectors <= vectors <= config.capacity_vectors:
                return config
    if dev.max_cluster_size >= _MAX_CLUSTER:
        for config in _cluster_configs(dtype):
            if vectors <= config.capacity_vectors:
                return config
    return choose_split(length, rows, dtype, dev)


def _strip_clusters(dev):
    return [c for c in _COLS_STRIP_CLUSTERS if c == 1 or dev.max_cluster_size >= 8]


def _strip_static_smem(threads: int, columns: int, dtype, cluster: int = max(_COLS_STRIP_CLUSTERS)) -> int:
    """The static shared memory of the strip and column-split kernels: (max, sum) of each
    column per warp, of the block and of the cluster, and in clusters the inbox of every
    block's pairs (by default the largest cluster's: the strip chooser budgets before it picks)."""
    accumulator = 8 if np.dtype(dtype).itemsize == 8 else 4
    return (threads // 32 + 2 + (cluster if cluster > 1 else 0)) * columns * 2 * accumulator


def strip_config(length: int, rows: int, dtype, dev, geometry):
    """The ColsStripConfig of one geometry (Threads, ColLanes, Vecs, RegisterTile, BlocksPerSM)
    for columns of ``length`` (``rows`` columns in all), or None where a column is shorter
    than a tile or does not fit on chip. The smallest cluster that holds the strip; a larger
    one (more blocks, each a tile at least) while the strips leave SMs idle."""
    threads, col_lanes, vecs, register_tile, blocks_per_sm = geometry
    probe = ColsStripConfig(threads, col_lanes, vecs, register_tile, blocks_per_sm, 1, 0)
    tile_rows, columns = probe.tile_rows, probe.columns(dtype)
    smem = min(dev.max_smem_per_block, dev.smem_per_sm // blocks_per_sm - _SMEM_RESERVED_PER_BLOCK)
    smem -= _strip_static_smem(threads, columns, dtype)
    tiles_per_block = smem // probe.tile_bytes + int(register_tile)
    if length < tile_rows:
        return None

    def tiles(cluster):  # a block's tiles: ceil(length / cluster) rows
        return _ceil_div(_ceil_div(length, cluster), tile_rows)

    fitting = [c for c in _strip_clusters(dev) if tiles(c) <= tiles_per_block]
    if not fitting:
        return None
    cluster, strips = fitting[0], _ceil_div(rows, columns)
    for larger in fitting[1:]:
        if strips * cluster >= blocks_per_sm * dev.sm_count or _ceil_div(length, larger) < tile_rows:
            break
        cluster = larger
    return ColsStripConfig(threads, col_lanes, vecs, register_tile, blocks_per_sm, cluster, tiles(cluster) - int(register_tile))


def choose_cols_strip(length: int, rows: int, dtype, dev):
    """The one-read column kernel's config for a layout that ``cols_vectorizable``, or None
    (columns shorter than a tile or too long for the chip: the two-read kernels)."""
    for geometry in _COLS_STRIP.get(np.dtype(dtype), ()):
        config = strip_config(length, rows, dtype, dev, geometry)
        if config is not None:
            return config
    return None


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
    smem = min(dev.max_smem_per_block, dev.smem_per_sm // blocks_per_sm - _SMEM_RESERVED_PER_BLOCK)
    smem -= _strip_static_smem(threads, width, dtype, cluster=1)
    max_tiles = min(smem // probe.tile_bytes, _COLS_SPLIT_MAX_SMEM_TILES) + int(register_tile)
    resident, strips = blocks_per_sm * dev.sm_count, _ceil_div(columns, width)
    best = None
    for tiles in range(1, min(max_tiles, _ceil_div(length, tile_rows)) + 1):
        blocks = _ceil_div(length, tiles * tile_rows)
        if blocks > resident:
            continue
        strips_per_wave = min(strips, resident // blocks)
        cost = _ceil_div(strips, strips_per_wave) * (tiles + _COLS_SPLIT_EXCHANGE_TILES)
        if best is None or cost <= best[0]:
            best = (cost, tiles, blocks, strips_per_wave)
    if best is None:
        return None
    _, tiles, blocks, strips_per_wave = best
    return ColsSplitConfig(
        threads, col_lanes, vecs, register_tile, blocks_per_sm, blocks, strips_per_wave, tiles * tile_rows, tiles - int(register_tile)
    )


def choose_cols_split(length: int, columns: int, dtype, dev):
    """The persistent column split's config for a layout that ``cols_vectorizable``, or None
    (no geometry for the dtype, columns shorter than a tile or longer than the grid holds)."""
    for geometry in _COLS_SPLIT.get(np.dtype(dtype), ()):
        config = cols_split_config(length, columns, dtype, dev, geometry)
        if config is not None:
            return config
    return None


def choose_cols(length: int, columns: int, dtype, dev, vectorizable: bool = False):
    """Config for a strided reduced axis over a contiguous inner axis (``vectorizable``: what
    ``cols_vectorizable`` says of the layout). Long columns are split over a cluster where
    there is one, so that the second read hits L2."""

    def cluster(size):
        return size if dev.max_cluster_size >= size and length >= _COLS_CLUSTER_MIN_LENGTH else 1

    split = choose_cols_split(length, columns, dtype, dev) if _COLS_SPLIT_DEFAULT and vectorizable else None
    if split is not None:
        return split
    strip = choose_cols_strip(length, columns, dtype, dev) if _COLS_STRIP_DEFAULT and vectorizable else None
    if strip is not None:
        return strip
    vec = _COLS_VEC.get(np.dtype(dtype).itemsize) if vectorizable else None
    if vec is not None:
        return ColsVecConfig(**vec, cluster=cluster(_COLS_VEC_CLUSTER))
    return ColsConfig(_COLS_SLICES, _COLS_UNROLL[np.dtype(dtype).itemsize], cluster(_COLS_CLUSTER))


def instantiations(dev):
    """Every KernelSpec the softmax configs can pick on ``dev``."""
    from .._dtypes import FLOAT_DTYPES

    specs = []
    for dtype in FLOAT_DTYPES:
        for log in (False, True):
            specs += [with_exp_once(c, dtype).spec(dtype, log) for c in _rows_configs(dtype)]
            if dev.max_cluster_size >= _MAX_CLUSTER:
                specs += [c.spec(dtype, log) for c in _cluster_configs(dtype)]
            specs.append(choose_split(1 << 30, 1, dtype, dev).spec(dtype, log))
            specs += [c.spec(dtype, log) for c in _stashed_configs(dtype, dev) + _stashed_cluster_configs(dtype, dev)]
            if dev.max_cluster_size >= 8:  # every stashed cluster: for forced configs and the sweeps
                geometry = _STASHED_CLUSTER_LADDER.get(np.dtype(dtype).itemsize, (None,))[0]
                specs += [StashedRowsConfig(*geometry, c).spec(dtype, log) for c in _STASHED_CLUSTERS] if geometry else []
            vs = vector_size(dtype)
            vectorizable = {False, cols_vectorizable(1, vs, 0, vs, dtype)}
            cols = [choose_cols(n, 1, dtype, dev, vec) for n in (1, 1 << 20) for vec in sorted(vectorizable)]
            specs += list(dict.fromkeys(c.spec(dtype, log) for c in cols))
            specs += _strip_instantiations(dtype, log, dev)
            specs += [
                ColsSplitConfig(*geometry, 1, 1, 0, 0).spec(dtype, log) for geometry in _COLS_SPLIT.get(np.dtype(dtype), ())
            ]
    return specs


def _strip_instantiations(dtype, log, dev):
    """Every strip kernel ``choose_cols_strip`` can pick for ``dtype`` on ``dev`` (the cluster
    depends on the length and the column count: every one allowed)."""
    return [
        ColsStripConfig(*geometry, cluster, 0).spec(dtype, log)
        for geometry in _COLS_STRIP.get(np.dtype(dtype), ())
        for cluster in _strip_clusters(dev)
    ]
