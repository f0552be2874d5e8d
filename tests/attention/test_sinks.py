"""attention with ``sinks``, GPU: every kernel family folds the sink into its epilogue (split 0
of a key split only), against the float64 oracle (FlashAttention's rule, oracle.py): the default
selection and forced configs of attention_fwd_simt (float32 / float64), attention_fwd_mma
(prefill, key split, packed grouped-query decode), attention_decode (unsplit and split),
attention_fwd_wgmma and attention_fwd_wgmma_tma; rows that see no key (out 0, lse the sink),
the enable_gqa layout, no key at all, and a capture into a CUDA graph."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse import attention
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select
from cufuse.ops.attention.decode import DecodeTile
from cufuse.ops.attention.mma import FlashMmaTile
from cufuse.ops.attention.simt import SimtRows

from .oracle import BF16, D64_MID, D128_TILE, F16, F32, TMA_TILES, check_against_oracle, launched, make_inputs

F64 = np.dtype(np.float64)


def sinks_for(rng, q, scale=2.0):
    """One float32 logit per batch item of q (its leading dims), spread so that some rows are
    dominated by the sink and some barely see it."""
    return (scale * rng.standard_normal(int(np.prod(q.shape[:-2])))).astype(np.float32)


# (n_q, n_k, d, dv, causal, mode, dtype, window, softcap): the default selection reaches
# the simt rows (f32 / f64), the decode stream (Nq <= 4), the packed decode tile (gqa), the
# mma prefill and, on compute capability 9.0, the TMA wgmma prefill.
DEFAULT_CASES = [
    (113, 203, 40, 40, True, "mha", F32, None, None),
    (37, 5, 24, 16, True, "gqa", F64, None, 5.0),  # Nq > Nk: rows without keys
    (1, 4000, 128, 128, False, "mha", BF16, None, None),  # decode stream, split
    (3, 700, 64, 64, True, "mqa", F16, (100, None), None),
    (2, 3000, 128, 128, True, "gqa", BF16, None, None),  # packed decode, split
    (8, 5, 64, 64, True, "gqa", F16, None, None),  # packed, Nq > Nk
    (300, 700, 64, 64, True, "mha", F16, None, None),
    (239, 7, 128, 128, True, "mha", BF16, None, 30.0),  # Nq > Nk: whole blocks without keys
    (256, 512, 96, 80, False, "gqa", F16, (50, 20), None),
]


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-{c[5]}-{c[6].name}")
def test_default_selection_matches_oracle(cp, rng, case):
    n_q, n_k, d, dv, causal, mode, dtype, window, softcap = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, batch=2)
    sinks = sinks_for(rng, q)
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True, window=window,
                                softcap=softcap, sinks=sinks) == []


def test_enable_gqa_heads(cp, rng):
    # enable_gqa: q (B, Hq, N, D) takes sinks (Hq,); the grouped runs see the same heads
    for n_q, n_k in ((1, 2000), (4, 9), (200, 300)):
        q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "gqa", BF16, heads=2, group=4)
        sinks = sinks_for(rng, q)
        assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=False, enable_gqa=True,
                                    sinks=sinks) == []


def test_fewer_sinks_than_items(cp, rng):
    # H divides the items: item b takes sinks[b % H] (here H = the heads of (B, H) items)
    q, k, v = make_inputs(rng, 64, 300, 64, 64, "mha", F16, batch=3, heads=4)
    sinks = (2 * rng.standard_normal(4)).astype(np.float32)
    assert check_against_oracle(cp, q, k, v, causal=False, return_lse=True, use_out=True, sinks=sinks) == []


def forced_configs():
    """(name, config) of every family but wgmma, key splits forced (every split covers 128 keys:
    450 keys take 4 splits, 2 keys only split 0)."""
    mma = FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2)
    return [
        ("simt", SimtRows(warps=2)),
        ("mma", mma),
        ("mma-split", dataclasses.replace(mma, splits=4, keys_per_split=128)),
        ("decode", DecodeTile(head_dim=64, warps=4, unroll=4)),
        ("decode-split", DecodeTile(head_dim=64, warps=4, unroll=4, splits=4, keys_per_split=128)),
    ]


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_forced_families_and_splits(cp, rng, dtype):
    for name, config in forced_configs():
        n_q = 3 if name.startswith("decode") else 40
        case_dtype = F32 if name == "simt" else dtype
        for causal, n_k in ((False, 450), (True, 2)):  # (True, 2): rows without keys, in split 0 only
            q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", case_dtype)
            sinks = sinks_for(rng, q)
            failures = check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True,
                                            config=config, sinks=sinks)
            assert failures == [], (name, causal, failures)


def test_packed_decode_forced_split(cp, rng):
    dev = current_device_info()
    group, n_q, n_k = 8, 2, 6000
    base = select.decode_tile(64, group * n_q, dev)
    assert base.key_warps
    keys_per_split = -(-n_k // (5 * base.stage_keys)) * base.stage_keys  # 5 splits cover the keys
    config = dataclasses.replace(base, splits=5, keys_per_split=keys_per_split)
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "gqa", BF16, batch=1, heads=2, group=group)
    sinks = sinks_for(rng, q)
    assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True, config=config,
                                sinks=sinks) == []
    q, k, v = make_inputs(rng, 16, 5, 64, 64, "gqa", F16, batch=1, heads=2, group=group)  # keyless rows
    assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True, config=base,
                                sinks=sinks_for(rng, q)) == []


@pytest.mark.parametrize("tile", [D64_MID, D128_TILE, TMA_TILES[64], TMA_TILES[128]],
                         ids=["cp-async-64", "cp-async-128", "tma-64", "tma-128"])
def test_wgmma_feeds(cp, rng, tile):
    if not current_device_info().has_wgmma:
        pytest.skip("the wgmma kernels need compute capability 9.0")
    for n_q, n_k, causal, softcap in ((300, 700, True, None), (239, 3, True, None), (257, 523, False, 20.0)):
        q, k, v = make_inputs(rng, n_q, n_k, tile.head_dim, tile.head_dim, "mha", BF16)
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True, config=tile,
                                    softcap=softcap, sinks=sinks_for(rng, q)) == []


def test_keyless_rows_are_zero_with_the_sink_as_lse(cp, rng):
    # Nq > Nk causal: the first Nq - Nk rows see no key: out exactly 0, lse the sink
    for dtype in (F16, F32):
        q, k, v = (cp.asarray(x) for x in make_inputs(rng, 20, 4, 64, 64, "mha", dtype))
        v[...] = np.nan  # never read by a keyless row
        sinks = cp.asarray(np.float32([0.5, -3.0]))
        out, lse = attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
        assert cp.all(out[..., :16, :] == 0)
        # (sink log2 e + log2 1) ln 2 in the 16-bit kernels: the sink within float32 rounding
        expected = cp.broadcast_to(sinks.astype(lse.dtype)[None, :, None], lse[..., :16].shape)
        assert cp.allclose(lse[..., :16], expected, rtol=1e-6, atol=0)


def test_no_keys_at_all(cp):
    q = cp.ones((2, 3, 5, 8), dtype=cp.float16)
    k = cp.ones((2, 3, 0, 8), dtype=cp.float16)
    sinks = cp.asarray(np.float32([1.0, 2.0, 3.0]))
    out, lse = attention(q, k, k, sinks=sinks, return_lse=True)
    assert cp.all(out == 0) and cp.all(lse == sinks[None, :, None])


def test_no_sinks_same_bits(cp, rng):
    # a sink of -inf adds nothing: the same bits as without sinks (the fold is a no-op there)
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 100, 300, 64, 64, "mha", BF16))
    plain, plain_lse = attention(q, k, v, causal=True, return_lse=True)
    out, lse = attention(q, k, v, causal=True, return_lse=True, sinks=cp.full(2, -np.inf, dtype=cp.float32))
    assert cp.array_equal(out, plain) and cp.allclose(lse, plain_lse, rtol=1e-6)


def test_prepared_call_and_graph_capture(cp, rng):
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 1, 3000, 128, 128, "mha", BF16))
    sinks = cp.asarray(np.float32([1.0, -1.0]))
    first = attention(q, k, v, sinks=sinks)
    assert cp.array_equal(attention(q, k, v, sinks=sinks), first)  # the prepared call
    assert not cp.array_equal(attention(q, k, v), first)  # not the prepared call without sinks
    assert launched(cp, attention, q, k, v, sinks=sinks) == ["attention_decode", "attention_merge"]
