"""Kernel configurations of the attention op (pure; no GPU needed).

f16/bf16 run ``attention_fwd_mma`` (tensor cores), float32/float64 ``attention_fwd_simt``.
An ``MmaTile`` fixes one instantiation: the padded head dim (a bucket covering both D and
Dv), warps, 16-row MMA slices per warp, keys per K/V tile and pipeline stages. Prefill
(Nq > 16) picks its tile by head dim and, at 96-128 columns, by the keys a row sees
(``prefill_tiles``). Decode with at most DECODE_STREAM_MAX_QUERIES rows and
16-byte K/V rows streams K/V straight into registers (``attention_decode``, a
``DecodeTile``); other decode shapes use one-warp MMA blocks with a deeper pipeline. All
may split the keys over ``splits`` blocks (merged by ``attention_merge``) when the grid is
too small to fill the device. On compute capability 9.0 a ``WgmmaTile`` runs the Hopper
prefill kernel ``attention_fwd_wgmma`` (warpgroup MMA, head dims up to 64 or 128, one key
split), the prefill default there for head-dim buckets 64 and 128 (``wgmma_prefill_tile``).
"""
from __future__ import annotations

import dataclasses
import functools
import math

from .._dtypes import ctype
from .._loader import KernelSpec

SOURCE = "attention.cu"
HEAD_DIM_BUCKETS = (32, 64, 96, 128, 192, 256)
MMA_CTYPES = ("__half", "__nv_bfloat16")
SIMT_CTYPES = ("float", "double")
SIMT_WARPS = 4  # query rows per SIMT block (one per warp)
DECODE_MAX_QUERIES = 16  # one MMA row slice
SMEM_PITCH_PAD = 8  # elements added to every shared-memory row (bank-conflict-free ldmatrix)
SMEM_RESERVED_PER_BLOCK = 1024  # the driver's per-block shared-memory reservation
MAX_SPLITS = 128
# Per-block fixed cost of the wave model, in K/V tiles (prologue, epilogue, merge share).
SPLIT_OVERHEAD_TILES = 2
SPLIT_MIN_GAIN = 0.05  # modelled gain a key split needs over one split
MERGE_THREADS = 128
# Runtime flag bits of the forward kernels (kernels/attention.cu: enum Flags).
FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_VEC_Q, FLAG_VEC_K, FLAG_VEC_V = 1, 2, 4, 8, 16


@dataclasses.dataclass(frozen=True)
class MmaTile:
    """One ``attention_fwd_mma`` instantiation (16-bit dtypes)."""

    head_dim: int  # padded head dim (a HEAD_DIM_BUCKETS entry) covering D and Dv
    warps: int
    m_tiles: int  # 16-row MMA slices per warp
    block_n: int  # keys per K/V tile
    stages: int  # K/V tiles in flight (cp.async ring)
    min_blocks: int = 1  # __launch_bounds__ minimum blocks per SM (caps registers)
    q_in_regs: bool | None = None  # Q fragments held in registers; None: when m_tiles * head_dim <= 64
    skip_pad_cols: bool = True  # run-time skip of MMA steps beyond d / dv (else branch-free loops)
    pipeline_qk: bool = False  # scores of key tile j+1 issued before the softmax of tile j (stages >= 3)

    def __post_init__(self):
        if self.q_in_regs is None:
            object.__setattr__(self, "q_in_regs", self.m_tiles * self.head_dim <= 64)

    @property
    def block_m(self) -> int:
        return 16 * self.warps * self.m_tiles

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def smem_bytes(self) -> int:
        rows = self.block_m + 2 * self.stages * self.block_n
        return rows * (self.head_dim + SMEM_PITCH_PAD) * 2

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warps, self.m_tiles, self.block_n, self.stages, self.min_blocks,
                self.q_in_regs, self.skip_pad_cols, self.pipeline_qk)
        return KernelSpec(SOURCE, "attention_fwd_mma", args)


WGMMA_MIN_CC = 90  # sm_90a: warpgroup MMA exists on compute capability 9.0 only
WGMMA_SMEM_ALIGN = 1024  # the kernel aligns its tiles to the 128-byte swizzle's 1024-byte period


