"""GPU test helpers of the attention tests and of ``sanitize.py``: inputs, the naive
in-dtype computation, the comparison with the float64 oracle, and the case tables.

Correctness uses FlashAttention's rule: the kernel's max error against the float64 oracle is
at most twice the error of the same computation done naively in the input dtype (scores,
probabilities and output rounded to the dtype at each step, emulated on the CPU), plus the
output dtype's rounding floor.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from cufuse import attention, reference
from cufuse.ops.attention.decode import DecodeTile
from cufuse.ops.attention.mma import FlashMmaTile
from cufuse.ops.attention.select import WGMMA_PREFILL, WGMMA_PREFILL_CP_ASYNC

from ..conftest import poisoned

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)

# The default rule's cp.async wgmma tiles (select.WGMMA_PREFILL_CP_ASYNC: D64 up to 512 / 1536 /
# more keys a row, D96, D128, D256), taken where tensor maps cannot describe the operands.
(_, D64_SHORT), (_, D64_MID), (_, D64_LONG) = WGMMA_PREFILL_CP_ASYNC[64]
((_, D96_TILE),) = WGMMA_PREFILL_CP_ASYNC[96]
((_, D128_TILE),) = WGMMA_PREFILL_CP_ASYNC[128]
((_, D256_TILE),) = WGMMA_PREFILL_CP_ASYNC[256]
# The default TMA-fed tile of each tile head dim (select.WGMMA_PREFILL, attention_fwd_wgmma_tma:
# a producer warpgroup, two or three ping-ponged consumer warpgroups); tma_twin: the TMA tile of
# a cp.async tile's head dim.
TMA_TILES = {64: WGMMA_PREFILL[64][1][1], 96: WGMMA_PREFILL[96][0][1], 128: WGMMA_PREFILL[128][0][1],
             256: WGMMA_PREFILL[256][0][1]}


def tma_twin(tile):
    return TMA_TILES[tile.head_dim]


def make_inputs(rng, n_q, n_k, d, dv, mode, dtype, batch=1, heads=2, group=2):
    """q, k, v as NumPy arrays in ``dtype``; k/v broadcast over heads for MQA/GQA."""
    if mode == "mha":
        qs, ks = (batch, heads, n_q, d), (batch, heads, n_k, d)
    elif mode == "mqa":
        qs, ks = (batch, heads, n_q, d), (batch, 1, n_k, d)
    else:  # GQA: (B, Hkv, G, N, D) with k/v (B, Hkv, 1, N, D)
        qs, ks = (batch, heads, group, n_q, d), (batch, heads, 1, n_k, d)
    q = rng.standard_normal(qs).astype(dtype)
    k = rng.standard_normal(ks).astype(dtype)
    v = rng.standard_normal(ks[:-1] + (dv,)).astype(dtype)
    return q, k, v


def naive_in_dtype(q, k, v, causal, scale, dtype, window=None, softcap=None, sinks=None):
    """softmax(q k^T * scale) v with every intermediate rounded to ``dtype`` (float32 math);
    ``softcap`` c maps each scaled score s to c * tanh(s / c) (rounded too), ``window`` masks
    as ``reference.visible_keys``; ``sinks`` append each item's logit as a key of value 0."""
    def rnd(x):
        return x.astype(dtype).astype(np.float32)

    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    scores = rnd(rnd(np.matmul(q32, np.swapaxes(k32, -1, -2))) * np.float32(scale))
    if softcap is not None:
        cap = np.float32(softcap)
        scores = rnd(cap * np.tanh(scores / cap))
    n_q, n_k = scores.shape[-2:]
    visible = reference.visible_keys(np.arange(n_k), n_q, n_k, causal, window)
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    if sinks is not None:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        column = reference.sink_logits(sinks, q.shape[:-2], batch).astype(np.float32)[..., None]
        scores = np.concatenate([scores, np.broadcast_to(column, scores.shape[:-1] + (1,))], axis=-1)
    with np.errstate(invalid="ignore"):
        m = scores.max(axis=-1, keepdims=True)
        p = np.where(np.isfinite(m), np.exp(scores - np.where(np.isfinite(m), m, 0)), 0)
        total = p.sum(axis=-1, keepdims=True)
        p = rnd(np.where(total > 0, p / np.where(total > 0, total, 1), 0))
    if sinks is not None:
        p = p[..., :-1]
    return rnd(np.matmul(p, v32))


