"""The default selection of the paged-attention kernels (pure; no GPU), and
``instantiations(dev)``, every kernel it can reach. Why: docs/paged_attention.md.

- float32 / float64: ``PagedSimtRows``.
- float16 / bfloat16: ``PagedMmaTile`` by head-dim bucket and the query rows a KV head has
  (G x Nq): up to 16 rows one row warp (4 key warps), up to 32 two, beyond four (row blocks
  of 64); the schedule aims at UNITS_PER_SLOT blocks per resident slot and cuts no chunk
  under MIN_CHUNK keys.
"""
from __future__ import annotations

import dataclasses

from ..._core.dtypes import FLOAT_DTYPES, ctype
from .append import append_spec
from .mma import MMA_CTYPES, PagedMmaTile, merge_spec
from .simt import SIMT_CTYPES, PagedSimtRows

HEAD_DIM_BUCKETS = (64, 128, 256)
ROW_WARPS = (1, 2, 4)
MIN_CHUNK = 512  # keys: a unit's fixed cost (schedule, partials, merge) stays a few % of its reads
UNITS_PER_SLOT = 1  # work units per resident block slot: one wave (experiments/paged_attention/sweep_units.py)
STAGES = 3
VARIANTS = (PagedMmaTile, PagedSimtRows)  # what ``config=`` takes


def head_dim_bucket(head_dim: int) -> int:
    for bucket in HEAD_DIM_BUCKETS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"attention_paged: head dim {head_dim} exceeds {HEAD_DIM_BUCKETS[-1]}")


def row_warps_for(rows: int) -> int:
    """Row warps for the G x Nq query rows of a KV head: 16 rows a warp, at most 4."""
    return 1 if rows <= 16 else 2 if rows <= 32 else 4


def block_keys(head_dim: int, row_warps: int) -> int:
    """Keys per K/V tile: 64, or 32 where 64 would cost a resident block (HD 128 with four row
    warps, HD 256 with two or four); each key warp takes at least 16."""
    if (head_dim == 128 and row_warps == 4) or (head_dim == 256 and row_warps > 1):
        return 32
    return 64


def mma_tile(head_dim: int, row_warps: int, dev) -> PagedMmaTile:
    """The default tile: STAGES deep, 2 where a block's shared memory is short (A100 D256 with
    one row warp: 213 KB at 3 stages against 163 KB)."""
    tile = PagedMmaTile(head_dim=head_dim, row_warps=row_warps, block_n=block_keys(head_dim, row_warps), stages=STAGES,
                        target_units=0, min_chunk=MIN_CHUNK)
    while tile.smem_bytes > dev.max_smem_per_block and tile.stages > 2:
        tile = dataclasses.replace(tile, stages=tile.stages - 1)
    target = dev.sm_count * tile.resident_blocks(dev) * UNITS_PER_SLOT
    return dataclasses.replace(tile, target_units=target)


def choose(problem, dev):
    if problem.ctype in SIMT_CTYPES:
        return PagedSimtRows()
    return mma_tile(head_dim_bucket(problem.width), row_warps_for(problem.rows), dev)


def instantiations(dev) -> list:
    """Every kernel ``choose`` and kv_append can reach on ``dev``."""
    specs = []
    for name in MMA_CTYPES:
        specs.extend(mma_tile(bucket, warps, dev).spec(name) for bucket in HEAD_DIM_BUCKETS for warps in ROW_WARPS)
        specs.append(merge_spec(name))
    specs.extend(PagedSimtRows().spec(name) for name in SIMT_CTYPES)
    specs.extend(append_spec(ctype(dtype)) for dtype in FLOAT_DTYPES)
    return list(dict.fromkeys(specs))