@dataclasses.dataclass(frozen=True)
class WgmmaTile:
    """One ``attention_fwd_wgmma`` instantiation (sm_90a, 16-bit dtypes, one key split):
    ``warpgroups`` x 64 query rows per block, K/V tiles of ``block_n`` keys in a ``stages``
    deep cp.async ring; ``overlap`` runs the softmax of key tile j while P V of tile j - 1
    is still on the tensor cores; ``wg_ranges`` lets each warpgroup stop at its own key range
    (causal diagonal, rows past Nq) instead of the block's; ``ordered`` makes the warpgroups
    issue each step's wgmmas in turn (named barriers) so that their softmaxes stagger;
    ``persistent`` launches only the resident blocks (``persistent_grid``), each looping over
    (query tile, batch) items with the next item's Q and first K tile loaded during the
    current item's last key step and epilogue (Q double buffered; needs 2 stages)."""

    head_dim: int  # 64 or 128, covering D and Dv
    warpgroups: int
    block_n: int  # keys per K/V tile: 64 or 128
    stages: int
    min_blocks: int = 1  # __launch_bounds__ minimum blocks per SM (caps registers)
    overlap: bool = True
    wg_ranges: bool = True
    ordered: bool = False
    persistent: bool = False

    def __post_init__(self):
        if self.persistent and self.stages != 2:
            raise ValueError(f"attention: a persistent wgmma tile expects 2 stages, got {self.stages}")

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    @property
    def smem_bytes(self) -> int:
        q_buffers = 2 if self.persistent else 1
        rows = q_buffers * self.block_m + 2 * self.stages * self.block_n
        return rows * self.head_dim * 2 + WGMMA_SMEM_ALIGN

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warpgroups, self.block_n, self.stages, self.min_blocks, self.overlap,
                self.wg_ranges, self.ordered, self.persistent)
        return KernelSpec(SOURCE, "attention_fwd_wgmma", args, min_cc=WGMMA_MIN_CC)


_W = WgmmaTile  # short name for the tables below
# The wgmma prefill default per head-dim bucket: (mean keys a query row sees up to which the tile
# runs, tile), first match wins. From the H200 bf16 sweep of 14:17 (TFLOP/s, SDPA FLASH in
# brackets; fp16 within 2 %): D64 is softmax-bound. Up to 512 keys 2 blocks per SM of
# 2 warpgroups x 64-key tiles (N512 full 226 [267], causal 163 [155]: a second resident block
# hides a block's prologue and epilogue); up to 1536 (N2048 causal) 3 warpgroups x 128-key
# tiles with per-warpgroup key ranges (245 [264] vs 237 with block ranges, 229 with 2 blk/SM);
# beyond, the same tile with block-wide ranges (N2048 full 300 [300] vs 296, N8192 340 / causal
# 307 [306 / 295] vs 322 / 297, N16384 345 / 323 [308 / 301] vs 326 / 313). D128: 3 warpgroups
# x 64-key tiles everywhere (N512 full 288 [320], causal 197 [197] vs 175 with 2 x 128-key
# tiles; N2048 374 / 319 [332 / 303], N8192 409 / 379, N16384 411 / 395).
WGMMA_PREFILL = {
    64: ((512, _W(64, 2, 64, 2, 2)), (1536, _W(64, 3, 128, 2)), (math.inf, _W(64, 3, 128, 2, wg_ranges=False))),
    128: ((math.inf, _W(128, 3, 64, 2)),),
}
# Candidates swept against the defaults (registers on sm_90a, no spills: bench/NOTES.md): v5's
# 1 warpgroup x 128 keys at 3 blocks per SM (D64), the v5 no-overlap twin (D128), v6's D64
# 1 warpgroup x 64 keys at 4 blocks per SM, D128 2 warpgroups x 64 or 128 keys, the ordered-issue
# twins, the block-ranges twin of D128, and v7's persistent tiles (last; short key ranges,
# where a block's prologue and epilogue are a large share of its time). Persistent D64 3 x 128
# keys spills (168 registers + 56-60 B) with or without per-warpgroup ranges, as does 2 blocks
# per SM with them (128 + 8 B): D64 has the 2-blocks-per-SM tile with block ranges only.
WGMMA_TILES = {
    64: (_W(64, 3, 128, 2), _W(64, 2, 64, 2, 2), _W(64, 1, 128, 2, 3), _W(64, 1, 64, 2, 4),
         _W(64, 3, 128, 2, ordered=True), _W(64, 2, 64, 2, 2, ordered=True), _W(64, 3, 128, 2, wg_ranges=False),
         _W(64, 2, 64, 2, 2, wg_ranges=False, persistent=True)),
    128: (_W(128, 3, 64, 2), _W(128, 2, 128, 2), _W(128, 2, 128, 2, overlap=False), _W(128, 2, 64, 2),
          _W(128, 3, 64, 2, ordered=True), _W(128, 2, 128, 2, ordered=True), _W(128, 3, 64, 2, wg_ranges=False),
          _W(128, 3, 64, 2, persistent=True), _W(128, 2, 128, 2, persistent=True)),
}
# Prefill on compute capability 9.0 runs the wgmma kernel where it applies (measured faster than
# the mma.sync tiles at every point of the grid: 192-410 vs 123-259 TFLOP/s).
WGMMA_PREFILL_DEFAULT = True