def error_budget(q, k, v, ref, causal, scale, window=None, softcap=None, sinks=None):
    """``(naive error, floor)`` of FlashAttention's rule for the oracle's result ``ref``: a
    kernel passes with a max error up to ``2 * naive error + floor``."""
    dtype = q.dtype
    naive = naive_in_dtype(q, k, v, causal, scale, dtype, window, softcap, sinks)
    naive_err = np.abs(naive.astype(np.float64) - ref).max(initial=0)
    floor = 2 * np.abs((ref + 0.3 - 0.3).astype(dtype).astype(np.float64) - ref).max(initial=0) + 1e-5
    return naive_err, floor


def check_against_oracle(cp, q, k, v, *, causal, return_lse, use_out, scale=None, config=None, to_device=None,
                         enable_gqa=False, window=None, softcap=None, sinks=None):
    """Run the kernel on (q, k, v), compare with the float64 oracle by FlashAttention's rule.
    ``to_device`` maps each operand to the device array the kernel gets (default
    ``cp.asarray``; e.g. a strided view). ``enable_gqa``: q ``(..., Hkv, G, Nq, D)`` and k / v
    ``(..., Hkv, 1, Nk, D)`` run as the 4-D grouped-query form ``(..., Hkv * G, Nq, D)`` over
    ``(..., Hkv, Nk, D)``. ``window`` / ``softcap`` go to the oracle, the naive computation
    and the kernel; with a window, rows that see no key must also be exactly 0. ``sinks``
    (float32 NumPy ``(H,)``) go to the oracle, the naive computation and the kernel (a CuPy
    copy); rows that see no key must then be 0 with lse the sink. Returns a list of failure
    messages (empty when it passes)."""
    to_device = to_device or cp.asarray
    dtype = q.dtype
    scale_value = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    ref, ref_lse = reference.attention(q, k, v, causal=causal, scale=scale_value, window=window, softcap=softcap,
                                       sinks=sinks, return_lse=True)
    _, keys_lse = reference.attention(q, k, v, causal=causal, scale=scale_value, window=window, return_lse=True)
    kwargs = dict(causal=causal, scale=scale, window=window, softcap=softcap, return_lse=return_lse, config=config)
    if sinks is not None:
        kwargs["sinks"] = cp.asarray(sinks)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    operands = [to_device(x) for x in (q, k, v)]
    out_shape = batch + (q.shape[-2], v.shape[-1])
    if enable_gqa:
        operands = [operands[0].reshape(q.shape[:-4] + (-1,) + q.shape[-2:])] + [x[..., 0, :, :] for x in operands[1:]]
        out_shape = operands[0].shape[:-1] + (v.shape[-1],)
        kwargs["enable_gqa"] = True
    out = poisoned(cp, out_shape, dtype) if use_out else None
    result = attention(*operands, out=out, **kwargs)
    got, lse = result if return_lse else (result, None)
    if use_out and got is not out:
        return ["out was not returned"]
    got = cp.asnumpy(got).astype(np.float64).reshape(ref.shape)
    if lse is not None:
        lse = lse.reshape(ref_lse.shape)
    failures = []
    if not np.isfinite(got).all():
        failures.append(f"{np.count_nonzero(~np.isfinite(got))} non-finite outputs")
    if window is not None or sinks is not None:
        keyless = np.broadcast_to(np.isneginf(keys_lse)[..., None], got.shape)
        if np.any(got[keyless] != 0):
            failures.append(f"{np.count_nonzero(got[keyless] != 0)} nonzero outputs in rows that see no key")
    naive_err, floor = error_budget(q, k, v, ref, causal, scale_value, window, softcap, sinks)
    err = np.abs(got - ref).max(initial=0)
    if not err <= 2 * naive_err + floor:
        failures.append(f"max error {err:.3g} > 2 * naive {naive_err:.3g} + floor {floor:.3g}")
    if return_lse:
        lse = cp.asnumpy(lse)
        lse_dtype = np.float64 if q.dtype == np.float64 else np.float32  # the accumulator's
        if lse.dtype != lse_dtype or lse.shape != ref_lse.shape:
            failures.append(f"lse {lse.dtype} {lse.shape}, expected {np.dtype(lse_dtype).name} {ref_lse.shape}")
        else:
            same_inf = np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
            finite = np.isfinite(ref_lse)
            lse_err = np.abs(lse[finite] - ref_lse[finite]).max(initial=0)
            if not same_inf or lse_err > 2e-3 * (1 + np.abs(ref_lse[finite]).max(initial=0)):
                failures.append(f"lse error {lse_err:.3g} (same -inf pattern: {same_inf})")
    return failures


