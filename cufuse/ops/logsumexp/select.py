"""The default logsumexp selection: pure rules from the problem and the DeviceInfo
(docs/logsumexp.md, "Dispatch"), and every instantiation they can reach."""
from __future__ import annotations

from ..._core.device import ceil_div
from ..._core.dtypes import FLOAT_DTYPES
from .problem import LogsumexpProblem
from .variants import ColsConfig, ColsShortConfig, ColsShortVecConfig, RowsConfig

VARIANTS = (RowsConfig, ColsConfig, ColsShortConfig, ColsShortVecConfig)
THREADS = 256
TILE_VECS = 4  # 16-byte vectors a thread a tile: 64 bytes in flight a thread
NARROW_GROUPS = (1, 2, 4, 8, 16, 32)
WAVES = 4  # blocks of split rows or strips: about this many waves of resident blocks
# Column rows of up to 16 elements: all in registers, a thread a row (any layout) or a 16-byte
# vector of adjacent rows (column_vectors). logsumexp_cols keeps its 8 warps busy only from 8
# runs of 16 / 8 / 4 elements; a row of 16 is what a thread holds in 64 registers of vectors.
SHORT = ColsShortConfig(threads=THREADS, max_length=16)
SHORT_VEC_THREADS = 128  # fine blocks: the weighted rungs keep 3-8 an SM
# (MaxLength, BlocksPerSM) of the vector rungs, the smallest holding the row wins: the launch
# bound caps the registers (40, 64, 128 a thread unweighted) so that a short row keeps more
# threads, and their loads, resident; weighted rows hold a and b (56, 96, 168: their own counts).
SHORT_VEC_RUNGS = {False: ((4, 12), (8, 8), (16, 4)), True: ((4, 8), (8, 5), (16, 3))}


def _resident_blocks(dev, threads: int) -> int:
    return dev.sm_count * (2048 // threads)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def choose_rows(problem: LogsumexpProblem, dev) -> RowsConfig:
    """Up to 128 slots: the smallest sub-warp group holding the row in one tile (4 vectors a
    lane; 1-4 slots: one lane, 1, 2 or 4 vectors). Longer rows: a warp a row where the rows
    fill two waves of warps and a warp takes at most 32 tiles; else a block a part, the parts
    putting about WAVES waves of blocks on the GPU, each at least a tile."""
    nv = problem.vectors
    if nv <= TILE_VECS:
        return RowsConfig(threads=THREADS, group=1, vecs=_pow2_at_least(nv))
    if nv <= 32 * TILE_VECS:
        return RowsConfig(threads=THREADS, group=_pow2_at_least(ceil_div(nv, TILE_VECS)), vecs=TILE_VECS)
    warps = dev.sm_count * 2048 // 32
    if problem.rows >= 2 * warps and nv <= 32 * 32 * TILE_VECS:
        return RowsConfig(threads=THREADS, group=32, vecs=TILE_VECS)
    tiles = ceil_div(nv, THREADS * TILE_VECS)
    parts = max(1, min(tiles, ceil_div(WAVES * _resident_blocks(dev, THREADS), problem.rows), 4096))
    return RowsConfig(threads=THREADS, group=THREADS, vecs=TILE_VECS, parts=parts)


def short_vec(length: int, weighted: bool) -> ColsShortVecConfig:
    """The vector rung that holds rows of ``length`` (at most 16)."""
    max_length, blocks_per_sm = next(rung for rung in SHORT_VEC_RUNGS[weighted] if length <= rung[0])
    return ColsShortVecConfig(threads=SHORT_VEC_THREADS, max_length=max_length, blocks_per_sm=blocks_per_sm)


def choose_cols(problem: LogsumexpProblem, dev):
    """Rows of up to 16 elements in registers (a thread a vector of rows where column_vectors,
    else a thread a row). Longer: 8 warps a strip of 32 rows, 16 / 8 / 4 loads in flight a lane
    by itemsize; parts of the reduced axis where the strips alone fill fewer than WAVES waves,
    each at least two runs a warp, at most 64."""
    if problem.length <= SHORT.max_length:
        return short_vec(problem.length, problem.weighted) if problem.column_vectors else SHORT
    unroll = {2: 16, 4: 8, 8: 4}[problem.dtype.itemsize]
    slices = 8
    strips = ceil_div(problem.rows, 32)
    parts = max(1, min(64, ceil_div(WAVES * _resident_blocks(dev, 32 * slices), strips),
                       ceil_div(problem.length, 2 * slices * unroll)))
    return ColsConfig(slices=slices, unroll=unroll, parts=parts)


def choose(problem: LogsumexpProblem, dev):
    return choose_cols(problem, dev) if problem.column_layout else choose_rows(problem, dev)


def instantiations(dev) -> list:
    """Every kernel ``choose`` can reach, for each dtype, with and without weights."""
    specs = []
    rows_configs = [RowsConfig(threads=THREADS, group=1, vecs=v) for v in (1, 2, 4)]
    rows_configs += [RowsConfig(threads=THREADS, group=g, vecs=TILE_VECS) for g in NARROW_GROUPS[1:]]
    rows_configs.append(RowsConfig(threads=THREADS, group=THREADS, vecs=TILE_VECS))
    for dtype in FLOAT_DTYPES:
        for weighted in (False, True):
            specs += [c.spec(dtype, weighted) for c in rows_configs]
            specs.append(ColsConfig(slices=8, unroll={2: 16, 4: 8, 8: 4}[dtype.itemsize]).spec(dtype, weighted))
            specs.append(SHORT.spec(dtype, weighted))
            specs += [short_vec(length, weighted).spec(dtype, weighted) for length, _ in SHORT_VEC_RUNGS[weighted]]
    return specs
