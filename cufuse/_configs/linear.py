"""Kernel configurations of the linear op (pure; no GPU needed).

A ``LinearConfig`` names one kernel of ``kernels/linear_relu.cu`` (``kind``), its tile
and, for the tensor-core kernel, the split-K count and the rasterisation group. Kinds:

* ``"mma"``: float16/bfloat16 tensor cores (cp.async + ldmatrix + mma.sync), for x and
  weight whose rows are 16-byte aligned (``mma_eligible``). The same kernel streams the
  weight for M <= 64 (``STREAM_TILE`` / ``SMALL_TILE`` with split-K), and splits K for
  any shape with fewer output tiles than the SMs' block slots.
* ``"gemv"``: weight streaming for M <= ``GemvTile.rows`` (16-byte loads straight to
  registers, FMAs in float32, float64 for float64; row-major weights split K over
  ``splits`` blocks, float64 excepted). Same operand rules as ``"mma"``, any of the four
  dtypes. The float32 default for M <= 4 and the float64 one for M = 1 (``GEMV_WIDE``,
  ``choose_gemv_config``);
  16-bit types reach it only through ``config=`` (the tensor-core streams are faster).
* ``"simt"``: register-tiled SIMT GEMM with arbitrary strides: float32 (true float32),
  float64, and 16-bit inputs the tensor-core kernel cannot take.
* ``"tf32x3"``: float32 on tensor cores at float32 accuracy (3xTF32: each operand split
  into two tf32 parts, three mma.sync m16n8k8 per product, float32 accumulators; error
  under 2^-20 per product, like float32 rounding, where plain TF32 loses 2^-11; each
  stage's sum is added to the running one in round-to-nearest float32). Finite inputs
  only: an infinite operand gives NaN where NumPy gives +-inf.
* ``"dmma"``: float64 on tensor cores (mma.sync f64: m16n8k16 on sm_90, m8n8k4 on sm_80;
  IEEE fused multiply-adds). A ``WideTile`` with ``dmma_k`` set (8 or 16) runs
  ``linear_relu_dmma`` instead, sm_90 only: DMMA m16n8k{dmma_k}, fragments reloaded right
  after their last MMA, one barrier per k tile under the MMAs, swizzled unpadded shared
  memory (the float64 default on compute capability 9.0: ``DMMA_PIPELINED``).
  Both run ``linear_relu_wide`` with the operand rules of ``"mma"`` in 16-byte chunks
  (``mma_eligible``) and are the float32 / float64 defaults where those rules hold on
  compute capability 8.0+ (``FP32_TENSOR_CORES``, ``FP64_TENSOR_CORES``: measured faster
  than SIMT on the H200); other operands take SIMT. Both split K through slots of
  accumulators (float32 / float64); up to 64 rows they run tiles of 16, 32 or 64 rows
  (``WIDE_FEW_ROW_TILES``; float64 on compute capability 9.0) split to fill the SMs
  (``choose_wide_config``).

* ``"wgmma"``: Hopper (sm_90a) warpgroup MMA, BM x BN x BK tiles (``WgmmaTile``: BM 64
  or 128, BN 64, 128 or 256, BK 64 or 128), operands from 128-byte-swizzled shared memory, split-K
  through slots; same operand rules as ``"mma"``. The default on compute capability 9.0
  for M > 16, both weight layouts (H200, bf16, eager): 128x256 once its tiles fill every
  SM (8192^3: 494-533 TFLOP/s against 319-347 for the mma kernel); below that
  ``choose_wgmma_config`` (512 x 4096^2: 128x128 363-366 against the mma kernel's 260-263;
  64 x 8192^2: 64x64 split 2 3.14-3.17 TB/s against 2.86). Not for M <= 16 (16 x 8192^2:
  2.2-2.8 TB/s for every wgmma tile, whose x tile is 64 rows).
* ``"wgmma_tma"``: the same Hopper kernel fed by TMA (``TmaTile``: a producer warp issues
  cp.async.bulk.tensor boxes through tensor maps (``cufuse._tma``) into an mbarrier ring,
  the consumer warpgroups run wgmma without block barriers). Operands must be
  ``mma_eligible`` and describable by a tensor map (``tma_eligible``). The default on
  compute capability 9.0 wherever the wgmma kernel would run and tensor maps can describe
  the operands (``TMA_SMALL_M`` / ``TMA_LARGE_M``; H200 run S4-3, bf16 eager: 8192^3 711
  TFLOP/s against 522 for the cp.async kernel, 512 x 4096^2 519 against 353, 64 x 8192^2
  3.40 TB/s through ``TMA_STREAM_TILE`` against 3.24).
* ``"swap_tma"``: the swapped-operand TMA stream for M <= 64 (``SwapTile``): out^T = W^T x^T,
  the weight's columns as wgmma's M (64 per warpgroup) and x's rows, padded to 8, 16 or 64,
  as its N, so the x box is 8 or 16 rows instead of 64 at M <= 16 (cuBLASLt's nvjet
  ``tst_64x16`` at M = 16). Both weight layouts (a row-major weight is wgmma's M-major A,
  imm-trans-a), operands as ``"wgmma_tma"``. The default for M <= 64 wherever tensor maps
  describe the operands (``SWAP_SMALL_M``; H200, eager bf16 with PDL, (K,N) / (N,K).T: 16 x
  8192^2 3.98 / 3.86 TB/s against the mma stream tile's 3.77 / 3.60 (S7-6); 64 x 8192^2 3.75
  / 3.60 against the TMA kernel's 64x64 stream tile's 3.62 / 3.49 (S7-10)); elsewhere M <= 16
  streams on the mma kernel and M = 17..64 on the TMA kernel. Its default tiles
  (``SWAP_DEFAULT_TILES``) load 128 or 256 k a stage and ask L2 to evict the weight first and
  keep x (16 x 8192^2 4.10 / 4.03, 64 x 8192^2 3.89 / 3.72: run S8-2).

Launch: on compute capability 9.0 the weight streams (M <= ``PDL_MAX_M``) launch with
programmatic dependent launch (``uses_pdl``, ``pdl_smem``; cufuse/_launch.py), and their
tensor maps fetch 128-byte rows from L2 without promotion to 256 (``l2_promotion``).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .. import _tma
from .._dtypes import BFLOAT16, ctype
from .._loader import KernelSpec

SOURCE = "linear_relu.cu"
SMALL_M = 64  # at or below: the weight-streaming regime (bytes of the weight bound the time)
MMA_MIN_CC = 80  # cp.async, ldmatrix and bfloat16 mma.sync


@dataclasses.dataclass(frozen=True)
class MmaTile:
    """Block tile BM x BN x BK of the tensor-core kernel, its warp grid and pipeline depth.

    ``max_blocks_per_sm`` is how many blocks an SM's registers hold (checked against the
    compiled kernel in the tests; ``blocks_per_sm`` adds the device's shared-memory
    limit); ``relative_speed`` is the throughput of a
    full tile relative to the largest one, used only to compare tiles in ``choose_config``.
    """

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    max_blocks_per_sm: int
    relative_speed: float

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def smem_bytes(self, itemsize: int = 2) -> int:
        return self.stages * (self.bm * self.bk + self.bk * self.bn) * itemsize

    def blocks_per_sm(self, dev) -> int:
        """Resident blocks per SM on ``dev`` (the driver reserves 1 KB of shared memory per block)."""
        return min(self.max_blocks_per_sm, dev.smem_per_sm // (self.smem_bytes() + 1024))


@dataclasses.dataclass(frozen=True)
class SimtTile:
    """Block tile BM x BN x BK of the SIMT kernel; each thread owns TM x TN outputs."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