def wgmma_prefill_tile(n_q: int, n_k: int, head_dim: int, head_dim_v: int, batch_count: int, dev,
                       wgmma_operands: bool, causal: bool) -> WgmmaTile | None:
    """The wgmma prefill tile for a call (WGMMA_PREFILL by the keys a row sees), or None where
    the kernel does not apply: not compute capability 9.0, a head-dim bucket it lacks,
    operands without 16-byte rows or a non-positive scale (``wgmma_operands`` False), or a
    grid so small that the wave model would split the keys (the kernel has one split; the
    mma.sync tiles split)."""
    bucket = head_dim_bucket(max(head_dim, head_dim_v))
    if not (dev.has_wgmma and wgmma_operands and bucket in WGMMA_PREFILL):
        return None
    keys = mean_visible_keys(n_q, n_k, causal)
    tile = next(tile for max_keys, tile in WGMMA_PREFILL[bucket] if keys <= max_keys)
    return tile if plan_splits(tile, n_q, n_k, batch_count, dev).splits == 1 else None


def wgmma_grid(tile: WgmmaTile, items: int, dev) -> int:
    """Blocks of an ``attention_fwd_wgmma`` launch over ``items`` (query tile, batch) pairs:
    one per item, or for a persistent tile the blocks resident at once (each loops)."""
    if not tile.persistent:
        return items
    return max(1, min(items, dev.sm_count * blocks_per_sm(tile, dev)))


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """A launch plan: ``tile`` None means the SIMT path (float32/float64, no splits)."""

    tile: MmaTile | DecodeTile | WgmmaTile | None
    splits: int = 1
    keys_per_split: int = 0  # a multiple of tile.block_n when splits > 1; unused with one split


DECODE_HEAD_DIMS = (32, 64, 128, 256)  # HD / 8 lanes per key row must divide a warp
# attention_decode reads K/V once per query row (one row per block; the rows of a split are
# adjacent blocks and share K/V in L2): worth it while the L2 re-reads stay cheap.
DECODE_STREAM_MAX_QUERIES = 4
DECODE_STREAM_TILE = (4, 8)  # (warps, unroll): 4.2-4.5 TB/s on the H200 (round-3 sweep)
DECODE_MIN_KEYS_PER_SPLIT = 512
DECODE_BLOCKS_PER_SLOT = 2  # blocks launched per resident-block slot (tail balance)


@dataclasses.dataclass(frozen=True)
class DecodeTile:
    """One ``attention_decode`` instantiation: K/V streamed straight into registers (no
    shared-memory staging), one query row per block. Needs k and v with 16-byte rows."""

    head_dim: int  # a DECODE_HEAD_DIMS entry covering D and Dv
    warps: int
    unroll: int  # 16-byte K and V loads in flight per lane

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def group_keys(self) -> int:
        """Keys one block reads per loop step (its split ranges are multiples of this)."""
        return self.warps * self.unroll * (256 // self.head_dim)

    def spec(self, dtype_ctype: str) -> KernelSpec:
        return KernelSpec(SOURCE, "attention_decode", (dtype_ctype, self.head_dim, self.warps, self.unroll))


def decode_head_dim(head_dim: int) -> int:
    for bucket in DECODE_HEAD_DIMS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"attention: head dim {head_dim} exceeds {DECODE_HEAD_DIMS[-1]}")


