"""The launch of a linear variant as a ``Plan`` (pure): the arguments every linear kernel
shares, the split-K workspace, programmatic dependent launch.

Every linear kernel takes ``(x | x's tensor map, weight | its tensor map, bias, out,
workspace, counters, scalars..., activation)`` (the gated kernels ``(x, w_gate, w_up, out,
...)``); without split-K the workspace and counters are null pointers. The split-K workspace
(float32 cells: one slot of partial sums per split, and one int counter per output tile) is
reusable scratch held per (device, stream): the kernels leave the counters zero, and sum the
slots in split order (bitwise reproducible results).
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.plans import NULL, Launch, Plan, Scratch, ScratchRequest, TensorMap
from .operands import l2_promotion, operand_maps
from .tiling import effective_splits, tile_count

# Every linear kernel starts with begin_dependent_grid() (kernels/common/common.cuh); on
# compute capability 9.0 the weight streams (M <= PDL_MAX_M, ~35 us kernels whose launch gap
# is worth 4 %) launch with programmatic dependent launch (docs/linear.md).
PDL_MAX_M = 64


def uses_pdl(m: int, dev) -> bool:
    return dev.has_pdl and m <= PDL_MAX_M


def workspace(splits: int, cells: int, tiles: int) -> tuple:
    """(workspace and counters arguments, ScratchRequest or None) of a kernel split ``splits``
    ways: ``cells`` float32 cells (the splits' slots), ``tiles`` counters."""
    if splits == 1:
        return (NULL, NULL), None
    request = ScratchRequest("linear-split-slots", ((np.float32, cells, True), (np.int32, tiles, True)))
    return (Scratch(0), Scratch(1)), request


def single_launch(problem, dev, spec, grid, block, smem, operands, splits_args, scalars) -> Plan:
    """The one launch of a linear call: ``operands`` (x and the weight, or their maps), then
    bias, out (a gated problem: out alone), the workspace arguments of ``splits_args``
    (``workspace``'s result), scalars, the activation."""
    (workspace_args, scratch) = splits_args
    arrays = operands + (("out",) if problem.gated else ("bias", "out"))
    launch = Launch(spec, grid, block, arrays + workspace_args + tuple(scalars) + (np.int32(problem.activation),),
                    smem, pdl=uses_pdl(problem.m, dev))
    return Plan((launch,), scratch)


def tiled_plan(config, problem, dev, spec, *, tma_x_rows=0, flags=(), value_cells=1, persistent_blocks=0) -> Plan:
    """The plan of a tiled tensor-core kernel (mma, wgmma, the TMA kernels, 3xTF32, DMMA):
    grid (tiles, 1, splits), arguments ``(m, n, k[, ldx, ldw], bias stride, k tiles per split,
    raster group, *flags, activation)`` (gated: ``ldx, ldw of w_gate, ldw of w_up`` and no
    bias stride; its tiles hold BN / 2 output columns). The TMA kernels (``tma_x_rows``: the
    rows of their x boxes) take tensor maps of x and the weight (gated: of w_gate and of w_up)
    in place of the operands and their strides (weight boxes of BN rows K-major, BN / 2 a
    gated weight; BK N-major). Split-K through slots needs ``value_cells`` float32 cells per
    accumulator (2 for float64). ``persistent_blocks``: a persistent kernel's grid, at most that
    many blocks walking the tiles (0: a block a tile)."""
    tile, m, n, k = config.tile, problem.m, problem.n, problem.k
    tiles = tile_count(m, problem.tile_columns, tile)
    k_tiles = math.ceil(k / tile.bk)
    splits = effective_splits(max(k_tiles, 1), config.splits)
    i64 = np.int64
    p = problem
    weights = ("w_gate", "w_up") if p.gated else ("weight",)
    if not tma_x_rows:
        strides = (p.ldx, p.ldw, p.ldw_up) if p.gated else (p.ldx, p.ldw)
        operands, strides = ("x",) + weights, tuple(i64(s) for s in strides)
    else:
        w_rows = tile.bn // len(weights) if p.kmajor else tile.bk
        maps = [operand_maps(p.dtype, m, n, k, p.ldx, ldw, p.kmajor, tma_x_rows, w_rows, l2_promotion(m))
                for ldw in ((p.ldw, p.ldw_up) if p.gated else (p.ldw,))]
        operands = (TensorMap("x", maps[0][0]),) + tuple(TensorMap(w, g[1]) for w, g in zip(weights, maps))
        strides = ()
    bias_stride = () if problem.gated else (problem.bias_scalar,)
    scalars = (i64(m), i64(n), i64(k)) + strides + bias_stride + (np.int32(math.ceil(k_tiles / splits)),
                                                                  np.int32(config.raster_group)) + tuple(flags)
    cells = tiles * splits * tile.bm * tile.bn * value_cells
    blocks = min(tiles, persistent_blocks) if persistent_blocks else tiles
    return single_launch(problem, dev, spec, (blocks, 1, splits), (tile.threads, 1, 1),
                         tile.smem_bytes(problem.itemsize), operands, workspace(splits, cells, tiles), scalars)