# Tensor-core tiles, largest first. 128x256 keeps the most data reuse per shared-memory
# byte (one block per SM, 8 warps of 64x64); 128x128 and 64x128 fill the machine on
# medium shapes; 16x128 streams the weight for M <= 16 with a deep pipeline.
LARGE_TILE = MmaTile(128, 256, 64, 2, 4, 3, max_blocks_per_sm=1, relative_speed=1.0)
MEDIUM_TILE = MmaTile(128, 128, 64, 2, 2, 3, max_blocks_per_sm=2, relative_speed=0.9)
SMALL_TILE = MmaTile(64, 128, 64, 2, 2, 4, max_blocks_per_sm=2, relative_speed=0.75)
STREAM_TILE = MmaTile(16, 128, 64, 1, 4, 6, max_blocks_per_sm=2, relative_speed=0.25)
# M in 17..64: a small tile with a deep pipeline puts more weight bytes in flight per SM
# for the same blocks (H200, 64 x 8192^2 bf16, split 2 through slots: 2.85-2.88 TB/s,
# against 2.10-2.16 for 64x128k64s4 split 4 atomic).
STREAM64_TILE = MmaTile(64, 64, 64, 2, 2, 6, max_blocks_per_sm=2, relative_speed=0.6)
# Other candidates for M in 17..64, measured slower (sweep only).
STREAM64_TILES = (
    STREAM64_TILE,
    MmaTile(32, 128, 64, 1, 4, 5, max_blocks_per_sm=2, relative_speed=0.5),
    MmaTile(64, 256, 32, 2, 4, 6, max_blocks_per_sm=1, relative_speed=0.75),
)
GEMM_TILES = (LARGE_TILE, MEDIUM_TILE, SMALL_TILE)
MMA_TILES = GEMM_TILES + (STREAM_TILE, STREAM64_TILE)