# Explicit configs the sweep (experiments/attention/sweep_attention.py) tries: the register
# decode kernel (one query row per block, K/V straight to registers) and a branch-free MMA
# tile on padded head dims (the zero padding must make the skipped steps harmless).
OVERRIDE_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, tile, splits)
    (1, 239, 128, 128, False, "mha", BF16, DecodeTile(head_dim=128, warps=4, unroll=8), None),
    (1, 5000, 64, 64, True, "gqa", F16, DecodeTile(head_dim=64, warps=4, unroll=8), None),
    (3, 4099, 128, 96, True, "mqa", BF16, DecodeTile(head_dim=128, warps=8, unroll=4), 5),
    (16, 700, 40, 40, False, "gqa", F16, DecodeTile(head_dim=64, warps=2, unroll=8), 3),
    (5, 3, 32, 32, True, "mha", BF16, DecodeTile(head_dim=32, warps=4, unroll=4), None),
    (113, 203, 40, 56, True, "gqa", BF16, FlashMmaTile(head_dim=64, warps=8, m_tiles=1, block_n=64, stages=2,
                                                       min_blocks=1, q_in_regs=True, skip_pad_cols=False), None),
    (256, 517, 111, 104, False, "mha", F16, FlashMmaTile(head_dim=128, warps=8, m_tiles=1, block_n=64, stages=2,
                                                         min_blocks=1, q_in_regs=True, skip_pad_cols=False), None),
    # the long-key default tile without a key split: O staged in shared memory, then stored
    # element-wise (odd Dv) or in 16-byte chunks, on ragged last query tiles (300 = 2 x 128 + 44)
    (300, 700, 128, 111, True, "mha", BF16, FlashMmaTile(head_dim=128, warps=8, m_tiles=1, block_n=128, stages=2,
                                                         min_blocks=1, q_in_regs=True, skip_pad_cols=False), 1),
    (300, 700, 96, 128, False, "gqa", F16, FlashMmaTile(head_dim=128, warps=8, m_tiles=1, block_n=128, stages=2,
                                                        min_blocks=1, q_in_regs=True, skip_pad_cols=False), 1),
]


def override_config(case, q, k, dev):
    """The variant of an OVERRIDE_CASES entry for inputs q, k: a decode tile with the
    planner's (or the forced) key split, an mma tile unsplit (splits 1) or with the
    planner's split (None)."""
    from cufuse.ops.attention.select import split_decode_keys, split_keys

    n_q, n_k, tile, splits = case[0], case[1], case[7], case[8]
    batch = int(np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2])))
    if isinstance(tile, DecodeTile):
        return split_decode_keys(tile, n_q, n_k, batch, dev, splits)
    if splits == 1:
        return tile
    return split_keys(tile, n_q, n_k, batch, dev)


# attention_fwd_wgmma, ordered so that the first failure points at one part of the kernel:
# (1) one full key tile of D64, no masking: S = Q K^T (Q/K descriptors), P as A fragments, V
# N-major, epilogue; (2) several key tiles: the cp.async ring and the S(j) / P V(j-1) pipeline;
# (3) D128: the second 64-column swizzle atom of Q/K and of V; then ragged, causal, empty rows,
# GQA/MQA, padded head dims, lse off, and the other default tiles causal (per-warpgroup ranges
# on the diagonal) and full (1023 rows: idle warpgroups in the last block).
WGMMA_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse)
    (128, 128, 64, 64, False, "mha", BF16, D64_MID, True),
    (128, 512, 64, 64, False, "mha", F16, D64_MID, True),
    (128, 512, 128, 128, False, "mha", BF16, D128_TILE, True),
    (113, 203, 64, 64, True, "gqa", BF16, D64_MID, True),
    (1023, 1024, 128, 128, True, "mha", F16, D128_TILE, True),
    (1024, 1023, 64, 64, False, "mqa", F16, D64_MID, False),
    (1024, 1023, 128, 128, True, "gqa", BF16, D128_TILE, True),
    (239, 1, 128, 128, True, "mha", BF16, D128_TILE, True),  # Nq > Nk: whole blocks and rows see no key
    (1, 239, 64, 64, True, "mha", F16, D64_MID, True),  # one query row
    (300, 700, 40, 56, True, "mqa", BF16, D64_MID, True),  # head dims padded to 64
    (257, 300, 96, 128, False, "mha", F16, D128_TILE, False),  # D padded to 128
    (300, 700, 96, 96, True, "mha", BF16, D96_TILE, True),  # 96 columns: 1.5 swizzle atoms
    (257, 523, 80, 72, False, "gqa", F16, D96_TILE, True),  # padded to 96
    (239, 1, 96, 96, True, "mha", F16, D96_TILE, True),  # Nq > Nk: rows without keys
    (1, 239, 72, 96, False, "mqa", BF16, D96_TILE, False),
    (300, 700, 256, 256, True, "mha", BF16, D256_TILE, True),
    (257, 523, 192, 128, False, "gqa", F16, D256_TILE, True),  # D192 / Dv128 padded to 256
    (1023, 1024, 136, 200, True, "mqa", BF16, D256_TILE, False),
    (239, 1, 256, 256, True, "mha", F16, D256_TILE, True),  # Nq > Nk: rows without keys
    (1, 239, 160, 160, False, "mha", BF16, D256_TILE, True),
    *[(1023, 1024, 64, 64, causal, "gqa", dtype, tile, True)
      for tile, dtype in ((D64_SHORT, F16), (D64_LONG, BF16)) for causal in (True, False)],
]

