"""attention, GPU: grouped-query decode on packed rows (the G query heads x Nq queries of one
KV head in the rows of one tile, select.decode_tile) against the float64 oracle: G 1..16,
Nq 1..16 (causal, also Nq > Nk: rows without a key), head dims 64 / 128 / 256 and odd ones,
the 5-D broadcast and the 4-D ``enable_gqa`` layouts, q stored (B, Nq, Hq, D), key splits,
lse, poisoned out."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse import attention
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select

from .oracle import BF16, F16, check_against_oracle, launched

GROUPS = (1, 2, 3, 4, 8, 16)
QUERIES = (1, 2, 3, 4, 5, 8, 16)
HEAD_DIMS = (64, 128, 256, 40, 111, 200)
KEYS = (1, 3, 5, 100, 1000, 5000)


def gqa_cases():
    """A covering design: every G, Nq, head dim, key count, layout, dtype, causal and lse
    value, and q stored heads-inner ((B, Nq, Hq, D) viewed (B, Hq, Nq, D)) on a third."""
    cases = []
    for i in range(30):
        cases.append(dict(group=GROUPS[i % 6], n_q=QUERIES[(3 * i) % 7], d=HEAD_DIMS[(5 * i + 1) % 6],
                          n_k=KEYS[(7 * i) % 6], causal=bool(i % 2), layout=("5d", "4d")[(i // 2) % 2],
                          dtype=(F16, BF16)[(i // 3) % 2], return_lse=i % 4 != 1, use_out=i % 3 != 2,
                          heads_inner=i % 3 == 0))
    # Nq > Nk causal: rows that see no key are 0 with lse -inf
    cases.append(dict(group=4, n_q=16, d=128, n_k=3, causal=True, layout="4d", dtype=BF16, return_lse=True,
                      use_out=True, heads_inner=True))
    cases.append(dict(group=16, n_q=8, d=64, n_k=5, causal=True, layout="5d", dtype=F16, return_lse=True,
                      use_out=True, heads_inner=False))
    return cases


def _case_id(c):
    return (f"g{c['group']}-q{c['n_q']}-k{c['n_k']}-d{c['d']}-{c['layout']}-{c['dtype'].name}"
            + ("-causal" if c["causal"] else "") + ("-inner" if c["heads_inner"] else ""))


def test_covering_design_covers_every_value():
    cases = gqa_cases()
    for key, values in (("group", GROUPS), ("n_q", QUERIES), ("d", HEAD_DIMS), ("n_k", KEYS)):
        assert {c[key] for c in cases} == set(values)
    for key in ("causal", "return_lse", "use_out", "heads_inner"):
        assert {c[key] for c in cases} == {False, True}
    assert {c["layout"] for c in cases} == {"5d", "4d"} and {c["dtype"] for c in cases} == {F16, BF16}


def gqa_inputs(rng, batch, heads_kv, group, n_q, n_k, d, dtype):
    """q (B, Hkv, G, Nq, D), k / v (B, Hkv, 1, Nk, D) as NumPy arrays."""
    q = rng.standard_normal((batch, heads_kv, group, n_q, d)).astype(dtype)
    k = rng.standard_normal((batch, heads_kv, 1, n_k, d)).astype(dtype)
    v = rng.standard_normal((batch, heads_kv, 1, n_k, d)).astype(dtype)
    return q, k, v


def device_views(cp, heads_inner):
    """to_device of check_against_oracle: q copied as is or stored (B, Nq, Hkv, G, D)."""
    def to_device(x):
        if heads_inner and x.shape[-3] > 1:  # q: heads inner in memory, then the logical view
            return cp.ascontiguousarray(cp.asarray(x).transpose(0, 3, 1, 2, 4)).transpose(0, 2, 3, 1, 4)
        return cp.asarray(x)
    return to_device


@pytest.mark.parametrize("case", gqa_cases(), ids=_case_id)
def test_packed_decode_matches_oracle(cp, rng, case):
    c = case
    q, k, v = gqa_inputs(rng, 2, 2, c["group"], c["n_q"], c["n_k"], c["d"], c["dtype"])
    failures = check_against_oracle(cp, q, k, v, causal=c["causal"], return_lse=c["return_lse"], use_out=c["use_out"],
                                    to_device=device_views(cp, c["heads_inner"]), enable_gqa=c["layout"] == "4d")
    assert failures == []


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_packed_decode_key_split(cp, rng, dtype):
    # One KV head, many keys: the decode split fills the device, then attention_merge.
    for group, n_q, n_k, d, causal in ((8, 1, 20000, 128, False), (4, 4, 9000, 64, True), (16, 2, 6000, 256, True)):
        config = select.choose_by_sizes(n_q, n_k, d, d, group, dtype, current_device_info(), True, causal, True, group)
        assert config.key_warps and config.splits > 1
        q, k, v = gqa_inputs(rng, 1, 1, group, n_q, n_k, d, dtype)
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=False, config=config) == []


def test_packed_decode_launches_and_mqa(cp, rng):
    q, k, v = (cp.asarray(x) for x in gqa_inputs(rng, 2, 2, 8, 1, 8192, 128, BF16))
    assert launched(cp, attention, q, k, v) == ["attention_fwd_mma", "attention_merge"]
    # MQA (B, H, Nq, D) over (B, 1, Nk, D): the H heads are one group
    q = rng.standard_normal((2, 6, 3, 64)).astype(BF16)
    k, v = (rng.standard_normal((2, 1, 700, 64)).astype(BF16) for _ in range(2))
    assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True) == []


@pytest.mark.parametrize("group", [1, 8])
def test_merge_of_hundreds_of_splits(cp, rng, group):
    # 625 splits of one 64-key stage each (32 merge warps of 19-20 splits: the unrolled loop's
    # remainder); causal with 16 queries, so the last split (4 keys) is wholly masked for
    # queries 0..11: partials with lse -inf must weigh nothing.
    n_q, n_k, d = 16, 39940, 128
    dev = current_device_info()
    base = select.decode_tile(d, group * n_q, dev)
    config = dataclasses.replace(base, splits=625, keys_per_split=base.stage_keys)
    q, k, v = gqa_inputs(rng, 1, 1, group, n_q, n_k, d, BF16)
    assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True, config=config) == []


# Packed rows from a warpgroup's 64 on (select.WGMMA_PACKED_MIN_ROWS): the TMA wgmma tile with
# the G x Nq rows of one KV head, keys split by the wave model (attention_merge), on compute
# capability 9.0; the mma tile elsewhere. (group, Nq, Nk, D, causal): every head-dim bucket,
# rows 64 to 256, key counts that are not tile multiples.
PACKED_WGMMA = ((16, 8, 4096, 128, False), (16, 8, 3001, 128, True), (8, 8, 20000, 64, True),
                (16, 4, 5000, 256, False), (4, 16, 777, 96, True), (16, 16, 1500, 128, True))


@pytest.mark.parametrize("group,n_q,n_k,d,causal", PACKED_WGMMA)
def test_packed_rows_on_the_tma_tile_match_oracle(cp, rng, group, n_q, n_k, d, causal):
    dev = current_device_info()
    config = select.choose_by_sizes(n_q, n_k, d, d, 2 * group, BF16, dev, True, causal, True, group,
                                    packed_tma=True)
    q, k, v = gqa_inputs(rng, 2, 1, group, n_q, n_k, d, BF16)
    if dev.has_wgmma:
        assert config.packed and config.tma
        assert launched(cp, attention, *(cp.asarray(x) for x in (q, k, v)), causal=causal)[0] == "attention_fwd_wgmma_tma"
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=False, use_out=False,
                                enable_gqa=True) == []


def test_packed_rows_on_the_tma_tile_with_masks_sinks_and_forced_splits(cp, rng):
    dev = current_device_info()
    if not dev.has_wgmma:
        pytest.skip("the TMA wgmma tile needs compute capability 9.0")
    group, n_q, n_k, d = 16, 8, 6000, 128
    q, k, v = gqa_inputs(rng, 1, 2, group, n_q, n_k, d, F16)
    sinks = rng.standard_normal(2 * group).astype(np.float32)
    base = select.choose_by_sizes(n_q, n_k, d, d, 2 * group, F16, dev, True, True, True, group, packed_tma=True)
    for splits in (1, 3, 47):  # one split (out directly), a few, one 128-key tile each (the last one short)
        keys = -(-(-(-n_k // splits)) // base.block_n) * base.block_n
        config = dataclasses.replace(base, splits=splits, keys_per_split=keys if splits > 1 else 0)
        assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True, config=config) == []
    for window, softcap in (((1000, 0), None), ((300, 2), 30.0), (None, 15.0)):
        assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True, window=window,
                                    softcap=softcap, sinks=sinks) == []
