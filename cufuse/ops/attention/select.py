"""The default selection of the attention kernels (pure; no GPU): from the problem's shapes,
layout and dtype and the device's facts to one variant, and ``instantiations(dev)``, every
kernel it can reach. Why each rule and table entry: docs/attention.md.

- float32 / float64: ``SimtRows`` (no tensor-core kernel takes them).
- one query head per KV head (``group`` 1), at most DECODE_STREAM_MAX_QUERIES query rows,
  k / v rows of 16 bytes: ``DecodeTile`` with the keys split to fill the device
  (``split_decode_keys``).
- other decode shapes (Nq <= DECODE_MAX_QUERIES), in particular grouped-query heads: the
  ``key_warps`` ``FlashMmaTile`` of ``decode_tile`` on the packed rows (G heads x Nq queries
  of one KV head: each K/V tile read once per KV head), keys split the same way.
- prefill: on compute capability 9.0 the ``FlashWgmmaTile`` of WGMMA_PREFILL (of
  WGMMA_PREFILL_CP_ASYNC where tensor maps cannot describe the operands) where its
  preconditions hold and the grid needs no key split, else the ``FlashMmaTile`` of
  ``prefill_tile``; mma tiles split their keys by the wave model (``split_keys``).
- attention_varlen (``choose_varlen``): on compute capability 9.0, 16-bit, operands a tensor map
  describes, the varlen form of WGMMA_PREFILL's TMA tile (VARLEN_WGMMA); else
  ``VarlenSimtRows``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core.device import BLOCKS_PER_SM, REGISTERS_PER_SM, SMEM_RESERVED_PER_BLOCK, THREADS_PER_SM, DeviceInfo
from ..._core.dtypes import ctype
from .decode import DECODE_HEAD_DIMS, DecodeTile, decode_head_dim
from .merge import merge_spec
from .mma import FlashMmaTile
from .problem import MMA_CTYPES, NO_WINDOW, AttentionProblem, key_span
from .simt import SIMT_CTYPES, SimtRows
from .varlen_simt import VarlenSimtRows, instantiations as varlen_instantiations
from .varlen_wgmma import VarlenWgmmaTile, refusal as varlen_wgmma_refusal
from .wgmma import FlashWgmmaTile, packs_uniformly, tma_refusal

HEAD_DIM_BUCKETS = (32, 64, 96, 128, 192, 256)  # the head dims a FlashMmaTile is built for
DECODE_MAX_QUERIES = 16  # one MMA row slice
# attention_decode reads K/V once per query row (the rows of a split are adjacent blocks and
# share K/V in L2): worth it while the L2 re-reads stay cheap.
DECODE_STREAM_MAX_QUERIES = 4
DECODE_STREAM_TILE = dict(warps=4, unroll=8)  # 4.2-4.5 TB/s on the H200 (the decode sweep)
DECODE_MIN_KEYS_PER_SPLIT = 512
DECODE_BLOCKS_PER_SLOT = 2  # attention_decode blocks launched per resident-block slot (tail balance)
MAX_KEY_SPLITS = 128
# Decode splits: one KV head (B x Hkv = 1) takes a split per resident slot of the packed decode
# tile (~264 on the H200), and attention_decode (two a slot of 16 an SM) up to this cap;
# attention_merge's warps take the splits in parallel.
DECODE_MAX_SPLITS = 512
PACKED_DECODE_WARPS, PACKED_DECODE_KEYS, PACKED_DECODE_STAGES = 4, 16, 3  # 64 keys a stage
SPLIT_OVERHEAD_TILES = 2  # per-block fixed cost of the wave model, in K/V tiles (prologue, epilogue, merge)
SPLIT_MIN_GAIN = 0.05  # modelled gain a key split needs over one split (the merge is not modelled)
SHORT_KEYS_MAX = 512  # mean keys a query row sees up to which the 2-blocks-per-SM D96-128 mma tile runs

_W = FlashWgmmaTile
# The wgmma prefill tile per head-dim bucket: (mean keys a query row sees up to which the tile
# runs, tile), first match wins (H100 prefill against FA4 and cuDNN, docs/attention.md): a TMA
# producer warpgroup feeding ping-ponged consumer warpgroups wherever q, k and v map onto tensor
# maps (1.05-1.5x the cp.async tiles from 1024 keys a row): D64 3 consumers x 128-key tiles
# (softmax-bound: a third warpgroup hides the exps), D96 and D128 2 x 128-key tiles, D256
# 2 x 64-key tiles (O takes 128 registers a thread); up to 512 keys at D64 the cp.async tile
# of 2 blocks per SM (a second block hides a block's prologue and epilogue). Head dims between
# take the next tile up, zero-padded (D32 on D64, D80 on D96, D160-192 on D256).
WGMMA_PREFILL = {
    64: ((512, _W(head_dim=64, warpgroups=2, block_n=64, stages=2, min_blocks=2)),
         (math.inf, _W(head_dim=64, warpgroups=3, block_n=128, stages=2, tma=True))),
    96: ((math.inf, _W(head_dim=96, warpgroups=2, block_n=128, stages=2, tma=True)),),
    128: ((math.inf, _W(head_dim=128, warpgroups=2, block_n=128, stages=2, tma=True)),),
    256: ((math.inf, _W(head_dim=256, warpgroups=2, block_n=64, stages=2, tma=True)),),
}
# Where a tensor map cannot describe an operand (batch strides not a multiple of 16 bytes or
# negative, rows overlapping): the cp.async tiles, every thread loading (H200 wgmma sweeps):
# D64 up to 512 keys as above, up to 1536 3 warpgroups x 128-key tiles with per-warpgroup key
# ranges, beyond the same tile with block-wide ranges; D96 and D128 3 warpgroups x 64-key
# tiles (D96's MMAs and copies stop at 96 columns; shared memory as D128's); D256 2 x 64.
WGMMA_PREFILL_CP_ASYNC = {
    64: (WGMMA_PREFILL[64][0],
         (1536, _W(head_dim=64, warpgroups=3, block_n=128, stages=2)),
         (math.inf, _W(head_dim=64, warpgroups=3, block_n=128, stages=2, wg_ranges=False))),
    96: ((math.inf, _W(head_dim=96, warpgroups=3, block_n=64, stages=2)),),
    128: ((math.inf, _W(head_dim=128, warpgroups=3, block_n=64, stages=2)),),
    256: ((math.inf, _W(head_dim=256, warpgroups=2, block_n=64, stages=2)),),
}
# attention_varlen's wgmma tile per head-dim bucket: the long-key TMA tile of WGMMA_PREFILL (its
# last rule), the one dense prefill runs from 512 keys a row on; its blocks are (virtual query
# tile, head) items of one sequence each, so the dense rules apply per sequence.
VARLEN_WGMMA = {bucket: VarlenWgmmaTile.of(rules[-1][1]) for bucket, rules in WGMMA_PREFILL.items()}
# Packed decode rows (G x Nq of one KV head) from which the long-key TMA tile of WGMMA_PREFILL
# takes them (packed=True, keys split by the wave model): from a warpgroup's 64 rows the 4-warp
# mma tile needs two or more blocks a KV head, each re-reading its keys, and computes at a
# fraction of warpgroup MMA's rate (G8 x Nq8 0.42, G16 x Nq8 0.22 of the copy, H200).
WGMMA_PACKED_MIN_ROWS = 64


def packed_wgmma_tile(width: int) -> FlashWgmmaTile:
    """The TMA tile taking packed decode rows of head dim ``width`` (max of D and Dv), unsplit."""
    return dataclasses.replace(WGMMA_PREFILL[min(h for h in WGMMA_PREFILL if width <= h)][-1][1], packed=True)


def head_dim_bucket(head_dim: int) -> int:
    """The smallest bucket holding ``head_dim`` (1..256)."""
    for bucket in HEAD_DIM_BUCKETS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"attention: head dim {head_dim} exceeds {HEAD_DIM_BUCKETS[-1]}")


def mean_visible_keys(n_q: int, n_k: int, causal: bool, window: tuple = NO_WINDOW) -> float:
    """Mean keys a query row sees; bottom-right causal: row i sees clip(i + n_k - n_q + 1, 0, n_k),
    so the rows that see keys see n_k - rows + 1 ... n_k of them. ``window`` (left, right), -1
    unlimited: row i at p = i + n_k - n_q sees [p - left, p + right] within [0, n_k)."""
    if window == NO_WINDOW:
        if not causal:
            return n_k
        rows = min(n_q, n_k)
        return rows * (2 * n_k - rows + 1) / 2 / n_q
    left, right = window
    right = 0 if causal else right
    position = np.arange(n_q, dtype=np.int64) + (n_k - n_q)
    lo = np.maximum(position - left, 0) if left >= 0 else np.zeros_like(position)
    hi = np.minimum(position + right, n_k - 1) if right >= 0 else np.full_like(position, n_k - 1)
    return float(np.clip(hi - lo + 1, 0, None).mean()) if n_q else 0.0


def fit_smem(tile: FlashMmaTile, dev: DeviceInfo) -> FlashMmaTile:
    """Halve the key tile until the tile fits the device's shared memory (A100: D128 and D256)."""
    while tile.smem_bytes > dev.max_smem_per_block:
        tile = dataclasses.replace(tile, block_n=tile.block_n // 2)
    return tile


def prefill_tiles(head_dim: int, dev: DeviceInfo) -> tuple:
    """The mma prefill tiles of a head-dim bucket, long-key tile first (the prefill sweep): up to
    64 columns 4 warps x 64 keys at 3 blocks per SM; 96-128 the 8-warp 128-key tile and the
    2-blocks-per-SM short-key tile; wider heads 8 warps of one slice, Q from shared memory,
    64-key tiles so O fits in registers. Branch-free with Q in registers up to 128 columns,
    except where a warp holds 128 x 128 scores and columns (the D128 128-key tile): its 255
    registers spilled once the window's mask joined the loop, and Q from shared memory costs
    it 8 ldmatrix a tile beside K's 64."""
    if head_dim <= 64:
        tiles = (FlashMmaTile(head_dim=head_dim, warps=4, m_tiles=1, block_n=64, stages=2, min_blocks=3,
                              q_in_regs=True, skip_pad_cols=False),)
    elif head_dim <= 128:
        tiles = (FlashMmaTile(head_dim=head_dim, warps=8, m_tiles=1, block_n=128, stages=2, min_blocks=1,
                              q_in_regs=True, skip_pad_cols=False),
                 FlashMmaTile(head_dim=head_dim, warps=4, m_tiles=1, block_n=64, stages=2, min_blocks=2,
                              q_in_regs=True, skip_pad_cols=False))
    else:
        tiles = (FlashMmaTile(head_dim=head_dim, warps=8, m_tiles=1, block_n=64, stages=2),)
    tiles = (fit_smem(tile, dev) for tile in tiles)
    return tuple(dataclasses.replace(tile, q_in_regs=False) if tile.head_dim * tile.block_n >= 128 * 128 else tile
                 for tile in tiles)


def prefill_tile(head_dim: int, dev: DeviceInfo, n_q: int, n_k: int, causal: bool,
                 window: tuple = NO_WINDOW) -> FlashMmaTile:
    """The mma prefill tile of a head-dim bucket for a call's key range (see prefill_tiles)."""
    tiles = prefill_tiles(head_dim, dev)
    if len(tiles) > 1 and mean_visible_keys(n_q, n_k, causal, window) <= SHORT_KEYS_MAX:
        return tiles[1]
    return tiles[0]


def max_decode_m_tiles(head_dim: int) -> int:
    """16-row slices the packed decode tile holds (its O accumulator: 16 x m_tiles x head_dim
    floats a warp): 4 up to D64, 2 up to D128, else 1."""
    return 4 if head_dim <= 64 else 2 if head_dim <= 128 else 1


def decode_tile(head_dim: int, rows: int, dev: DeviceInfo) -> FlashMmaTile:
    """Nq <= 16 on ``rows`` packed rows (G x Nq): 4 warps share the rows (1, 2 or 4 slices of
    16, up to max_decode_m_tiles; more rows take more blocks) and split each 64-key stage of a
    3-stage cp.async ring (2 where shared memory is short: A100 D256), then merge. Q in
    registers up to D128."""
    slices = math.ceil(max(rows, 1) / 16)
    m_tiles = min(max_decode_m_tiles(head_dim), 1 << (slices - 1).bit_length())
    tile = FlashMmaTile(head_dim=head_dim, warps=PACKED_DECODE_WARPS, m_tiles=m_tiles, block_n=PACKED_DECODE_KEYS,
                        stages=PACKED_DECODE_STAGES, q_in_regs=m_tiles * head_dim <= 128, key_warps=True)
    while tile.smem_bytes > dev.max_smem_per_block and tile.stages > 2:
        tile = dataclasses.replace(tile, stages=tile.stages - 1)
    return tile


def decode_tiles(head_dim: int, dev: DeviceInfo) -> tuple:
    """Every decode_tile of a head-dim bucket."""
    return tuple(dict.fromkeys(decode_tile(head_dim, 16 * m, dev) for m in (1, 2, 4)))


def blocks_per_sm(tile, dev: DeviceInfo) -> int:
    """The wave model's resident blocks per SM of a tile: shared memory, threads, and registers
    (assumed 255 per thread unless ``min_blocks`` caps them)."""
    by_regs = max(tile.min_blocks, REGISTERS_PER_SM // (tile.threads * 255))
    by_smem = dev.smem_per_sm // (tile.smem_bytes + SMEM_RESERVED_PER_BLOCK)
    return max(1, min(by_smem, THREADS_PER_SM // tile.threads, by_regs, BLOCKS_PER_SM))


def choose_key_splits(base_blocks: int, n_tiles: int, slots: int) -> int:
    """Key splits minimising the modelled time ``waves * (tiles per block + overhead)``
    where ``waves = ceil(base_blocks * splits / slots)``; a split must beat one split by
    SPLIT_MIN_GAIN (the merge pass and the float32 partials are not in the model: at a near
    tie, e.g. 4096 blocks on 132 slots, one split is faster); ties go to fewer splits."""
    if base_blocks <= 0 or n_tiles <= 1:
        return 1

    def cost(splits):
        return math.ceil(base_blocks * splits / slots) * (math.ceil(n_tiles / splits) + SPLIT_OVERHEAD_TILES)

    best = min(range(1, min(MAX_KEY_SPLITS, n_tiles) + 1), key=lambda splits: (cost(splits), splits))
    return best if cost(best) < (1 - SPLIT_MIN_GAIN) * cost(1) else 1


def key_splits(tile, n_q: int, n_k: int, batch_count: int, dev: DeviceInfo) -> tuple:
    """``(splits, keys_per_split)`` of the wave model for an mma or wgmma tile whose blocks
    see at most ``n_k`` keys each (a window's span: ``AttentionProblem.key_span``), no split
    left empty (keys_per_split 0 with one split). Nk = 0 raises ZeroDivisionError."""
    n_tiles = math.ceil(n_k / tile.stage_keys)
    base_blocks = math.ceil(n_q / tile.block_m) * batch_count
    splits = choose_key_splits(base_blocks, n_tiles, dev.sm_count * blocks_per_sm(tile, dev))
    tiles_per_split = math.ceil(n_tiles / splits)
    splits = math.ceil(n_tiles / tiles_per_split)  # no empty trailing split
    return (1, 0) if splits == 1 else (splits, tiles_per_split * tile.stage_keys)


def split_keys(tile: FlashMmaTile, n_q: int, n_k: int, batch_count: int, dev: DeviceInfo) -> FlashMmaTile:
    """``tile`` with the key split of the wave model (also for a tile a sweep gives); ``n_k``
    the keys a block sees at most (``AttentionProblem.key_span``)."""
    splits, keys_per_split = key_splits(tile, n_q, n_k, batch_count, dev)
    return dataclasses.replace(tile, splits=splits, keys_per_split=keys_per_split)


def decode_key_split(n_k: int, target_splits: int, granule: int, max_splits: int, splits: int | None = None) -> tuple:
    """``(splits, keys_per_split)`` of a decode tile: by default ``target_splits``, but no
    split under DECODE_MIN_KEYS_PER_SPLIT keys; ``splits`` forces a count. Splits are
    multiples of ``granule`` keys, none empty."""
    if splits is None:
        splits = min(max_splits, target_splits, max(1, n_k // DECODE_MIN_KEYS_PER_SPLIT))
    splits = max(1, min(splits, max_splits, math.ceil(n_k / granule)))
    keys_per_split = max(1, math.ceil(math.ceil(n_k / splits) / granule)) * granule
    splits = max(1, math.ceil(n_k / keys_per_split))  # no empty trailing split
    return splits, keys_per_split if splits > 1 else 0


def split_decode_keys(tile: DecodeTile, n_q: int, n_k: int, batch_count: int, dev: DeviceInfo,
                      splits: int | None = None) -> DecodeTile:
    """``tile`` (one query row a block) with its decode key split (``decode_key_split``)."""
    slots = dev.sm_count * min(BLOCKS_PER_SM, THREADS_PER_SM // tile.threads)
    target = math.ceil(DECODE_BLOCKS_PER_SLOT * slots / max(1, n_q * batch_count))
    splits, keys = decode_key_split(n_k, target, tile.group_keys, DECODE_MAX_SPLITS, splits)
    return dataclasses.replace(tile, splits=splits, keys_per_split=keys)


def split_packed_decode_keys(tile: FlashMmaTile, rows: int, n_k: int, batch_count: int, dev: DeviceInfo,
                             splits: int | None = None) -> FlashMmaTile:
    """A packed decode tile on ``rows`` rows per batch item with its decode key split: as many
    blocks as resident slots, never a partial second wave
    (experiments/attention/sweep_decode_splits.py, H200, the 128 MiB G 4-16 points): 256
    blocks on 264 slots 47.5-48.7 us a call, 512 (two a slot, the rule before) 53-56, 376
    57-60; one KV head x 1M keys: 264 and 512 splits within 2 %."""
    slots = dev.sm_count * blocks_per_sm(tile, dev)
    base = math.ceil(rows / tile.block_m) * batch_count
    splits, keys = decode_key_split(n_k, max(1, slots // base), tile.stage_keys, DECODE_MAX_SPLITS, splits)
    return dataclasses.replace(tile, splits=splits, keys_per_split=keys)


def wgmma_prefill_tile(n_q: int, n_k: int, head_dim: int, head_dim_v: int, batch_count: int, dev: DeviceInfo,
                       wgmma_operands: bool, causal: bool, window: tuple = NO_WINDOW,
                       tma_maps: bool = True) -> FlashWgmmaTile | None:
    """The wgmma prefill tile of a call (WGMMA_PREFILL, or WGMMA_PREFILL_CP_ASYNC without
    ``tma_maps``, by the smallest tile head dim holding D and Dv, then by the keys a row
    sees), or None where the kernel does not apply: not
    compute capability 9.0, operands without 16-byte rows or a non-positive scale without a
    softcap (``wgmma_operands`` False), or a grid of less than one wave of blocks where the
    wave model would split the keys (the mma tiles split). From one wave on the kernel runs
    unsplit: it has no key split, and at 1.1-2.6x the mma tiles' rate
    the wave's tail costs less than the slower kernel's split (one sequence x 32 heads x 4096
    causal keys at D128: 5.3 waves, which the wave model split onto the mma tile at 0.4x)."""
    width = max(head_dim, head_dim_v)
    if not (dev.has_wgmma and wgmma_operands):
        return None
    table = WGMMA_PREFILL if tma_maps else WGMMA_PREFILL_CP_ASYNC
    bucket = min(h for h in table if width <= h)
    keys = mean_visible_keys(n_q, n_k, causal, window)
    tile = next(tile for max_keys, tile in table[bucket] if keys <= max_keys)
    blocks = math.ceil(n_q / tile.block_m) * batch_count
    if blocks >= dev.sm_count * blocks_per_sm(tile, dev):
        return tile
    span = key_span(min(tile.block_m, n_q), n_k, causal, window)
    return tile if key_splits(tile, n_q, span, batch_count, dev)[0] == 1 else None


def choose(problem: AttentionProblem, dev: DeviceInfo):
    """The default variant for ``problem`` on ``dev`` (``choose_by_sizes`` of its facts)."""
    p = problem
    packed_tma = packs_uniformly(p) and tma_refusal(p.packed()) is None
    return choose_by_sizes(p.n_q, p.n_k, p.head_dim, p.head_dim_v, p.batch_count, p.dtype, dev, p.kv_rows_16b, p.causal,
                           p.wgmma_operands, p.packed().group, p.window, tma_refusal(p) is None, packed_tma)


def choose_by_sizes(n_q: int, n_k: int, head_dim: int, head_dim_v: int, batch_count: int, dtype, dev: DeviceInfo,
                    kv_rows_16b: bool = False, causal: bool = False, wgmma_operands: bool = False, group: int = 1,
                    window: tuple = NO_WINDOW, tma_maps: bool = True, packed_tma: bool = False):
    """The default variant of a call of these sizes. ``kv_rows_16b``: k and v have unit column stride and
    16-byte aligned rows (attention_decode's precondition). ``wgmma_operands``: q, k and v
    all have such rows and the scale is positive or a softcap applies (attention_fwd_wgmma's).
    ``group``: query heads (of the ``batch_count``) sharing each K/V head, which a decode tile
    packs into rows (``AttentionProblem.packed``). ``window`` (left, right), -1 unlimited: the
    tiles go by the keys a row sees, the key splits by the keys a block sees (``key_span``).
    ``tma_maps``: tensor maps can describe q, k and v (``wgmma.tma_refusal``); else the wgmma
    prefill takes the cp.async tiles. ``packed_tma``: they can with the group packed into the
    rows (``wgmma.packs_uniformly``), which the TMA tile then takes from WGMMA_PACKED_MIN_ROWS."""
    if ctype(dtype) in SIMT_CTYPES:
        return SimtRows()
    width = max(head_dim, head_dim_v)

    def span(positions):
        return key_span(positions, n_k, causal, window)

    if group == 1 and n_q <= DECODE_STREAM_MAX_QUERIES and kv_rows_16b:
        tile = DecodeTile(head_dim=decode_head_dim(width), **DECODE_STREAM_TILE)
        return split_decode_keys(tile, n_q, span(1), batch_count, dev)
    bucket = head_dim_bucket(width)
    if n_q <= DECODE_MAX_QUERIES:
        rows = n_q * group
        if rows >= WGMMA_PACKED_MIN_ROWS and packed_tma and wgmma_operands and dev.has_wgmma:
            tile = packed_wgmma_tile(width)
            return split_keys(tile, rows, span(min(tile.block_m, n_q)), batch_count // group, dev)
        tile = decode_tile(bucket, rows, dev)
        return split_packed_decode_keys(tile, rows, span(min(tile.block_m, n_q)), batch_count // group, dev)
    wgmma = wgmma_prefill_tile(n_q, n_k, head_dim, head_dim_v, batch_count, dev, wgmma_operands, causal, window,
                               tma_maps)
    if wgmma is not None:
        return wgmma
    tile = prefill_tile(bucket, dev, n_q, n_k, causal, window)
    return split_keys(tile, n_q, span(min(tile.block_m, n_q)), batch_count, dev)


def choose_varlen(problem, dev: DeviceInfo):
    """The default variant of an attention_varlen ``problem`` (``VarlenProblem``) on ``dev``: the
    VARLEN_WGMMA tile of the smallest bucket holding D and Dv where ``varlen_wgmma.refusal`` finds
    nothing against it, else ``VarlenSimtRows`` (float32 / float64, other devices, strides or
    alignments a tensor map cannot take, B = 0)."""
    bucket = min(h for h in VARLEN_WGMMA if problem.width <= h)
    tile = VARLEN_WGMMA[bucket]
    if varlen_wgmma_refusal(problem, dev, tile.block_n) is None:
        return tile
    return VarlenSimtRows()


def instantiations(dev: DeviceInfo) -> list:
    """Every kernel ``choose`` can reach on ``dev``."""
    specs = []
    for name in MMA_CTYPES:
        for bucket in HEAD_DIM_BUCKETS:
            specs.extend(tile.spec(name) for tile in prefill_tiles(bucket, dev))
            specs.extend(tile.spec(name) for tile in decode_tiles(bucket, dev))
        specs.extend(DecodeTile(head_dim=bucket, **DECODE_STREAM_TILE).spec(name) for bucket in DECODE_HEAD_DIMS)
        specs.append(merge_spec(name))
        if dev.has_wgmma:
            specs.extend(tile.spec(name) for table in (WGMMA_PREFILL, WGMMA_PREFILL_CP_ASYNC)
                         for rules in table.values() for _, tile in rules)
    specs.extend(SimtRows().spec(name) for name in SIMT_CTYPES)
    specs.extend(varlen_instantiations())  # attention_varlen
    if dev.has_wgmma:
        specs.extend(tile.spec(name) for name in MMA_CTYPES for tile in VARLEN_WGMMA.values())
    return list(dict.fromkeys(specs))