# Per-thread K/V/Q streams and the fixed-column O store on the default tiles: operands stored
# (B, N, H, D) and viewed (B, H, N, D), so rows are H * D apart (the streams' row steps),
# Nq and Nk off the tile multiples, causal with Nq > Nk (keyless rows) and Nq < Nk, Dv < D,
# lse on and off, poisoned (16-byte aligned) out.
STREAM_CASES = [  # (n_q, n_k, d, dv, causal, dtype, tile, return_lse)
    (300, 257, 64, 64, True, BF16, D64_SHORT, True),
    (257, 700, 64, 48, False, F16, D64_MID, False),
    (333, 1100, 64, 64, True, BF16, D64_LONG, True),
    (300, 257, 128, 128, True, F16, D128_TILE, False),
    (200, 523, 128, 96, True, BF16, D128_TILE, True),
    (1000, 77, 128, 128, False, BF16, D128_TILE, True),
    (300, 257, 256, 256, True, BF16, D256_TILE, True),
    (333, 700, 96, 96, True, F16, D96_TILE, True),
    (200, 523, 96, 80, False, BF16, D96_TILE, False),
    (200, 523, 192, 136, False, F16, D256_TILE, False),
]


def error_map(got, ref, tol):
    """Where |got - ref| > tol, as the pattern of bad rows and columns modulo the kernel's
    tiling: a descriptor or swizzle error shows up in particular 8-row groups or 8-column
    chunks of the 64-wide atoms, a pipeline error in whole key/query tiles."""
    err = np.abs(got.astype(np.float64) - ref).reshape(-1, *ref.shape[-2:]).max(axis=0)
    bad = ~(err <= tol)
    rows, cols = np.nonzero(bad.any(axis=1))[0], np.nonzero(bad.any(axis=0))[0]
    if not rows.size:
        return "no element beyond tolerance"
    return (f"bad rows {rows.size}/{err.shape[0]} (first {rows[:8].tolist()}; per row % 64 // 8: "
            f"{np.bincount(rows % 64 // 8, minlength=8).tolist()}), bad cols {cols.size}/{err.shape[1]} "
            f"(per col % 64 // 8: {np.bincount(cols % 64 // 8, minlength=8).tolist()}), max error {err.max():.3g}")


def check_wgmma(cp, q, k, v, tile, *, causal, return_lse, scale=None):
    """check_against_oracle for a wgmma tile (poisoned out); on failure adds the error map."""
    failures = check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=True, scale=scale,
                                    config=tile)
    if failures:
        got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal, scale=scale,
                                   config=tile))
        ref = reference.attention(q, k, v, causal=causal, scale=scale)
        failures.append(error_map(got, ref, 2e-2))
    return failures


def check_stream_case(cp, rng, case):
    """A STREAM_CASES case; failure messages as check_against_oracle."""
    n_q, n_k, d, dv, causal, dtype, tile, return_lse = case
    q, k, v = (rng.standard_normal((2, 3, n, width)).astype(dtype) for n, width in ((n_q, d), (n_k, d), (n_k, dv)))

    def strided(x):  # the same values, stored (B, N, H, D)
        return cp.asarray(np.ascontiguousarray(np.swapaxes(x, 1, 2))).swapaxes(1, 2)

    return check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=True, config=tile,
                                to_device=strided)


def launched(cp, fn, *args, **kwargs):
    """The kernel names one call launches (cufuse.trace: a warm-up run, then a captured one)."""
    from cufuse.tracing import trace

    result = trace(fn, *args, **kwargs)
    assert not result.uncaptured, str(result)
    return [node.name.split("<")[0].split("::")[-1] for node in result.kernels]
