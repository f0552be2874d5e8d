"""Ragged prefill: attention_varlen over 32 to 256 sequences of 64 to 16K tokens (log-uniform,
fixed seed), beside cufuse's dense attention on B equal sequences of the same total FLOPs and
FA4's flash_attn_varlen_func on the same packed arrays (where importable)."""
from __future__ import annotations

import math

import numpy as np

import cufuse

from ... import traffic
from .common import Case, Impl, random_values, resolve_dtype
from .peers import fa4_varlen_attention

RAGGED_CLASS = "ragged prefill"
RAGGED_SEQUENCES = (32, 64, 128, 256)
RAGGED_LENGTHS = (64, 16384)  # the draw's range, log-uniform
RAGGED_SEED = 2026  # plus B: each batch size its own fixed lengths
RAGGED_HEADS = 8  # query and KV heads (256 sequences: ~0.75 M tokens, 1.5 GB a bf16 D128 operand)
RAGGED_HEAD_DIMS = (64, 128)


def ragged_lengths(batch: int) -> tuple:
    """The fixed lengths of a ``batch``-sequence case, log-uniform over RAGGED_LENGTHS."""
    rng = np.random.default_rng(RAGGED_SEED + batch)
    low, high = (math.log(n) for n in RAGGED_LENGTHS)
    return tuple(int(n) for n in np.exp(rng.uniform(low, high, size=batch)).round())


def dense_length(lengths) -> int:
    """N of len(lengths) equal sequences whose attention FLOPs (sum of N^2) match the ragged batch's
    (sum of L^2) to within 2 / N: sqrt(mean L^2), rounded."""
    return round(math.sqrt(sum(n * n for n in lengths) / len(lengths)))


def ragged_case(batch: int, head_dim: int, causal: bool, dtype: str = "bfloat16") -> Case:
    """attention_varlen of ``ragged_lengths(batch)`` queries against as many keys per sequence
    (q, k, v packed (T, H, D), H query and KV heads); the traffic and FLOPs are the sum of the
    sequences' own. "cufuse dense" runs attention on (B, H, N, D) with N = dense_length: its rate
    is the ragged FLOPs over its time, off by the FLOP mismatch (under 0.1 % from N ~ 2000)."""
    lengths = ragged_lengths(batch)
    tokens = sum(lengths)
    n = dense_length(lengths)
    packed = (tokens, RAGGED_HEADS, head_dim)
    dense = (batch, RAGGED_HEADS, n, head_dim)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)

    def make_inputs(xp, rng):
        q, k, v = (random_values(rng, packed, dtype) for _ in range(3))
        q_dense, k_dense, v_dense = (random_values(rng, dense, dtype) for _ in range(3))
        cu = xp.asarray(offsets)
        return (q, k, v, cu, q_dense, k_dense, v_dense, xp.empty(dense, dtype=resolve_dtype(dtype)),
                xp.empty(packed, dtype=resolve_dtype(dtype)))

    def ragged(q, k, v, cu, qd, kd, vd, out_dense, out):
        return cufuse.attention_varlen(q, k, v, cu, cu, causal=causal, out=out)

    def dense_call(q, k, v, cu, qd, kd, vd, out_dense, out):
        return cufuse.attention(qd, kd, vd, causal=causal, out=out_dense)

    per_sequence = [traffic.attention((RAGGED_HEADS, L, head_dim), (RAGGED_HEADS, L, head_dim),
                                      (RAGGED_HEADS, L, head_dim), resolve_dtype(dtype), causal=causal)
                    for L in lengths]
    return Case(
        op="attention_varlen",
        label=f"B{batch} H{RAGGED_HEADS} L{min(lengths)}-{max(lengths)} T{tokens} D{head_dim} "
              f"{'causal' if causal else 'full'} (dense N{n})",
        dtype=dtype,
        traffic=traffic.Traffic(flops=sum(t.flops for t in per_sequence),
                                min_bytes=sum(t.min_bytes for t in per_sequence),
                                unfused_bytes=sum(t.unfused_bytes for t in per_sequence)),
        metric="TFLOP/s",
        make_inputs=make_inputs,
        impls=(Impl("cufuse", ragged), Impl("cufuse dense", dense_call, peer=False),
               fa4_varlen_attention(dtype, max(lengths), causal=causal)),
        klass=f"{RAGGED_CLASS} D{head_dim} {'causal' if causal else 'full'}",
    )


def attention_varlen_cases(quick: bool = False) -> list:
    if quick:
        return [ragged_case(32, 128, True)]
    return [ragged_case(batch, head_dim, causal) for head_dim in RAGGED_HEAD_DIMS for causal in (False, True)
            for batch in RAGGED_SEQUENCES]
