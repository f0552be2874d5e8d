"""Sweep of fused_linear_relu kernel variants on the linear benchmark's shapes.

Run: ``python3 experiments/linear/sweep_linear.py`` (stdout only; about a minute on an H200).
``SWEEP_ONLY="16x8192x8192 bf16,..."`` keeps the cases whose "MxKxN dtype" label contains one
of the comma-separated strings; ``SWEEP_VARIANTS="swap,..."`` keeps, in those cases, the
default and the variants whose name contains one of them; ``SWEEP_PDL=both`` times every
variant twice, launched plainly and with programmatic dependent launch (" +pdl"; ``0`` or
``1``: one of them; unset: the library's rule, PDL for M <= 64 on compute capability 9.0).

Each variant runs through the public function's ``config=`` (the variant classes of
``cufuse.ops.linear``; candidates the product dropped are defined here, on the same kernel
templates). With SWEEP_PDL set, a variant's plan (``plan_linear``) is bound with the launch
attribute forced on or off and called directly, without the public function's dispatch. Two
times per variant: ``eager`` is what the benchmark sees (batches of back-to-back Python calls
of about 1 ms between CUDA events, ``time_cuda_budget``, so host overhead counts whenever it
exceeds the kernel time); ``graph`` replays the same calls from a captured CUDA graph, the
kernels' own time. Every variant's output (``out`` poisoned first) is checked against a
float32 CuPy reference.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
import cufuse  # noqa: E402
from cufuse._core.device import current_device_info  # noqa: E402
from cufuse._core.dtypes import BFLOAT16  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse._core.plans import BoundPlan, Plan  # noqa: E402
from cufuse.bench.timing import rotation_count, time_cuda_budget  # noqa: E402
from cufuse.ops.linear import dmma as D, gemv as G, mma as M, pingpong as P, select, swap_tma as S, wgmma as W, \
    wide as F  # noqa: E402
from cufuse.ops.linear.operands import linear_problem, rows_view  # noqa: E402
from cufuse.ops.linear.plan import plan_linear  # noqa: E402
from cufuse.ops.linear.simt import SIMT_LARGE, SIMT_SMALL, SimtConfig  # noqa: E402
from cufuse.ops.linear.tiling import RASTER_GROUP  # noqa: E402

try:
    import torch  # noqa: F401

    from cufuse.bench.cases import to_torch
except Exception:  # a peer only
    torch = None

DTYPES = {"bf16": BFLOAT16, "fp16": np.float16, "fp32": np.float32, "fp64": np.float64}
TOL = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-5, "fp64": 1e-12}  # fp32: plain TF32 is ~1e-3 off

# Candidate tensor-core tiles (bm, bn, bk, warps_m, warps_n, stages, blocks/SM, speed).
T = M.GemmTile
T128x256k64s4 = T(bm=128, bn=256, bk=64, warps_m=2, warps_n=4, stages=4, max_blocks_per_sm=1, relative_speed=1.0)
T256x128k64s3 = T(bm=256, bn=128, bk=64, warps_m=4, warps_n=2, stages=3, max_blocks_per_sm=1, relative_speed=1.0)
T256x128k64s4 = T(bm=256, bn=128, bk=64, warps_m=4, warps_n=2, stages=4, max_blocks_per_sm=1, relative_speed=1.0)
T128x256k32s4 = T(bm=128, bn=256, bk=32, warps_m=2, warps_n=4, stages=4, max_blocks_per_sm=1, relative_speed=1.0)
T256x128k32s4 = T(bm=256, bn=128, bk=32, warps_m=4, warps_n=2, stages=4, max_blocks_per_sm=1, relative_speed=1.0)
T128x128k32s4 = T(bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=4, max_blocks_per_sm=2, relative_speed=0.9)
S16x128k128 = T(bm=16, bn=128, bk=128, warps_m=1, warps_n=4, stages=4, max_blocks_per_sm=1, relative_speed=0.25)
S16x256k64 = T(bm=16, bn=256, bk=64, warps_m=1, warps_n=8, stages=4, max_blocks_per_sm=1, relative_speed=0.25)
# Dropped from the product (measured slower, docs/linear.md): the other M = 17..64 mma tiles,
# the TMA kernel's own M <= 64 stream tiles (the swapped stream took M <= 64), the 3xTF32
# 128x64 tile and the float32 16-row weight stream.
STREAM64_CANDIDATES = (M.STREAM64_TILE, T(bm=32, bn=128, bk=64, warps_m=1, warps_n=4, stages=5, max_blocks_per_sm=2,
                                          relative_speed=0.5), T(bm=64, bn=256, bk=32, warps_m=2, warps_n=4, stages=6,
                                                                 max_blocks_per_sm=1, relative_speed=0.75))
TMA_STREAM_TILES = (W.TmaGemmTile(bm=64, bn=64, stages=12, max_blocks_per_sm=1, relative_speed=0.8),
                    W.TmaGemmTile(bm=64, bn=64, stages=8, max_blocks_per_sm=1, relative_speed=0.8),
                    W.TmaGemmTile(bm=64, bn=128, stages=8, max_blocks_per_sm=1, relative_speed=1.1))
TF32_NARROW_TILE = F.WideTile(bm=128, bn=64, bk=16, warps_m=2, warps_n=2, stages=4, max_blocks_per_sm=2,
                              relative_speed=0.85)
GEMV_16_ROWS = G.GemvTile(rows=16)


def mma(tile, splits=1):
    return M.MmaConfig(tile=tile, splits=splits)


slots = mma  # every split meets through slots now


LARGE_VARIANTS = [  # mma.sync tiles (the default on H200 is the TMA wgmma 128x256k64s4)
    ("128x256k64s3", mma(M.LARGE_TILE)),
    ("128x128k64s3 2/SM", mma(M.MEDIUM_TILE)),
    ("256x128k64s3", mma(T256x128k64s3)),
    ("128x256k64s4", mma(T128x256k64s4)),
    ("256x128k64s4", mma(T256x128k64s4)),
    ("128x256k64s3 group16", M.MmaConfig(tile=M.LARGE_TILE, splits=1, raster_group=16)),
    ("128x256k32s4", mma(T128x256k32s4)),
    ("256x128k32s4", mma(T256x128k32s4)),
    ("128x128k32s4 2/SM", mma(T128x128k32s4)),
]
MID_VARIANTS = [  # 512 x 4096 x 4096 on the mma kernel: the v4 default for (K,N)
    ("mma 128x128k64s3 split2 slots", slots(M.MEDIUM_TILE, 2)),
]
STREAM_VARIANTS = [  # M <= 16 on the mma kernel (the sm_80 default 16x128k64s6: atomic for M = 1, slots above)
    ("16x128k64s6 split1", mma(M.STREAM_TILE, 1)),
    ("16x128k64s6 split4", mma(M.STREAM_TILE, 4)),
    ("16x128k64s6 split2 slots", slots(M.STREAM_TILE, 2)),
    ("16x128k64s6 split4 slots", slots(M.STREAM_TILE, 4)),
    ("16x128k128s4 split2", mma(S16x128k128, 2)),
    ("16x128k128s4 split2 slots", slots(S16x128k128, 2)),
    ("16x256k64s4 split4 slots", slots(S16x256k64, 4)),
]
M64_VARIANTS = [  # M = 64 on the mma kernel: the sm_80 default and the other candidates
    ("mma 64x64k64s6 split2 slots", slots(STREAM64_CANDIDATES[0], 2)),
    ("mma 32x128k64s5 split2 slots", slots(STREAM64_CANDIDATES[1], 2)),
    ("mma 64x256k32s6 split4 slots", slots(STREAM64_CANDIDATES[2], 4)),
]
WGMMA_VARIANTS = [  # the cp.async Hopper kernel, 128x256k64s4
    ("wgmma 128x256k64s4", W.WgmmaConfig(tile=W.WGMMA_TILE)),
    ("wgmma 128x256k64s3", W.WgmmaConfig(tile=W.WgmmaGemmTile(stages=3))),
]


def wgmma(tile, splits=1):
    return W.WgmmaConfig(tile=tile, splits=splits)


# (The v8 stream-K rows are gone: measured slower than the defaults on every shape.)
WGMMA_RASTER_VARIANTS = [  # the rasterisation group of the 128x256 tile (L2 reuse of the weight tiles)
    ("wgmma 128x256k64s4 group4", W.WgmmaConfig(tile=W.WGMMA_TILE, splits=1, raster_group=4)),
    ("wgmma 128x256k64s4 group16", W.WgmmaConfig(tile=W.WGMMA_TILE, splits=1, raster_group=16)),
]
WGMMA_MID_VARIANTS = [  # 512 x 4096^2 (cp.async 128x128k64s5, 128 tiles on 132 SMs)
    ("wgmma 128x256 s4 split2", wgmma(W.WGMMA_TILE, 2)),
    ("wgmma 64x128 s4 x2", wgmma(W.WGMMA_64x128)),
]
WGMMA_M64_VARIANTS = [  # M = 64 x 8192^2 (the cp.async default without tensor maps: 64x64k64s6 x2 split2)
    ("wgmma 64x128 s4 x2 split4", wgmma(W.WGMMA_64x128, 4)),
]


def tma(tile, splits=1, group=RASTER_GROUP):
    return W.TmaConfig(tile=tile, splits=splits, raster_group=group)


# The TMA-fed kernel (producer warp, mbarrier ring, no block barrier).
TMA_LARGE_VARIANTS = [  # M > 64 with full waves (default: tma 128x256k64s4)
    ("tma 128x256 s4", tma(W.TMA_TILE)),
    ("tma 128x256 s4 group16", tma(W.TMA_TILE, group=16)),
    ("tma 128x256 s3", tma(W.TmaGemmTile(bm=128, bn=256, stages=3))),
    ("tma 128x128 s6", tma(W.TMA_128x128)),
]
TMA_MID_VARIANTS = [  # 512 x 4096^2 (default: tma 128x128 s6)
    ("tma 128x128 s6", tma(W.TMA_128x128)),
    ("tma 64x128 s4 x2", tma(W.TMA_64x128)),
    ("tma 128x256 s4 split2", tma(W.TMA_TILE, 2)),
]
# The ping-pong kernel (persistent, two consumer warpgroups on alternating tiles; default 128x128 s6).
PP = P.PingPongTile
PINGPONG_VARIANTS = [
    ("pingpong 128x128 s6", P.PingPongConfig(tile=P.PINGPONG_128x128)),
    ("pingpong 128x128 s5", P.PingPongConfig(tile=PP(bm=128, bn=128, stages=5))),
    ("pingpong 128x128 s6 group16", P.PingPongConfig(tile=P.PINGPONG_128x128, raster_group=16)),
    ("pingpong 128x128 s6 pending0", P.PingPongConfig(tile=PP(bm=128, bn=128, stages=6, pending=0))),
    ("pingpong 128x128 k128 s3", P.PingPongConfig(tile=PP(bm=128, bn=128, bk=128, stages=3))),
    ("pingpong 64x256 s5", P.PingPongConfig(tile=PP(bm=64, bn=256, stages=5))),
]
TMA_STREAM_VARIANTS = [  # M <= 64 x 8192^2 on the straight TMA kernel (the default is now the swapped stream)
    ("tma 64x64 s6 x2 split2", tma(W.TMA_64x64, 2)),
    ("wgmma 64x64 s6 x2 split2 (v8 default)", wgmma(W.WGMMA_64x64, 2)),
    ("tma 64x64 s14 split1", tma(W.TmaGemmTile(bm=64, bn=64, stages=14, max_blocks_per_sm=1))),
    ("tma 64x64 s12 split2", tma(TMA_STREAM_TILES[0], 2)),
    ("tma 64x64 s8 split2", tma(TMA_STREAM_TILES[1], 2)),
    ("tma 64x128 s8 split2", tma(TMA_STREAM_TILES[2], 2)),
    ("tma 64x128 s4 x2 split4", tma(W.TMA_64x128, 4)),
]
# Wider weight tiles for M <= 64 (x re-read from L2 once per 256 columns instead of 64).
TMA_WIDE_STREAM_VARIANTS = [
    ("tma 64x256 s5 split4", tma(W.TMA_64x256, 4)),
    ("tma 64x256 s5 split2", tma(W.TMA_64x256, 2)),
    ("tma 64x256 s4 split4", tma(W.TmaGemmTile(bm=64, bn=256, stages=4, max_blocks_per_sm=1), 4)),
    ("tma 64x128 s4 x2 split2", tma(W.TMA_64x128, 2)),
    ("tma 64x128 s8 split2 group1", tma(TMA_STREAM_TILES[2], 2, 1)),
]
# The swapped stream's first tiles (64 k a stage, no L2 hints): per x padding of 8 or 16,
# 64 weight columns at 8 / 12 / 16 stages, 128 at 8 / 12; x padded to 64: 64 columns at 8 /
# 12 stages, 128 at 8. The defaults (swap_tma.SWAP_DEFAULT_TILES) came after them.
SWAP_TILES = tuple(S.SwapTile(bn=bn, mx=mx, stages=stages) for mx in (8, 16)
                   for bn, stages in ((64, 8), (64, 12), (64, 16), (128, 8), (128, 12)))
SWAP_TILES += tuple(S.SwapTile(bn=bn, mx=64, stages=stages) for bn, stages in ((64, 8), (64, 12), (128, 8)))


def swap_variants(mx):
    """The swapped-operand TMA kernel (M <= mx): every SWAP_TILES tile of this x padding at 1,
    2 and 4 splits."""
    return [(f"swap n{t.bn} s{t.stages} split{splits}", S.SwapConfig(tile=t, splits=splits))
            for t in SWAP_TILES if t.mx == mx for splits in (1, 2, 4)]


# Deeper k per stage (256 / 512 contiguous bytes of each weight
# row per stage) with and without L2 eviction hints (weight first, x last). The defaults
# (SWAP_DEFAULT_TILES) are among them; staging the output through shared memory and
# the weight hint alone (erratic: 3.30-3.87 TB/s at 64 rows) were dropped.
SWAP_DEEP_K_TILES = {  # (bn, stages, bk, l2 hints)
    8: [(64, 8, 128, False), (64, 5, 256, False), (64, 8, 64, True), (64, 8, 128, True), (64, 5, 256, True),
        (64, 6, 256, True)],
    16: [(64, 8, 128, False), (64, 4, 256, False), (64, 8, 64, True), (64, 10, 128, True), (64, 4, 256, True),
         (64, 5, 256, True)],
    64: [(64, 4, 128, False), (64, 6, 128, False), (64, 3, 256, False), (64, 8, 64, True), (64, 4, 128, True),
         (64, 6, 128, True), (64, 7, 128, True), (64, 3, 256, True), (128, 4, 128, True)],
}


def swap_bk_variants(mx):
    """The deeper-k swapped tiles of this x padding (split 1; bn 128 also split 2)."""
    tiles = [S.SwapTile(bn=bn, mx=mx, stages=stages, bk=bk, l2_hints=hints) for bn, stages, bk,
             hints in SWAP_DEEP_K_TILES[mx]]
    return [(f"swap n{t.bn} s{t.stages} bk{t.bk}{' hints' if t.l2_hints else ''} split{splits}",
             S.SwapConfig(tile=t, splits=splits)) for t in tiles for splits in ((1, 2) if t.bn == 128 else (1,))]


TF = F.WideTile
FP32_VARIANTS = [  # 3xTF32 tensor cores (float32 accuracy) against the SIMT kernel
    ("tf32x3 128x128k32s4 8w", F.Tf32x3Config(tile=F.TF32_TILE)),
    ("tf32x3 128x64k16s4 2/SM", F.Tf32x3Config(tile=TF32_NARROW_TILE)),
    ("tf32x3 128x128k16s4 8w", F.Tf32x3Config(tile=TF(bm=128, bn=128, bk=16, warps_m=2, warps_n=4, stages=4,
                                                      max_blocks_per_sm=1, relative_speed=1.0))),
    ("tf32x3 128x128k32s3 8w", F.Tf32x3Config(tile=TF(bm=128, bn=128, bk=32, warps_m=2, warps_n=4, stages=3,
                                                      max_blocks_per_sm=1, relative_speed=1.0))),
    ("simt 128x128k8 8x8", SimtConfig(tile=SIMT_LARGE)),
    ("simt 64x64k16 4x4", SimtConfig(tile=SIMT_SMALL)),
]


# float32 / float64 at small M on the weight-streaming kernel (the default for float32
# M <= 4, float64 M = 1).
GEMV_WIDE_VARIANTS = [
    ("gemv 16 rows (no split)", G.GemvConfig(tile=GEMV_16_ROWS, splits=1)),
    ("gemv 16 rows split4", G.GemvConfig(tile=GEMV_16_ROWS, splits=4)),
    ("gemv 16 rows split32", G.GemvConfig(tile=GEMV_16_ROWS, splits=32)),
    ("gemv 1 row split8", G.GemvConfig(tile=G.GemvTile(rows=1), splits=8)),
    ("gemv 1 row split32", G.GemvConfig(tile=G.GemvTile(rows=1), splits=32)),
]


def dmma_pipelined(bm, bn, warps_m, warps_n, stages, blocks_per_sm, mma_k):
    """A linear_dmma tile (float64, sm_90: fragments pipelined, DMMA m16n8k{mma_k})."""
    return D.PipelinedDmmaConfig(tile=D.DmmaTile(bm=bm, bn=bn, bk=16, warps_m=warps_m, warps_n=warps_n, stages=stages,
                                                 max_blocks_per_sm=blocks_per_sm, relative_speed=1.0, dmma_k=mma_k))


FP64_VARIANTS = [  # float64 DMMA tiles; v5 (m16n8k8) and v6 (m16n8k16): all 44.4-48.9 TFLOP/s
    ("dmma 128x128k16s3 8w", F.DmmaConfig(tile=F.DMMA_TILE)),
    ("dmma 64x128k16s3 2/SM", F.DmmaConfig(tile=TF(bm=64, bn=128, bk=16, warps_m=2, warps_n=2, stages=3,
                                                   max_blocks_per_sm=2, relative_speed=1.0, itemsize=8))),
    # linear_dmma (v7): cuBLAS's 128x64 x 4 warps of 64x32 x 2/SM first (DMMA_PIPELINED_TILE)
    ("pipe 128x64s3 k8 2/SM", D.PipelinedDmmaConfig(tile=D.DMMA_PIPELINED_TILE)),
    ("pipe 128x64s3 k16 2/SM", dmma_pipelined(128, 64, 2, 2, 3, 2, 16)),
    ("pipe 128x64s4 k8 2/SM", dmma_pipelined(128, 64, 2, 2, 4, 2, 8)),
    ("pipe 128x128s3 k8 8w 64x32", dmma_pipelined(128, 128, 2, 4, 3, 1, 8)),
    ("pipe 128x128s3 k8 8w 32x64", dmma_pipelined(128, 128, 4, 2, 3, 1, 8)),
]
# K-major weights only: one barrier per 32 k (216 KB of shared memory); a row-major weight
# spills at this tile on sm_90a (255 registers). linear_dmma's 64x128 tile (32x64 warps)
# copies a row-major weight in passes of 2 k rows, which its swizzle does not allow.
FP64_KMAJOR_VARIANTS = [
    ("dmma 128x128k32s3 8w", F.DmmaConfig(tile=TF(bm=128, bn=128, bk=32, warps_m=4, warps_n=2, stages=3,
                                                  max_blocks_per_sm=1, relative_speed=1.0, itemsize=8))),
    ("pipe 64x128s3 k8 2/SM", dmma_pipelined(64, 128, 2, 2, 3, 2, 8)),
]


# float32 M = 17..128 and float64 M = 5..128 on tiles of 16-64 rows that split K
# through slots (the defaults' split count from choose_k_splits).
def few_row_variants(dname, rows):
    """The few-row tiles that hold ``rows`` (and the 128-row tile) at 1-8 splits (float64: 1-12)."""
    if dname == "fp32":
        make, tiles, counts = F.Tf32x3Config, F.TF32_FEW_ROW_TILES + (F.TF32_TILE,), (1, 2, 4, 8)
    else:
        make, tiles, counts = D.PipelinedDmmaConfig, D.DMMA_FEW_ROW_TILES + (D.DMMA_PIPELINED_TILE,), (1, 2, 3, 6, 12)
    tiles = [t for t in tiles if t.bm >= rows][:2]
    return [(f"{make.kind} {t.bm}x{t.bn}k{t.bk}s{t.stages} split{c}",
             make(tile=t, splits=c)) for t in tiles for c in counts]


def _tf32(tile, splits):
    return F.Tf32x3Config(tile=tile, splits=splits)


def _dmma(tile, splits):
    return D.PipelinedDmmaConfig(tile=tile, splits=splits)


FEW_ROW_FOLLOWUP = {  # the follow-up: fewer-row float32 tiles at M <= 16, deeper float64 stages
    ("fp32", 16): [(f"tf32x3 16x128k32s4 split{c}", _tf32(F.TF32_M16_TILE, c)) for c in (2, 4, 8)]
    + [("tf32x3 32x128k32s4 split4", _tf32(F.TF32_M32_TILE, 4))],
    ("fp64", 4): [(f"dmma 16x64k16s6 split{c}", _dmma(D.DMMA_M16_TILE, c)) for c in (1, 3, 6)],
    ("fp64", 32): [(f"dmma 32x64k16s{s} split{c}", _dmma(dataclasses.replace(D.DMMA_M32_TILE, stages=s), c))
                   for s in (6, 8) for c in (3, 6, 12)],
    ("fp64", 64): [(f"dmma 64x64k16s6 split{c}", _dmma(dataclasses.replace(D.DMMA_M64_TILE, stages=6), c))
                   for c in (2, 3, 4)]
    + [(f"dmma 64x128k16s4 8w split{c}", _dmma(D.DmmaTile(bm=64, bn=128, bk=16, warps_m=2, warps_n=4, stages=4,
                                                          max_blocks_per_sm=2, relative_speed=1.0), c))
       for c in (2, 3, 4)],
}


FP64_M16_STAGE_VARIANTS = [  # the 16-row float64 tile at 4 and 8 stages, 3 splits
    (f"dmma 16x64k16s{stages} split3", _dmma(dataclasses.replace(D.DMMA_M16_TILE, stages=stages), 3))
    for stages in (4, 8)
] + [("gemv 16 rows", G.GemvConfig(tile=GEMV_16_ROWS, splits=1))]


def make_sets(m, k, n, dtype, kmajor, count):
    """``count`` rotating (x, weight, bias, out) sets; weight is (K, N) row-major or the
    transposed view of an (N, K) array (``kmajor``)."""
    rng = cupy.random.default_rng(1)
    sets = []
    for _ in range(count):
        x = (rng.standard_normal((m, k), dtype=np.float32)).astype(dtype)
        w_shape = (n, k) if kmajor else (k, n)
        w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(math.sqrt(k))).astype(dtype)
        b = rng.standard_normal((n,), dtype=np.float32).astype(dtype)
        sets.append((x, w.T if kmajor else w, b, cupy.empty((m, n), dtype=dtype)))
    return sets


def widen(a):
    """float32 copy of a 16-bit array (bfloat16 through its bits), float64 of a float32 or float64 one."""
    if a.dtype == BFLOAT16:
        return (a.view(cupy.uint16).astype(cupy.uint32) << 16).view(cupy.float32)
    return a.astype(np.float64 if a.dtype.itemsize >= 4 else np.float32)


def reference(x, w, b):
    return cupy.maximum(widen(x) @ widen(w) + widen(b), 0)


def graph_ms(fn, sets, rounds=4):
    """Per-call milliseconds of ``fn(*set)`` replayed from a CUDA graph (no host overhead)."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for s in sets:  # warm: compile, allocate the split-K workspace of this stream
            fn(*s)
        stream.synchronize()
        stream.begin_capture()
        for _ in range(rounds):
            for s in sets:
                fn(*s)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        calls = rounds * len(sets)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        reps = []
        for _ in range(5):
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            reps.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return sorted(reps)[len(reps) // 2]


def host_us(fn, args, calls=50):
    """Host microseconds per call (launches only, no synchronisation inside the loop)."""
    cupy.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    t1 = time.perf_counter()
    cupy.cuda.get_current_stream().synchronize()
    return (t1 - t0) / calls * 1e6


def rate(ms, m, k, n, itemsize):
    if m <= 64:
        nbytes = (m * k + k * n + n + m * n) * itemsize
        return f"{nbytes / (ms * 1e-3) / 1e12:6.2f} TB/s"
    return f"{2 * m * n * k / (ms * 1e-3) / 1e12:6.1f} TFLOP/s"


def line(label, variant, eager, graph, hus, err, status, m, k, n, itemsize):
    g = f"{graph:8.4f}  {rate(graph, m, k, n, itemsize)}" if graph else f"{'-':>8}  {'':14}"
    e = f"{eager:8.4f}  {rate(eager, m, k, n, itemsize)}" if eager else f"{'-':>8}  {'':14}"
    h = f"{hus:6.1f}" if hus else "     -"
    er = f"{err:.1e}" if err is not None else "   -   "
    print(f"{label:<26} {variant:<24} {e} | {g} | host {h} us | err {er} {status}", flush=True)


def run_case(m, k, n, dname, kmajor, variants):
    dtype = DTYPES[dname]
    itemsize = np.dtype(dtype).itemsize
    per_set = (m * k + k * n + n + m * n) * itemsize
    sets = make_sets(m, k, n, dtype, kmajor, min(rotation_count(per_set), 4))
    label = f"{m}x{k}x{n} {dname} {'w=(N,K).T' if kmajor else 'w=(K,N)'}"
    x0, w0, b0, _ = sets[0]
    ref = reference(x0, w0, b0)
    scale = float(cupy.abs(ref).max()) or 1.0

    def peer(name, fn):
        try:
            eager = time_cuda_budget(fn, [s[:3] for s in sets])
            line(label, name, eager, None, None, None, "peer", m, k, n, itemsize)
        except Exception as exc:  # a peer only
            print(f"{label:<26} {name:<24} failed: {type(exc).__name__}: {exc}", flush=True)

    peer("cupy.matmul", lambda x, w, b: cupy.matmul(x, w))
    peer("cupy unfused", lambda x, w, b: cupy.maximum(x @ w + b, 0))
    if torch is not None:
        try:
            tsets = [tuple(to_torch(a) for a in s[:3]) for s in sets]
            eager = time_cuda_budget(lambda x, w, b: torch._addmm_activation(b, x, w), tsets)
            line(label, "torch addmm_relu", eager, None, None, None, "peer", m, k, n, itemsize)
        except Exception as exc:
            print(f"{label:<26} torch addmm_relu failed: {type(exc).__name__}: {exc}", flush=True)

    modes = {"both": (False, True), "0": (False,), "1": (True,)}.get(os.environ.get("SWEEP_PDL", ""), (None,))
    variants = [(name + (" +pdl" if pdl else ""), config, pdl) for name, config in variants for pdl in modes]
    for name, config, pdl in variants:
        if config is None and pdl is not True:
            chosen = default_config(m, k, n, dname, kmajor)
            print(f"{label:<26} default = {chosen}", flush=True)
        try:
            call = caller(config, pdl, sets[0])
            out0 = sets[0][3]
            out0.view(cupy.uint8).fill(255)  # NaN everywhere: an unwritten element shows
            call(*sets[0])
            err = float(cupy.abs(widen(out0) - ref).max()) / scale
            ok = bool(np.isfinite(err)) and err <= TOL[dname]
            eager = time_cuda_budget(call, sets)
            try:
                graph = graph_ms(call, sets, rounds=1 if m * n * k > 2**36 else 4)
            except Exception as exc:
                graph = None
                print(f"  graph timing failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            hus = host_us(call, sets[0], calls=5 if m * n * k > 2**36 else 50)
            line(label, name, eager, graph, hus, err, "ok" if ok else "WRONG", m, k, n, itemsize)
        except Exception as exc:
            print(f"{label:<26} {name:<24} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            traceback.print_exc(limit=2)


def caller(config, pdl, example):
    """The call of one variant: the public function (``pdl`` None: the library's PDL rule), or
    the variant's plan bound with programmatic dependent launch forced on or off (``pdl``) and
    launched directly. Every set of a case has the example's signature, so one plan serves all."""
    if pdl is None:
        return lambda x, w, b, out: cufuse.fused_linear_relu(x, w, b, out=out, config=config)
    x, w, b, out = example
    item = x.dtype.itemsize
    dev = current_device_info()
    plan = plan_linear(x.shape, tuple(s // item for s in x.strides), x.data.ptr, w.shape,
                       tuple(s // item for s in w.strides), w.data.ptr, b.strides[0] // item, out.data.ptr, x.dtype,
                       dev, config)
    launches = tuple(dataclasses.replace(launch, pdl=pdl) for launch in plan.launches)
    bound = BoundPlan(Plan(launches, plan.scratch, plan.temporaries), dev)
    return lambda x, w, b, out: bound({"x": x, "weight": w, "bias": b, "out": out})


def _problem(m, k, n, dname, kmajor):
    """The sweep's operands: dense, aligned (make_sets' layouts), with a bias."""
    dtype = np.dtype(DTYPES[dname])
    m_rows, ldx, x_k_stride = rows_view((m, k), (k, 1))
    w_strides = (1, k) if kmajor else (n, 1)
    return linear_problem(m_rows, ldx, x_k_stride, 0, k, n, w_strides, 0, 1, None, dtype, current_device_info())


def default_config(m, k, n, dname, kmajor):
    return select.choose(_problem(m, k, n, dname, kmajor), current_device_info())


def all_specs(plan):
    specs = set()
    for m, k, n, dname, kmajor, variants in plan:
        problem = _problem(m, k, n, dname, kmajor)
        for _, config in variants:
            config = config or default_config(m, k, n, dname, kmajor)
            specs.add(config.spec(problem.dtype, problem.kmajor))
    return sorted(specs, key=str)


def profile_host(m=16, k=8192, n=8192, dname="bf16", calls=300):
    """Where the host time of one public call goes (cProfile, top functions by own time)."""
    import cProfile
    import pstats

    x, w, b, out = make_sets(m, k, n, DTYPES[dname], False, 1)[0]
    cufuse.fused_linear_relu(x, w, b, out=out)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        cufuse.fused_linear_relu(x, w, b, out=out)
    profiler.disable()
    cupy.cuda.get_current_stream().synchronize()
    print(f"host profile of {calls} calls, {m}x{k}x{n} {dname} (top by own time):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(14)


def sweep_plan():
    """(M, K, N, dtype name, K-major weight, variants) of every case, in run order."""
    d = [("default", None)]
    return [
        (8192, 8192, 8192, "bf16", False, d + TMA_LARGE_VARIANTS[:1] + PINGPONG_VARIANTS + WGMMA_VARIANTS[1:]
         + LARGE_VARIANTS),
        (4096, 4096, 11008, "bf16", True, d + TMA_LARGE_VARIANTS + PINGPONG_VARIANTS),
        (4096, 4096, 14336, "bf16", False, d + TMA_LARGE_VARIANTS + PINGPONG_VARIANTS),
        (512, 8192, 28672, "bf16", True, d + TMA_LARGE_VARIANTS + PINGPONG_VARIANTS),
        (512, 4096, 14336, "bf16", False, d + TMA_LARGE_VARIANTS + PINGPONG_VARIANTS),
        (16384, 4096, 4096, "bf16", False, d + TMA_LARGE_VARIANTS + LARGE_VARIANTS[:3]),
        (16384, 4096, 4096, "bf16", True, d + TMA_LARGE_VARIANTS + WGMMA_VARIANTS[1:] + WGMMA_RASTER_VARIANTS),
        (4096, 4096, 16384, "bf16", False, d + LARGE_VARIANTS[:3]),
        (8192, 8192, 8192, "bf16", True, d + TMA_LARGE_VARIANTS[:1] + WGMMA_VARIANTS[1:]),
        (512, 4096, 4096, "bf16", False, d + TMA_MID_VARIANTS + MID_VARIANTS + WGMMA_MID_VARIANTS),
        (512, 4096, 4096, "bf16", True, d + TMA_MID_VARIANTS + WGMMA_MID_VARIANTS),
        (512, 4096, 4096, "fp16", False, d),
        (512, 4096, 4096, "fp16", True, d),
        (1, 8192, 8192, "bf16", False,
         d + STREAM_VARIANTS[:4] + TMA_WIDE_STREAM_VARIANTS[:1] + swap_variants(8)
         + swap_bk_variants(8)),
        (1, 8192, 8192, "bf16", True,
         d + STREAM_VARIANTS[:4] + TMA_WIDE_STREAM_VARIANTS[:1] + swap_variants(8)
         + swap_bk_variants(8)),
        (8, 8192, 8192, "bf16", False, d + STREAM_VARIANTS[2:3] + swap_variants(8)
         + swap_bk_variants(8)),
        (8, 8192, 8192, "bf16", True, d + STREAM_VARIANTS[2:3] + swap_variants(8)
         + swap_bk_variants(8)),
        (16, 8192, 8192, "bf16", False, d + STREAM_VARIANTS + TMA_WIDE_STREAM_VARIANTS[:2] + swap_variants(16)
         + swap_bk_variants(16)),
        (16, 8192, 8192, "bf16", True,
         d + TMA_STREAM_VARIANTS[:2] + STREAM_VARIANTS + TMA_WIDE_STREAM_VARIANTS[:2] + swap_variants(16)
         + swap_bk_variants(16)),
        (64, 8192, 8192, "bf16", False,
         d + TMA_WIDE_STREAM_VARIANTS + TMA_STREAM_VARIANTS + M64_VARIANTS + WGMMA_M64_VARIANTS + swap_variants(64)
         + swap_bk_variants(64)),
        (64, 8192, 8192, "bf16", True,
         d + TMA_WIDE_STREAM_VARIANTS + TMA_STREAM_VARIANTS + M64_VARIANTS + WGMMA_M64_VARIANTS + swap_variants(64)
         + swap_bk_variants(64)),
        (1, 8192, 8192, "fp16", False, d),
        (1, 8192, 8192, "fp16", True, d),
        (16, 8192, 8192, "fp16", True, d + swap_bk_variants(16)),
        (16, 8192, 8192, "fp16", False, d + swap_bk_variants(16)),
        (64, 8192, 8192, "fp16", False, d + TMA_STREAM_VARIANTS[:3] + swap_bk_variants(64)),
        (64, 8192, 8192, "fp16", True, d + TMA_STREAM_VARIANTS[:3] + swap_bk_variants(64)),
        (4096, 4096, 4096, "fp32", False, d + FP32_VARIANTS),
        (4096, 4096, 4096, "fp32", True, d + FP32_VARIANTS[:2] + FP32_VARIANTS[4:5]),
        (512, 4096, 4096, "fp32", False, d + FP32_VARIANTS[:2]),
        (16, 8192, 8192, "fp32", False, d + FP32_VARIANTS[:1] + GEMV_WIDE_VARIANTS[:3] + FEW_ROW_FOLLOWUP["fp32", 16]),
        (16, 8192, 8192, "fp32", True, d + FP32_VARIANTS[:1] + FEW_ROW_FOLLOWUP["fp32", 16]),
        (4, 8192, 8192, "fp32", False, d + FP32_VARIANTS[:1] + FEW_ROW_FOLLOWUP["fp32", 16]),
        (4, 8192, 8192, "fp32", True, d + FP32_VARIANTS[:1] + FEW_ROW_FOLLOWUP["fp32", 16]),
        (1, 8192, 8192, "fp32", False, d + FP32_VARIANTS[:1] + GEMV_WIDE_VARIANTS[3:]),
        (1, 8192, 8192, "fp32", True, d + FP32_VARIANTS[:1]),
        (16, 8192, 8192, "fp64", False, d + FP64_VARIANTS[2:3] + few_row_variants("fp64", 16) + FP64_M16_STAGE_VARIANTS),
        (16, 8192, 8192, "fp64", True, d + FP64_VARIANTS[2:3] + few_row_variants("fp64", 16) + FP64_M16_STAGE_VARIANTS),
        (8, 8192, 8192, "fp64", False, d + few_row_variants("fp64", 8)[:5] + FP64_M16_STAGE_VARIANTS[2:]),
        (8, 8192, 8192, "fp64", True, d + few_row_variants("fp64", 8)[:5] + FP64_M16_STAGE_VARIANTS[2:]),
        (32, 8192, 8192, "fp64", False, d + few_row_variants("fp64", 32) + FEW_ROW_FOLLOWUP["fp64", 32]),
        (32, 8192, 8192, "fp64", True, d + few_row_variants("fp64", 32) + FEW_ROW_FOLLOWUP["fp64", 32]),
        (64, 8192, 8192, "fp64", True, d + few_row_variants("fp64", 64) + FEW_ROW_FOLLOWUP["fp64", 64]),
        (128, 8192, 8192, "fp64", False, d + few_row_variants("fp64", 128)),
        (32, 8192, 8192, "fp32", False, d + few_row_variants("fp32", 32)),
        (32, 8192, 8192, "fp32", True, d + few_row_variants("fp32", 32)),
        (128, 8192, 8192, "fp32", False, d + few_row_variants("fp32", 128)),
        (1, 8192, 8192, "fp64", True, d + FP64_VARIANTS[2:3] + FEW_ROW_FOLLOWUP["fp64", 4]),
        (1, 8192, 8192, "fp64", False, d + FP64_VARIANTS[2:3]),
        (4, 8192, 8192, "fp64", True, d + FP64_VARIANTS[2:3] + FEW_ROW_FOLLOWUP["fp64", 4]),
        (64, 8192, 8192, "fp32", False, d + few_row_variants("fp32", 64)),
        (64, 8192, 8192, "fp32", True, d + few_row_variants("fp32", 64)),
        (64, 8192, 8192, "fp64", False, d + few_row_variants("fp64", 64) + FEW_ROW_FOLLOWUP["fp64", 64]),
        (4, 8192, 8192, "fp64", False, d + FP64_VARIANTS[2:3] + FEW_ROW_FOLLOWUP["fp64", 4]),
        (4096, 4096, 4096, "fp64", False, d + FP64_VARIANTS),
        (4096, 4096, 4096, "fp64", True, d + FP64_VARIANTS + FP64_KMAJOR_VARIANTS),
    ]


def selected_plan(only=None, named=None):
    """``sweep_plan()`` filtered: ``only`` (e.g. "16x8192" or "64x8192x8192,512x4096 bf16") keeps
    the cases whose label contains one of its comma-separated strings; ``named`` (e.g. "swap" or
    "c2,k128") keeps, in each case, the default and the variants whose name contains one."""
    plan = sweep_plan()
    if only:
        plan = [p for p in plan if any(o in f"{p[0]}x{p[1]}x{p[2]} {p[3]}" for o in only.split(","))]
    if named:
        plan = [p[:5] + ([v for v in p[5] if v[1] is None or any(o in v[0] for o in named.split(","))],)
                for p in plan]
    return plan


def main():
    dev = current_device_info()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}  {dev}")
    print("anchors (H200): cuBLASLt RELU_BIAS 8192^3 bf16 ~700-716 TFLOP/s, 512x4096^2 fp16 635; "
          "M<=64 x 8192^2: cuBLASLt 3.0-3.75 TB/s, copy ceiling 3.6 TB/s at 128 MiB, 4.26 at 1 GiB; "
          "cupy.matmul fp32 4096^3 ~48-50 TFLOP/s (fp32 target: >= cupy unfused)")
    print("targets: large M >= 0.60x cuBLASLt (~420 TFLOP/s 8192^3, ~370 at 512x4096^2); M<=64 >= 3.7 TB/s")
    print("columns: eager ms / rate (what the benchmark sees) | graph ms / rate (kernel only) | host us per call | "
          "max err / max|ref|")
    plan = selected_plan(os.environ.get("SWEEP_ONLY"), os.environ.get("SWEEP_VARIANTS"))
    t0 = time.time()
    specs = all_specs(plan)
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(specs)} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}")
    for spec, error in failures:
        print(f"  compile FAILED {spec}: {error[:300]}")
    for m, k, n, dname, kmajor, variants in plan:
        run_case(m, k, n, dname, kmajor, variants)
        cupy.get_default_memory_pool().free_all_blocks()
    try:
        profile_host()
    except Exception as exc:
        print(f"host profile failed: {type(exc).__name__}: {exc}")
    print(f"sweep done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