@dataclasses.dataclass(frozen=True)
class GemvTile:
    """The weight-streaming GEMV kernel for M <= ``rows`` (a few rows of x per thread)."""

    rows: int
    threads: int = 256

    def columns_per_block(self, b_kmajor: bool, itemsize: int = 2) -> int:
        """Output columns one block covers. K-major: 2 warp groups x the columns a warp keeps
        within 64 32-bit accumulator registers (1 to 8; ``gemv_kmajor_warp_cols`` of the
        kernel); row-major: 32 lanes x one 16-byte vector of columns each."""
        if b_kmajor:
            accum_words = 2 if itemsize == 8 else 1
            return 2 * max(1, min(8, 64 // (self.rows * accum_words)))
        return 32 * (16 // itemsize)


GEMV_TILES = (GemvTile(1),)
# float32 with M <= 4 and float64 with M = 1: the weight stream beats the few-row tensor-core
# tiles (WIDE_FEW_ROW_TILES) there (x 8192^2, eager TB/s, (K,N) / (N,K).T, against CuPy
# unfused): float32 M = 1 4.20 / 4.46 (3.91 / 2.76, run S8-9), M = 4 3.59 / 3.70 against the
# 16-row 3xTF32 tile's 3.56 / 3.24 (CuPy 2.17 / 1.88, run S9-2); float64 M = 1 4.12 / 4.36
# against DMMA 16x64's - / 4.01 (CuPy 4.10 / 4.15, S9-2). Past that the stream's FMAs limit
# it: float32 M = 16 1.78 / 2.07 against 3xTF32's 3.37 / 2.97, float64 M = 4 3.80 / 3.54
# against DMMA's 4.19 / 4.00 (S9-2). The 4- and 16-row tiles stay for config= and the sweep.
GEMV_WIDE_TILES = (GemvTile(1), GemvTile(4), GemvTile(16))
GEMV_WIDE = True  # the switch: False keeps small-M float32 / float64 on the tensor-core kernels
GEMV_WIDE_MAX_M = {np.dtype(np.float32): 4, np.dtype(np.float64): 1}
GEMV_MIN_SPLIT_ROWS = 256  # k rows per split at least: 8 warps x 8 rows in flight, 4 times over
# Row-major: split K until the blocks fill the SMs this often (run S8-9, float32 x 8192^2
# (K,N) with x read as vectors: M = 1 17 splits 4.20 TB/s, 8 4.12, 32 4.17; M = 4 9 splits
# 3.63; M = 16 9 splits 1.77, 4 splits 2.06: fewer splits for 16 rows is the next step).
GEMV_WAVES = 4

@dataclasses.dataclass(frozen=True)
class WgmmaTile:
    """A tile of the Hopper kernel: BM x BN x BK (BK 64 or 128), BM / 64 warpgroups (one
    wgmma m64nBNk16 row of 64 per warpgroup), ``stages``-deep cp.async pipeline. ``max_blocks_per_sm`` and
    ``relative_speed`` mean what they mean for ``MmaTile`` (speed relative to the mma
    kernel's LARGE_TILE; H200, 8192^3 bf16: 128x256 494-533 against 319-337 TFLOP/s; the
    other tiles' speeds are estimates until the H200 sweep measures them)."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    max_blocks_per_sm: int = 1
    relative_speed: float = 1.5
    bk: int = 64
    # wgmma groups (k tiles) left in flight across the next barrier; the loads then run
    # stages - 1 - pending tiles ahead (the kernel's PENDING). The kernel's MIN_BLOCKS is
    # max_blocks_per_sm: its registers allow that many blocks per SM.
    pending: int = 1

    @property
    def threads(self) -> int:
        return 2 * self.bm

    def smem_bytes(self, itemsize: int = 2) -> int:
        """Dynamic shared memory, with 1 KB to align the stages for the 128-byte swizzle."""
        return self.stages * (self.bm + self.bn) * self.bk * itemsize + 1024

    def blocks_per_sm(self, dev) -> int:
        """Resident blocks per SM on ``dev``: the driver reserves 1 KB of shared memory per
        block, and the kernel has a few bytes of static shared memory (the split-K flag), so
        two 64x64 s7 blocks (2 x 113 KB + 2 KB = the H200's 228 KB exactly) do not fit."""
        per_block = self.smem_bytes() + 1024 + WGMMA_STATIC_SMEM
        return min(self.max_blocks_per_sm, dev.smem_per_sm // per_block)


WGMMA_STATIC_SMEM = 16  # upper bound of the kernel's static shared memory (last_to_arrive's flag)


# The default for M > 64 once its tiles fill every SM (measured, see ``prefers_wgmma``).
WGMMA_TILE = WgmmaTile()
# Fewer output tiles (``choose_wgmma_config``). H200, 512 x 4096^2 bf16 (128 tiles of
# 128x128 on 132 SMs), graph TFLOP/s: 128x128s5 378-386, 128x256 split 2 348-350, 64x128s4
# 2/SM 326-333, 64x256s4 303-320. Speeds relative to the mma kernel's LARGE_TILE.
WGMMA_128x128 = WgmmaTile(128, 128, 5, max_blocks_per_sm=1, relative_speed=1.35)
WGMMA_64x256 = WgmmaTile(64, 256, 4, max_blocks_per_sm=1, relative_speed=1.3)
WGMMA_64x128 = WgmmaTile(64, 128, 4, max_blocks_per_sm=2, relative_speed=1.1)
WGMMA_64x64 = WgmmaTile(64, 64, 6, max_blocks_per_sm=2, relative_speed=0.8)
WGMMA_TILES = (WGMMA_TILE, WGMMA_128x128, WGMMA_64x256, WGMMA_64x128, WGMMA_64x64)
# M in 17..64: the weight stream. Small blocks, two per SM, 4 k tiles of weight loading
# ahead each, won (H200, 64 x 8192^2 bf16, split 2, graph: 64x64s6 3.32-3.35 TB/s;
# 64x128s4 split 4 2.95-3.08; 64x256s4 split 2/4 2.22-2.73, one block per SM).
WGMMA_STREAM_TILE = WGMMA_64x64
# (The v6/v7 candidates NOTES records as slower everywhere -- PENDING 0/2, k128, three
# blocks per SM, the warp-specialised producer -- and the v8 stream-K schedule are gone.)
WGMMA_MIN_CC = 90


@dataclasses.dataclass(frozen=True)
class TmaTile(WgmmaTile):
    """A tile of the TMA-fed Hopper kernel (kind ``"wgmma_tma"``): the wgmma kernel's tile
    and stage layout, plus one producer warp (the block's last 32 threads) and 2 x
    ``stages`` mbarriers (8 bytes each) after the stages."""

    @property
    def threads(self) -> int:
        return 2 * self.bm + 32

    def smem_bytes(self, itemsize: int = 2) -> int:
        return super().smem_bytes(itemsize) + 2 * 8 * self.stages


# TMA tiles, one per wgmma block shape (``tma_variant``); stages fill the shared memory the
# blocks per SM leave (the loads run stages - pending tiles ahead, no block barrier).
TMA_TILE = TmaTile(128, 256, 4, max_blocks_per_sm=1)
TMA_128x128 = TmaTile(128, 128, 6, max_blocks_per_sm=1, relative_speed=1.35)
TMA_64x256 = TmaTile(64, 256, 5, max_blocks_per_sm=1, relative_speed=1.3)
TMA_64x128 = TmaTile(64, 128, 4, max_blocks_per_sm=2, relative_speed=1.1)
TMA_64x64 = TmaTile(64, 64, 6, max_blocks_per_sm=2, relative_speed=0.8)
TMA_TILES = (TMA_TILE, TMA_128x128, TMA_64x256, TMA_64x128, TMA_64x64)
# The M <= 64 weight stream: one block per SM, 11 tiles of weight ahead, no split while its
# tiles fill the SMs (H200 run S4-3, 64 x 8192^2 bf16 eager: 3.40 / 3.31 TB/s (K,N) / (N,K).T
# against 3.18 / 3.16 for TMA 64x64 s6 x2 split 2 and 3.24 / 3.08 for the cp.async default;
# s12 split 2 (two waves) 2.97, s8 split 2 3.00, 64x128 s8 split 2 2.94).
TMA_STREAM_TILE = TmaTile(64, 64, 12, max_blocks_per_sm=1, relative_speed=0.8)
# Other candidates of the stream (sweep only).
TMA_STREAM_TILES = (
    TMA_STREAM_TILE,
    TmaTile(64, 64, 8, max_blocks_per_sm=1, relative_speed=0.8),
    TmaTile(64, 128, 8, max_blocks_per_sm=1, relative_speed=1.1),
)
TMA_TILES_BY_SHAPE = {(t.bm, t.bn): t for t in TMA_TILES}
# The defaults switch (``choose_config``): True sends the wgmma configs of M <= 64 / M > 64
# to the TMA kernel where the operands allow a tensor map (H200 run S4-3, bf16 eager, TFLOP/s
# against the cp.async wgmma kernel: 8192^3 711 / 709 vs 522 / 463 (K,N) / (N,K).T;
# 16384 x 4096^2 655 / 658 vs 458 / 484; 512 x 4096^2 519 / 523 vs 353 / 359).
TMA_SMALL_M = True
TMA_LARGE_M = True


@dataclasses.dataclass(frozen=True)
class SwapTile:
    """A tile of the swapped-operand TMA kernel (kind ``"swap_tma"``, M <= ``mx``): ``bn``
    weight columns a block (64 or 128: one or two consumer warpgroups, each a wgmma
    m64n{mx}k16 chain with the weight as A and x as B), x rows padded to ``mx`` (8, 16 or
    64: wgmma's N and the x box's rows), ``stages``-deep TMA ring of ``bk`` k (64, 128 or
    256: one to four 128-byte boxes per weight row and stage). ``l2_hints``: the TMA loads
    ask L2 to evict the weight first and keep x (every block re-reads x)."""

    bn: int
    mx: int
    stages: int
    bk: int = 64
    l2_hints: bool = False

    def __post_init__(self):
        if self.bn not in (64, 128) or self.mx not in (8, 16, 64) or self.bk not in (64, 128, 256):
            raise ValueError(f"SwapTile: bn 64 or 128, mx 8, 16 or 64, bk 64, 128 or 256; got {self}")

    @property
    def bm(self) -> int:
        """The output rows a block covers (``tile_count``, the split-K slots of bm x bn floats)."""
        return self.mx

    @property
    def threads(self) -> int:
        return 2 * self.bn + 32  # bn / 64 consumer warpgroups and the producer warp

    def smem_bytes(self, itemsize: int = 2) -> int:
        """The stages, 1 KB to align them for the 128-byte swizzle, 2 x ``stages`` mbarriers."""
        return self.stages * (self.mx + self.bn) * self.bk * itemsize + 1024 + 2 * 8 * self.stages

    def blocks_per_sm(self, dev) -> int:
        """Resident blocks per SM: shared memory decides (a consumer thread holds mx / 2
        accumulators; the registers allow more blocks than shared memory does)."""
        return dev.smem_per_sm // (self.smem_bytes() + 1024 + WGMMA_STATIC_SMEM)


# The swapped stream's defaults, by x padding (run S8-2, eager bf16 with PDL, (K,N) / (N,K).T
# TB/s against the session-7 default n64 s8 bk64 without hints): 1 x 8192^2 bk256 s5 4.16 /
# 4.06 (4.04 / 3.92), 16 x 8192^2 bk256 s5 4.10 / 4.03 (3.99 / 3.86), 64 x 8192^2 bk128 s6
# 3.89 / 3.72 (3.80 / 3.62). The L2 hints give most of it; the deeper k per stage lets the
# 64-row tile keep them (bk64 with hints lost 8 % there).
SWAP_DEFAULT_TILES = {
    8: SwapTile(64, 8, 5, bk=256, l2_hints=True),
    16: SwapTile(64, 16, 5, bk=256, l2_hints=True),
    64: SwapTile(64, 64, 6, bk=128, l2_hints=True),
}
# The swapped stream's tiles (sweep and instantiations): the defaults; per x padding of 8 or
# 16, 64 weight columns at 8 / 12 / 16 stages of 64 k (16: one block an SM, like nvjet's
# tst_64x16), 128 at 8 / 12; x padded to 64: 64 columns at 8 / 12 stages, 128 at 8.
SWAP_TILES = tuple(SWAP_DEFAULT_TILES.values())
SWAP_TILES += tuple(SwapTile(bn, mx, stages) for mx in (8, 16)
                    for bn, stages in ((64, 8), (64, 12), (64, 16), (128, 8), (128, 12)))
SWAP_TILES += tuple(SwapTile(bn, 64, stages) for bn, stages in ((64, 8), (64, 12), (128, 8)))
SWAP_MAX_M = 64  # the largest x padding (wgmma N)
# Every linear kernel starts with begin_dependent_grid() (kernels/common.cuh); on compute
# capability 9.0 the host launches it with programmatic dependent launch (cufuse/_launch.py),
# so back-to-back calls overlap one kernel's tail with the next one's start. False: CuPy's
# plain launch everywhere.
PDL_LAUNCH = True
PDL_MIN_CC = 90  # griddepcontrol and the launch attribute: Hopper and later
PDL_MAX_M = 64  # run S7-4: M <= 16 +2-5 % eager, M = 64 -1..+3 %, 512 x 4096^2 -1..-2 %, 8192^3 -0.4 %
SMEM_RESERVED_PER_BLOCK = 1024  # what the hardware keeps of an SM's shared memory per resident block (sm_80+)


def uses_pdl(m: int, dev) -> bool:
    """Whether an M-row problem launches with programmatic dependent launch: the weight
    streams (M <= PDL_MAX_M), ~35 us kernels whose launch gap is worth 4 %, on compute
    capability 9.0 and later."""
    return PDL_LAUNCH and dev.cc >= PDL_MIN_CC and m <= PDL_MAX_M


def pdl_smem(smem: int, static_smem: int, blocks: int, dev) -> int:
    """The dynamic shared memory of a PDL launch of ``blocks`` blocks that need ``smem``
    dynamic and ``static_smem`` static bytes. Once every block of a grid has started, the
    next PDL grid's blocks take every free block slot at once; a grid of at most one block
    per SM would leave the second slot of each SM to them, and they pile up two on some
    SMs (run S7-3: the two-an-SM mma stream at M = 16 lost 6-8 % with PDL, the one-an-SM
    kernels gained). Such a grid therefore asks for more than half an SM's shared memory."""
    if blocks > dev.sm_count:
        return smem
    half = dev.smem_per_sm // 2 + 1 - SMEM_RESERVED_PER_BLOCK - static_smem
    return max(smem, min(half, dev.max_smem_per_block - static_smem))

# The defaults switch (``choose_config``): True sends M <= SWAP_MAX_M to the swapped kernel
# wherever both tensor maps can be built (either weight layout). Measured (runs S7-4 / S7-6 /
# S7-10, eager with PDL, bf16, (K,N) / (N,K).T TB/s): 16 x 8192^2 swap n64 s8 3.98 / 3.86
# (128-byte L2 promotion) against the mma stream tile's 3.77 / 3.60 (256-byte); 1 x 8192^2
# s12 4.00 / 3.90 against the mma stream's 3.91 / 3.82; 8 x 8192^2 (N,K).T s8 3.76 against
# 3.55 (256-byte); 64 x 8192^2 s8 3.75 / 3.60 against the TMA kernel's 3.62 / 3.49.
SWAP_SMALL_M = True


@dataclasses.dataclass(frozen=True)
class WideTile(MmaTile):
    """Block tile of ``linear_relu_wide`` (float32 3xTF32 or float64 DMMA). Rows are
    padded in shared memory (x and a K-major weight by 4 elements, a row-major weight by
    32 bytes: no bank conflicts); both weight layouts get the larger of the two sizes."""

    itemsize: int = 4  # 4: float32 (kind "tf32x3"), 8: float64 (kind "dmma"); for blocks_per_sm
    # 0: linear_relu_wide. 8 or 16 (float64, sm_90): linear_relu_dmma with DMMA m16n8k{dmma_k},
    # BK 16, unpadded swizzled rows.
    dmma_k: int = 0

    def smem_bytes(self, itemsize: int | None = None) -> int:
        """Dynamic shared memory for elements of ``itemsize`` bytes (default: the tile's)."""
        itemsize = itemsize or self.itemsize
        if self.dmma_k:
            return self.stages * (self.bm + self.bn) * self.bk * itemsize
        a = self.bm * (self.bk + 4)
        b = max(self.bn * (self.bk + 4), self.bk * (self.bn + 32 // itemsize))
        return self.stages * (a + b) * itemsize


# float32: 64x32 warp tiles, 64 accumulators plus 64 for the per-stage partial sum (see
# kernels/linear_relu.cu), 200-254 registers, 8 warps per SM either way: one 8-warp
# 128x128 block, or (through config=, for the sweep) two 4-warp 128x64 blocks, which
# have the same wave fill on any shape whose N is a multiple of 128.
TF32_TILE = WideTile(128, 128, 32, 2, 4, 4, max_blocks_per_sm=1, relative_speed=1.0)
TF32_NARROW_TILE = WideTile(128, 64, 16, 2, 2, 4, max_blocks_per_sm=2, relative_speed=0.85)
TF32_TILES = (TF32_TILE, TF32_NARROW_TILE)
# float64: 32x64 warp tiles (64 double accumulators), 8 warps, 212-239 registers.
DMMA_TILE = WideTile(128, 128, 16, 4, 2, 3, max_blocks_per_sm=1, relative_speed=1.0, itemsize=8)
# float64 on sm_90, linear_relu_dmma: cuBLAS's Hopper DGEMM shape (128x64x16, 4 warps of 64x32,
# 2 blocks per SM, 3 stages, DMMA.16x8x8); 240 / 234 registers (row-major / K-major weight).
DMMA_PIPELINED_TILE = WideTile(128, 64, 16, 2, 2, 3, max_blocks_per_sm=2, relative_speed=1.0, itemsize=8, dmma_k=8)
# The one-line switch: DMMA_PIPELINED_TILE as the float64 default on compute capability 9.0.
# H200 run S4-4, 4096^3 eager TFLOP/s, (K,N) / (N,K).T: 57.0 / 54.5 against DMMA_TILE's
# 44.6 / 48.3 and CuPy unfused 56.6 / 53.7 (cupy.matmul alone 61.7 / 59.9).
DMMA_PIPELINED = True
DMMA_PIPELINED_MIN_CC = 90  # mma.sync m16n8k8 / m16n8k16 .f64
# Few rows (float32 M > GEMV_WIDE_MAX_M, float64 likewise, up to 64): the 128-row tiles pad x
# and leave SMs idle (64 x 8192^2: 64 tiles of 128x128 on 132 SMs, half of each tile padding;
# run S8-9: float32 0.51 TB/s, float64 1.34, CuPy unfused 1.3 / 3.0). These tiles hold the
# rows without padding past 16 / 32 / 64 and split K (choose_wide_config) to fill the SMs.
# float32: 4 warps of 64x32 (the 128x128 tile's warp tile), 32x32 or 16x32; max_blocks_per_sm
# from the registers (sm_90a: 239-245, 158-167, 122-124; float64 155-157, 126-128, 80-92),
# shared memory may allow fewer. Runs S9-1 / S9-2 (x 8192^2, eager TB/s, (K,N) / (N,K).T,
# default split counts, CuPy unfused in brackets): float32 16 rows 3.37 / 2.91 (1.76 / 1.75),
# 32 rows 2.52 / 2.46 (1.37 / 1.27), 64 rows 1.53-1.59 / 1.55-1.61 (1.24-1.26 / 1.11-1.26);
# float64 4 rows 4.19 / 4.00 (3.81 / 3.95), 8 rows 4.06 / 3.99 (3.79 / 3.92), 16 rows 4.03 /
# 3.94 (3.77 / 3.91), 32 rows 3.77-3.79 / 3.67-3.68 (3.74-3.80 / 3.56-3.71), 64 rows 2.65-2.68 /
# 2.71-2.80 (2.47-2.93 / 2.50-2.55). Deeper float64 stages (s6, s8) and a 64x128 8-warp
# tile were no faster at 32 and 64 rows (S9-2).
TF32_M64_TILE = WideTile(64, 128, 32, 1, 4, 4, max_blocks_per_sm=2, relative_speed=1.0)
TF32_M32_TILE = WideTile(32, 128, 32, 1, 4, 4, max_blocks_per_sm=3, relative_speed=1.0)
TF32_M16_TILE = WideTile(16, 128, 32, 1, 4, 4, max_blocks_per_sm=4, relative_speed=1.0)
# float64 on sm_90 (linear_relu_dmma): 4 warps of 32x32, 16x32 or 16x16.
DMMA_M64_TILE = WideTile(64, 64, 16, 2, 2, 4, max_blocks_per_sm=3, relative_speed=1.0, itemsize=8, dmma_k=8)
DMMA_M32_TILE = WideTile(32, 64, 16, 2, 2, 4, max_blocks_per_sm=4, relative_speed=1.0, itemsize=8, dmma_k=8)
DMMA_M16_TILE = WideTile(16, 64, 16, 1, 4, 6, max_blocks_per_sm=4, relative_speed=1.0, itemsize=8, dmma_k=8)
WIDE_FEW_ROW_TILES = {np.dtype(np.float32): (TF32_M16_TILE, TF32_M32_TILE, TF32_M64_TILE),
                      np.dtype(np.float64): (DMMA_M16_TILE, DMMA_M32_TILE, DMMA_M64_TILE)}  # fewest rows first
WIDE_FEW_ROWS = True  # the switch: False keeps every M on the 128-row tiles, unsplit
# The tensor-core kernels as the float32 / float64 defaults where they can load the
# operands. H200, 4096^3: 3xTF32 61.6 TFLOP/s (SIMT 37.9, CuPy unfused 48.4); DMMA 45.0
# (SIMT 15.5), pipelined DMMA 57.0 (CuPy unfused 56.6).
FP32_TENSOR_CORES = True
FP64_TENSOR_CORES = True

SIMT_LARGE = SimtTile(128, 128, 8, 8, 8)
SIMT_SMALL = SimtTile(64, 64, 16, 4, 4)

WIDE_KINDS = {"tf32x3": np.dtype(np.float32), "dmma": np.dtype(np.float64)}  # kind -> its dtype

RASTER_GROUP = 8  # tile rows walked together so neighbouring blocks share L2 lines
MAX_SPLITS = 32


@dataclasses.dataclass(frozen=True)
class LinearConfig:
    kind: str  # "mma", "gemv", "simt", "wgmma", "wgmma_tma", "swap_tma", "tf32x3" or "dmma"
    tile: MmaTile | GemvTile | SimtTile | WgmmaTile | TmaTile | SwapTile | WideTile
    splits: int = 1  # split-K count (not simt); > 1 uses the split workspace
    raster_group: int = RASTER_GROUP
    # Split-K reduction of the mma kernel: "atomic" (float32 atomics into an M x N
    # workspace) or "slots" (each split stores its partial tile to its own slot, the last
    # block adds them: vector stores and loads, no atomics; tiles x splits x BM x BN floats).
    reduction: str = "atomic"

    def workspace_floats(self, m: int, n: int, splits: int) -> int:
        """float32 cells of the split-K workspace of an (M, N) output (float64 slots, kind
        "dmma", take two cells a value)."""
        if self.reduction == "slots":
            words = 2 if self.kind == "dmma" else 1
            return tile_count(m, n, self.tile) * splits * self.tile.bm * self.tile.bn * words
        return m * n


def wave_efficiency(blocks: int, slots: int) -> float:
    """Fraction of the machine's block slots doing work, over all waves (last wave's fill)."""
    if blocks <= 0:
        return 0.0
    waves = math.ceil(blocks / slots)
    return blocks / (waves * slots)


def tile_count(m: int, n: int, tile) -> int:
    return math.ceil(m / tile.bm) * math.ceil(n / tile.bn)


def choose_splits(m: int, n: int, k: int, tile: MmaTile, dev) -> int:
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


def stream_splits(m: int, n: int, k: int, tile: MmaTile, dev) -> int:
    """Split-K count for the weight-streaming tiles (the mma stream tile, the swapped
    kernel): the fewest splits whose blocks cover 90% of the SMs once. The time is the
    weight's bytes over the SMs that stream them; more blocks than SMs add only reduction
    traffic (H200, 1 and 16 x 8192^2: 2 splits 3.41-3.81 TB/s, 4 splits 3.26-3.82, 8 splits
    3.00-3.64)."""
    tiles = tile_count(m, n, tile)
    k_tiles = max(1, math.ceil(k / tile.bk))
    wanted = math.ceil(0.9 * dev.sm_count / tiles)
    return effective_splits(k_tiles, max(1, min(wanted, MAX_SPLITS, k_tiles)))


def effective_splits(k_tiles: int, splits: int) -> int:
    """The split count after rounding k tiles per split up: no split is left empty."""
    return math.ceil(k_tiles / math.ceil(k_tiles / splits))


def choose_gemm_tile(m: int, n: int, dev) -> MmaTile:
    """The tensor-core tile for M > 64: best estimated throughput = tile speed x last-wave
    fill x the fraction of the tiles' area inside the matrix."""

    return max(GEMM_TILES, key=lambda tile: gemm_score(m, n, tile, tile.blocks_per_sm(dev), dev))


def choose_simt_tile(m: int, n: int, dtype, dev) -> SimtTile:
    """float32 takes the 128x128 register tile once it fills every SM; float64 and the
    16-bit fallback keep the 64x64 tile (fewer registers per thread)."""
    if np.dtype(dtype) == np.float32 and tile_count(m, n, SIMT_LARGE) >= dev.sm_count:
        return SIMT_LARGE
    return SIMT_SMALL


def choose_wide_config(m: int, n: int, k: int, dtype, tensor_ok: bool, dev,
                       tensor_cores: bool | None = None) -> LinearConfig:
    """float32 / float64: the tensor-core kernels (3xTF32 / DMMA) when ``tensor_cores``
    (default: ``FP32_TENSOR_CORES`` / ``FP64_TENSOR_CORES``) and the operands allow it
    (``tensor_ok``: ``mma_eligible`` and ``MMA_MIN_CC``); otherwise the SIMT kernel.

    Tensor-core tile: the fewest rows of ``WIDE_FEW_ROW_TILES`` that hold M (float64 on
    compute capability 9.0 only: those are ``linear_relu_dmma`` tiles), else the 128-row
    tile (float64 on 9.0 with ``DMMA_PIPELINED``: ``DMMA_PIPELINED_TILE``); split K through
    slots where fewer tiles than block slots leave SMs idle (``choose_splits``)."""
    fp32 = np.dtype(dtype) == np.float32
    if tensor_cores is None:
        tensor_cores = FP32_TENSOR_CORES if fp32 else FP64_TENSOR_CORES
    if not (tensor_cores and tensor_ok):
        return LinearConfig("simt", choose_simt_tile(m, n, dtype, dev))
    pipelined = DMMA_PIPELINED and dev.cc >= DMMA_PIPELINED_MIN_CC
    kind = "tf32x3" if fp32 else "dmma"
    tile = TF32_TILE if fp32 else DMMA_PIPELINED_TILE if pipelined else DMMA_TILE
    if not WIDE_FEW_ROWS:
        return LinearConfig(kind, tile)
    if fp32 or pipelined:
        tile = next((t for t in WIDE_FEW_ROW_TILES[np.dtype(dtype)] if t.bm >= m), tile)
    splits = choose_splits(m, n, k, tile, dev)
    return LinearConfig(kind, tile, splits, reduction="slots" if splits > 1 else "atomic")


def choose_gemv_config(m: int, n: int, k: int, dtype, kmajor: bool, dev) -> LinearConfig:
    """float32 / float64 with M <= GEMV_WIDE_MAX_M[dtype]: the weight-streaming kernel with the fewest
    rows that cover M. A row-major weight splits K until the blocks fill the SMs GEMV_WAVES times
    (float32 only: the split sums meet in a float32 workspace); a K-major one has a block
    per few columns and needs none."""
    tile = next(t for t in GEMV_WIDE_TILES if t.rows >= m)
    itemsize = np.dtype(dtype).itemsize
    if kmajor or itemsize == 8:
        return LinearConfig("gemv", tile)
    col_blocks = math.ceil(n / tile.columns_per_block(False, itemsize))
    splits = max(1, min(math.ceil(GEMV_WAVES * dev.sm_count / col_blocks), k // GEMV_MIN_SPLIT_ROWS))
    return LinearConfig("gemv", tile, splits)


def gemm_score(m: int, n: int, tile, blocks_per_sm: int, dev) -> float:
    """Estimated throughput of ``tile`` on an M x N output: tile speed x last-wave fill x
    the fraction of the tiles' area inside the matrix."""
    tiles = tile_count(m, n, tile)
    area = m * n / (tiles * tile.bm * tile.bn)
    return tile.relative_speed * wave_efficiency(tiles, dev.sm_count * blocks_per_sm) * area


def wgmma_supported(dev) -> bool:
    """The wgmma kernel is compiled for sm_90a, which runs on compute capability 9.0 only."""
    return dev.cc == WGMMA_MIN_CC


def choose_wgmma_config(m: int, n: int, k: int, dev) -> LinearConfig:
    """The Hopper kernel's tile and split-K for any shape (``choose_config`` takes it for
    M = 17..64 and for fewer 128x256 tiles than SMs). M <= 64: ``WGMMA_STREAM_TILE``;
    otherwise the best ``gemm_score`` of ``WGMMA_TILES``. With fewer tiles than block
    slots, K is split by ``choose_splits`` (through slots)."""
    if m <= SMALL_M:
        tile = WGMMA_STREAM_TILE
    else:
        tile = max(WGMMA_TILES, key=lambda t: gemm_score(m, n, t, t.blocks_per_sm(dev), dev))
    if tile_count(m, n, tile) >= dev.sm_count * tile.blocks_per_sm(dev):
        return LinearConfig("wgmma", tile)
    splits = choose_splits(m, n, k, tile, dev)
    return LinearConfig("wgmma", tile, splits, reduction="slots" if splits > 1 else "atomic")


def tma_variant(config: LinearConfig) -> LinearConfig:
    """The TMA kernel's config for a wgmma config: the TMA tile of the same block shape
    (``TMA_TILES_BY_SHAPE``), the same splits, raster group and reduction."""
    tile = TMA_TILES_BY_SHAPE[(config.tile.bm, config.tile.bn)]
    return LinearConfig("wgmma_tma", tile, config.splits, config.raster_group, config.reduction)


def with_tma(config: LinearConfig, m: int, n: int, k: int, tma_ok: bool, dev) -> LinearConfig:
    """``config``, or the TMA kernel's where ``TMA_SMALL_M`` / ``TMA_LARGE_M`` ask for it
    and the operands allow tensor maps (``tma_ok``: ``tma_eligible``): M <= 64 streams
    through ``TMA_STREAM_TILE`` (its own split-K), larger M keeps the block shape
    (``tma_variant``)."""
    wanted = TMA_SMALL_M if m <= SMALL_M else TMA_LARGE_M
    if not (wanted and tma_ok and config.kind == "wgmma"):
        return config
    if m <= SMALL_M:
        splits = choose_splits(m, n, k, TMA_STREAM_TILE, dev)
        return LinearConfig("wgmma_tma", TMA_STREAM_TILE, splits, reduction="slots" if splits > 1 else "atomic")
    return tma_variant(config)


def choose_swap_config(m: int, n: int, k: int, dev) -> LinearConfig:
    """The swapped-operand kernel for M <= SWAP_MAX_M: x rows padded to 8, 16 or 64 (the tile
    of ``SWAP_DEFAULT_TILES``), split-K by ``stream_splits`` (one block an SM at most: S6-11,
    16 x 8192^2, split 1 3.58 / 3.51 TB/s, split 2 3.12-3.40), through slots."""
    tile = SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64]
    splits = stream_splits(m, n, k, tile, dev)
    return LinearConfig("swap_tma", tile, splits, reduction="slots" if splits > 1 else "atomic")


def prefers_wgmma(m: int, n: int, dev) -> bool:
    """The Hopper kernel's 128x256 tile when its tiles fill every SM at least once and it
    scores above the best mma tile (fewer tiles: ``choose_wgmma_config``)."""
    if not wgmma_supported(dev) or tile_count(m, n, WGMMA_TILE) < dev.sm_count:
        return False
    mma_tile = choose_gemm_tile(m, n, dev)
    return gemm_score(m, n, WGMMA_TILE, 1, dev) >= gemm_score(m, n, mma_tile, mma_tile.blocks_per_sm(dev), dev)


@functools.lru_cache(maxsize=1024)  # a pure function of hashable values, called on every op call
def choose_config(m: int, n: int, k: int, dtype, mma_ok: bool, dev, kmajor: bool = False,
                  tma_ok: bool = False) -> LinearConfig:
    """The kernel configuration for an (M, K) @ (K, N) problem.

    ``mma_ok``: the operands meet the tensor-core kernels' alignment rules (see
    ``mma_eligible``) and the device has ``MMA_MIN_CC``. ``kmajor``: the weight is K-major
    (a transposed (N, K) array). ``tma_ok``: TMA tensor maps can describe the operands
    (``tma_eligible``); the wgmma configs then take the TMA kernel where ``with_tma`` says,
    and M <= 64 the swapped-operand kernel where ``SWAP_SMALL_M`` says.
    """
    if np.dtype(dtype).itemsize >= 4:
        if GEMV_WIDE and mma_ok and m <= GEMV_WIDE_MAX_M[np.dtype(dtype)]:
            return choose_gemv_config(m, n, k, dtype, kmajor, dev)
        return choose_wide_config(m, n, k, dtype, mma_ok, dev)
    if not mma_ok:
        return LinearConfig("simt", choose_simt_tile(m, n, dtype, dev))
    if m <= SWAP_MAX_M and SWAP_SMALL_M and tma_ok and wgmma_supported(dev):
        return choose_swap_config(m, n, k, dev)
    if m > STREAM_TILE.bm and wgmma_supported(dev) and (m <= SMALL_M or tile_count(m, n, WGMMA_TILE) < dev.sm_count):
        # Compute capability 9.0, M = 17..64 or fewer 128x256 tiles than SMs (see the module
        # docstring: 64 x 8192^2 and 512 x 4096^2 measured fastest there).
        return with_tma(choose_wgmma_config(m, n, k, dev), m, n, k, tma_ok, dev)
    if m <= STREAM_TILE.bm:
        # One row: atomics add only N floats per split (H200, 1 x 8192^2: 3.62 TB/s
        # against 3.51 through slots); more rows: slots (16 x 8192^2: 3.31-3.50 TB/s
        # against 3.06-3.19 through atomics).
        return LinearConfig("mma", STREAM_TILE, stream_splits(m, n, k, STREAM_TILE, dev),
                            reduction="atomic" if m == 1 else "slots")
    if m <= SMALL_M:
        return LinearConfig("mma", STREAM64_TILE, choose_splits(m, n, k, STREAM64_TILE, dev), reduction="slots")
    if prefers_wgmma(m, n, dev):
        return with_tma(LinearConfig("wgmma", WGMMA_TILE), m, n, k, tma_ok, dev)
    tile = choose_gemm_tile(m, n, dev)
    if not kmajor and tile_count(m, n, MEDIUM_TILE) < dev.sm_count * MEDIUM_TILE.blocks_per_sm(dev):
        # A row-major weight and at most one wave of 128x128 tiles: split K through slots
        # (H200, 512 x 4096^2 bf16: 261 TFLOP/s at 2 splits, against 228 for the 64x128
        # tile unsplit and 165 for 2 splits through atomics).
        splits = choose_splits(m, n, k, MEDIUM_TILE, dev)
        return LinearConfig("mma", MEDIUM_TILE, splits, reduction="slots" if splits > 1 else "atomic")
    # Fewer tiles than block slots: split K too (the workspace then stays below
    # slots x tile area floats, 17 MB on the H200).
    if tile_count(m, n, tile) < dev.sm_count * tile.blocks_per_sm(dev):
        return LinearConfig("mma", tile, choose_splits(m, n, k, tile, dev))
    return LinearConfig("mma", tile)


def mma_eligible(dtype, k: int, n: int, x_ptr: int, x_row_stride: int, x_k_stride: int, m: int,
                 w_ptr: int, w_k_stride: int, w_n_stride: int) -> bool | None:
    """Whether the tensor-core kernels (16-bit types; float32 and float64 through
    ``linear_relu_wide``) can load these operands with 16-byte cp.async, and with which
    weight layout: True (K-major: unit k stride), False (N-major: unit n stride) or None
    (not eligible). Strides are in elements, pointers in bytes."""
    itemsize = np.dtype(dtype).itemsize
    vec = 16 // itemsize  # elements per 16-byte chunk
    if k % vec or x_ptr % 16 or w_ptr % 16 or x_k_stride != 1:
        return None
    if m > 1 and x_row_stride % vec:
        return None
    if w_k_stride == 1 and (n == 1 or w_n_stride % vec == 0):
        return True
    if w_n_stride == 1 and n % vec == 0 and w_k_stride % vec == 0:
        return False
    return None


def tma_eligible(dtype, k: int, n: int, x_ptr: int, x_row_stride: int, m: int, w_ptr: int, w_k_stride: int,
                 w_n_stride: int, b_kmajor: bool | None) -> bool:
    """Whether the TMA kernel can read these operands (already ``mma_eligible`` with weight
    layout ``b_kmajor``): both tensor maps must be buildable (``_tma.map_problem``: 16-byte
    aligned bases and row strides, rows not overlapping, K > 0). Strides in elements,
    pointers in bytes."""
    if b_kmajor is None or np.dtype(dtype).itemsize != 2:
        return False
    maps = (operand_maps(WGMMA_TILE, dtype, m, n, k, x_row_stride, w_n_stride if b_kmajor else w_k_stride, b_kmajor))
    return all(_tma.map_problem(g, ptr) is None for g, ptr in zip(maps, (x_ptr, w_ptr)))


def operand_maps(tile: WgmmaTile | SwapTile, dtype, m: int, n: int, k: int, ldx: int, ldw: int,
                 b_kmajor: bool) -> tuple:
    """The ``_tma.MapGeometry`` of x ({K, M}, boxes of 64 x BM; a ``SwapTile``'s BM is its
    mx) and of the weight (K-major: {K, N}, boxes of 64 x BN; N-major: {N, K}, boxes of 64 x
    BK) for ``linear_relu_wgmma_tma`` / ``linear_relu_swap_tma``: 64 16-bit elements = 128
    bytes per box row, swizzled over 128 bytes (the layout of the kernels' shared-memory
    descriptors). The L2 promotion is ``l2_promotion(m)``'s."""
    promotion = l2_promotion(m)
    x_map = _tma.geometry(dtype, k, m, ldx, WGMMA_ATOM, tile.bm, l2_promotion=promotion)
    if b_kmajor:
        return x_map, _tma.geometry(dtype, k, n, ldw, WGMMA_ATOM, tile.bn, l2_promotion=promotion)
    return x_map, _tma.geometry(dtype, n, k, ldw, WGMMA_ATOM, tile.bk, l2_promotion=promotion)


WGMMA_ATOM = 64  # 16-bit elements per 128-byte swizzle row (kernels/wgmma.cuh WGMMA_ATOM_N)
# The L2 promotion of the TMA maps: the weight streams (M <= SMALL_M) fetch their 128-byte box
# rows as they are (run S7-5, bench/probe_tma_promotion.py, eager TB/s at 16 / 64 x 8192^2 bf16,
# (K,N) / (N,K).T: none, 64 and 128 bytes alike, 3.93 / 3.80 and 3.64 / 3.42, against 256
# bytes' 3.80 / 3.74 and 3.54 / 3.42; the DRAM bytes read are the same, ncu); the GEMMs keep
# the 256 bytes they were measured with (S4-3).
STREAM_L2_PROMOTION, GEMM_L2_PROMOTION = 128, 256


def l2_promotion(m: int) -> int:
    """The TMA maps' L2 promotion in bytes for an M-row problem."""
    return STREAM_L2_PROMOTION if m <= SMALL_M else GEMM_L2_PROMOTION


def kernel_spec(config: LinearConfig, dtype, b_kmajor: bool) -> KernelSpec:
    t = config.tile
    if config.kind == "mma":
        args = (ctype(dtype), t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, b_kmajor)
        return KernelSpec(SOURCE, "linear_relu_mma", args, min_cc=MMA_MIN_CC)
    if config.kind == "gemv":
        return KernelSpec(SOURCE, "linear_relu_gemv", (ctype(dtype), t.rows, b_kmajor))
    if config.kind == "swap_tma":
        return KernelSpec(SOURCE, "linear_relu_swap_tma",
                          (ctype(dtype), t.bn, t.mx, t.bk, t.stages, b_kmajor, t.l2_hints), min_cc=WGMMA_MIN_CC)
    if config.kind in ("wgmma", "wgmma_tma"):
        name = "linear_relu_wgmma" if config.kind == "wgmma" else "linear_relu_wgmma_tma"
        return KernelSpec(SOURCE, name, (ctype(dtype), t.bm, t.bn, t.bk, t.stages, t.pending, t.max_blocks_per_sm,
                                         b_kmajor), min_cc=WGMMA_MIN_CC)
    if config.kind == "dmma" and t.dmma_k:
        args = (t.bm, t.bn, t.warps_m, t.warps_n, t.stages, t.dmma_k, b_kmajor)
        return KernelSpec(SOURCE, "linear_relu_dmma", args, min_cc=DMMA_PIPELINED_MIN_CC)
    if config.kind in WIDE_KINDS:
        args = (ctype(dtype), t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, b_kmajor)
        return KernelSpec(SOURCE, "linear_relu_wide", args, min_cc=MMA_MIN_CC)
    return KernelSpec(SOURCE, "linear_relu_simt", (ctype(dtype), t.bm, t.bn, t.bk, t.tm, t.tn, b_kmajor))


def instantiations(dev):
    """Every KernelSpec the linear configs can pick on ``dev``."""
    mma = [LinearConfig("mma", tile) for tile in MMA_TILES] if dev.cc >= MMA_MIN_CC else []
    specs = [kernel_spec(c, dt, kmaj) for c in mma for dt in (np.float16, BFLOAT16) for kmaj in (True, False)]
    if wgmma_supported(dev):  # WGMMA_TILES: choose_config / choose_wgmma_config and the sweep
        specs += [kernel_spec(LinearConfig("wgmma", tile), dt, kmaj) for tile in WGMMA_TILES
                  for dt in (np.float16, BFLOAT16) for kmaj in (True, False)]
        specs += [kernel_spec(LinearConfig("wgmma_tma", tile), dt, kmaj) for tile in TMA_TILES + TMA_STREAM_TILES
                  for dt in (np.float16, BFLOAT16) for kmaj in (True, False)]
        specs += [kernel_spec(LinearConfig("swap_tma", tile), dt, kmaj) for tile in SWAP_TILES
                  for dt in (np.float16, BFLOAT16) for kmaj in (True, False)]
    if dev.cc >= MMA_MIN_CC:  # the float32 / float64 defaults (FP32/FP64_TENSOR_CORES)
        wide = [(LinearConfig("tf32x3", tile), np.float32)
                for tile in TF32_TILES + WIDE_FEW_ROW_TILES[np.dtype(np.float32)]]
        wide.append((LinearConfig("dmma", DMMA_TILE), np.float64))
        if dev.cc >= DMMA_PIPELINED_MIN_CC:
            wide += [(LinearConfig("dmma", tile), np.float64)
                     for tile in (DMMA_PIPELINED_TILE,) + WIDE_FEW_ROW_TILES[np.dtype(np.float64)]]
        specs += [kernel_spec(c, dt, kmaj) for c, dt in wide for kmaj in (True, False)]
    simt = [(np.float32, SIMT_LARGE), (np.float32, SIMT_SMALL), (np.float64, SIMT_SMALL),
            (np.float16, SIMT_SMALL), (BFLOAT16, SIMT_SMALL)]
    specs += [kernel_spec(LinearConfig("simt", tile), dt, kmaj) for dt, tile in simt for kmaj in (True, False)]
    specs += [kernel_spec(LinearConfig("gemv", tile), dt, kmaj) for tile in GEMV_TILES for dt in (np.float16, BFLOAT16)
              for kmaj in (True, False)]
    specs += [kernel_spec(LinearConfig("gemv", tile), dt, kmaj) for tile in GEMV_WIDE_TILES for dt in (np.float32, np.float64)
              for kmaj in (True, False)]
    return specs