def plan_decode(tile: DecodeTile, n_q: int, n_k: int, batch_count: int, dev, splits: int | None = None):
    """``tile`` with a key split: by default enough blocks for DECODE_BLOCKS_PER_SLOT per
    resident slot (2048 threads per SM), but no split under DECODE_MIN_KEYS_PER_SPLIT keys."""
    if splits is None:
        slots = dev.sm_count * min(32, 2048 // tile.threads)
        base = max(1, n_q * batch_count)
        splits = min(MAX_SPLITS, math.ceil(DECODE_BLOCKS_PER_SLOT * slots / base),
                     max(1, n_k // DECODE_MIN_KEYS_PER_SPLIT))
    splits = max(1, min(splits, MAX_SPLITS, math.ceil(n_k / tile.group_keys)))
    keys_per_split = max(1, math.ceil(math.ceil(n_k / splits) / tile.group_keys)) * tile.group_keys
    splits = max(1, math.ceil(n_k / keys_per_split))  # no empty trailing split
    return AttentionConfig(tile, splits, keys_per_split if splits > 1 else 0)


def head_dim_bucket(head_dim: int) -> int:
    """The smallest bucket holding ``head_dim`` (1..256)."""
    for bucket in HEAD_DIM_BUCKETS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"attention: head dim {head_dim} exceeds {HEAD_DIM_BUCKETS[-1]}")


# Prefill tiles by head-dim bucket (H200 bf16 sweeps, /tmp/h200-run8; TFLOP/s vs the 8-warp
# 128-key tile): up to 64 columns, 4 warps x 16 rows x 64 keys at 3 blocks per SM won every
# measured shape (N512 full 167 vs 150, N2048 full 188 vs 183 and causal 158 vs 150, N16384
# causal 179 vs 166); at 96-128 columns the 8-warp 128-key tile (1 block per SM) wins long key
# ranges (N2048 full 236 vs 214, N8192 full 252 vs 224) and 4 warps x 16 rows x 64 keys at 2
# blocks per SM short ones (N512 causal 138 vs 110), where a block's prologue and epilogue are a
# large share of its time and a second resident block hides them.
SHORT_KEYS_MAX = 512  # mean keys a query row visits, up to which the 2-block D128 tile is used


def prefill_tiles(head_dim: int, dev) -> tuple[MmaTile, ...]:
    """The candidate prefill tiles of a head-dim bucket, long-key tile first. Up to 64
    columns one tile; 96-128 the 8-warp 128-key tile (64-key tiles where 128 would not fit
    the device's shared memory: A100) and the 2-blocks-per-SM short-key tile; wider heads 8
    warps of one slice, Q from shared memory, 64-key tiles (32 where a 256-wide head would
    not fit) so O fits in registers. All branch-free with Q in registers up to 128 columns."""
    if head_dim <= 64:
        tiles = (MmaTile(head_dim, 4, 1, 64, 2, 3, True, False),)
    elif head_dim <= 128:
        tiles = (MmaTile(head_dim, 8, 1, 128, 2, 1, True, False), MmaTile(head_dim, 4, 1, 64, 2, 2, True, False))
    else:
        tiles = (MmaTile(head_dim, 8, 1, 64, 2),)
    return tuple(fit_smem(tile, dev) for tile in tiles)


def fit_smem(tile: MmaTile, dev) -> MmaTile:
    while tile.smem_bytes > dev.max_smem_per_block:
        tile = dataclasses.replace(tile, block_n=tile.block_n // 2)
    return tile


def mean_visible_keys(n_q: int, n_k: int, causal: bool) -> float:
    """Mean keys a query row sees; bottom-right causal: row i sees clip(i + n_k - n_q + 1, 0, n_k),
    so the rows that see keys see n_k - rows + 1 ... n_k of them."""
    if not causal:
        return n_k
    rows = min(n_q, n_k)
    return rows * (2 * n_k - rows + 1) / 2 / n_q


def prefill_tile(head_dim: int, dev, n_q: int, n_k: int, causal: bool) -> MmaTile:
    """The prefill tile of a head-dim bucket for a call's key range (see prefill_tiles)."""
    tiles = prefill_tiles(head_dim, dev)
    if len(tiles) > 1 and mean_visible_keys(n_q, n_k, causal) <= SHORT_KEYS_MAX:
        return tiles[1]
    return tiles[0]


def decode_tile(head_dim: int, dev) -> MmaTile:
    """Nq <= 16: one warp per block (one row slice), as many blocks per SM as shared memory
    allows, each streaming K/V through a 3-stage ring, so every SM keeps >100 KB in flight."""
    return MmaTile(head_dim, 1, 1, 64 if head_dim <= 128 else 32, 3)


def blocks_per_sm(tile: MmaTile | WgmmaTile, dev) -> int:
    """Resident blocks per SM: shared memory, threads, and registers (assumed 255 per
    thread unless ``min_blocks`` caps them)."""
    by_regs = max(tile.min_blocks, 65536 // (tile.threads * 255))
    return max(1, min(dev.smem_per_sm // (tile.smem_bytes + SMEM_RESERVED_PER_BLOCK), 2048 // tile.threads, by_regs, 32))


def choose_splits(base_blocks: int, n_tiles: int, slots: int) -> int:
    """Key splits minimising the modelled time ``waves * (tiles per block + overhead)``
    where ``waves = ceil(base_blocks * splits / slots)``; a split must beat one split by
    SPLIT_MIN_GAIN (the merge pass and the float32 partials are not in the model: at a near
    tie, e.g. 4096 blocks on 132 slots, one split is faster); ties go to fewer splits."""
    if base_blocks <= 0 or n_tiles <= 1:
        return 1

    def cost(splits):
        return math.ceil(base_blocks * splits / slots) * (math.ceil(n_tiles / splits) + SPLIT_OVERHEAD_TILES)

    best = min(range(1, min(MAX_SPLITS, n_tiles) + 1), key=lambda splits: (cost(splits), splits))
    return best if cost(best) < (1 - SPLIT_MIN_GAIN) * cost(1) else 1


@functools.lru_cache(maxsize=4096)
def select_config(n_q: int, n_k: int, head_dim: int, head_dim_v: int, batch_count: int, dtype, dev,
                  kv_rows_16b: bool = False, causal: bool = False, wgmma_operands: bool = False) -> AttentionConfig:
    """The launch plan for one call (pure, cached). ``kv_rows_16b``: k and v have unit column
    stride and 16-byte aligned rows, so decode can use ``attention_decode``. ``causal`` sets
    the keys a row sees, on which the prefill tile depends. ``wgmma_operands``: q, k and v
    all have such rows and the scale is positive (``attention_fwd_wgmma``'s preconditions)."""
    if ctype(dtype) in SIMT_CTYPES:
        return AttentionConfig(None)
    width = max(head_dim, head_dim_v)
    if n_q <= DECODE_STREAM_MAX_QUERIES and kv_rows_16b:
        return plan_decode(DecodeTile(decode_head_dim(width), *DECODE_STREAM_TILE), n_q, n_k, batch_count, dev)
    bucket = head_dim_bucket(width)
    if n_q <= DECODE_MAX_QUERIES:
        tile = decode_tile(bucket, dev)
    else:
        wgmma = WGMMA_PREFILL_DEFAULT and wgmma_prefill_tile(n_q, n_k, head_dim, head_dim_v, batch_count, dev,
                                                             wgmma_operands, causal)
        if wgmma:
            return AttentionConfig(wgmma)
        tile = prefill_tile(bucket, dev, n_q, n_k, causal)
    return plan_splits(tile, n_q, n_k, batch_count, dev)


def plan_splits(tile: MmaTile | WgmmaTile, n_q: int, n_k: int, batch_count: int, dev) -> AttentionConfig:
    """``tile`` with the key split of the wave model (also used for an explicit tile)."""
    n_tiles = math.ceil(n_k / tile.block_n)
    base_blocks = math.ceil(n_q / tile.block_m) * batch_count
    splits = choose_splits(base_blocks, n_tiles, dev.sm_count * blocks_per_sm(tile, dev))
    tiles_per_split = math.ceil(n_tiles / splits)
    splits = math.ceil(n_tiles / tiles_per_split)  # no empty trailing split
    if splits == 1:
        return AttentionConfig(tile)
    return AttentionConfig(tile, splits, tiles_per_split * tile.block_n)


def merge_spec(dtype_ctype: str) -> KernelSpec:
    return KernelSpec(SOURCE, "attention_merge", (dtype_ctype,))


def simt_spec(dtype_ctype: str) -> KernelSpec:
    return KernelSpec(SOURCE, "attention_fwd_simt", (dtype_ctype, SIMT_WARPS))


def instantiations(dev):
    """Every KernelSpec the attention configs can pick on ``dev``."""
    specs = []
    for name in MMA_CTYPES:
        for bucket in HEAD_DIM_BUCKETS:
            specs.extend(tile.spec(name) for tile in prefill_tiles(bucket, dev))
            specs.append(decode_tile(bucket, dev).spec(name))
        specs.extend(DecodeTile(bucket, *DECODE_STREAM_TILE).spec(name) for bucket in DECODE_HEAD_DIMS)
        specs.append(merge_spec(name))
        if dev.has_wgmma:  # the default candidates and the swept ones (through config=)
            specs.extend(tile.spec(name) for tiles in WGMMA_TILES.values() for tile in tiles)
    specs.extend(simt_spec(name) for name in SIMT_CTYPES)
    return list(dict.fromkeys(specs))
