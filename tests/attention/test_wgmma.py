"""attention, GPU: attention_fwd_wgmma (compute capability 9.0) against the float64 oracle,
through its default rule and through ``config=`` on each of its default tiles."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cufuse import attention, reference
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select

from .oracle import (BF16, D64_MID, D64_SHORT, D96_TILE, D128_TILE, D256_TILE, F16, F32, STREAM_CASES, TMA_TILES,
                     WGMMA_CASES, check_against_oracle, check_stream_case, check_wgmma, error_map, launched,
                     make_inputs, naive_in_dtype, tma_twin)


def _wgmma_id(case):
    n_q, n_k, d, dv, causal, mode, dtype, tile, lse = case
    return (f"{n_q}x{n_k}-d{d}-dv{dv}-{'causal' if causal else 'full'}-{mode}-{dtype.name}-"
            f"hd{tile.head_dim}w{tile.warpgroups}n{tile.block_n}s{tile.stages}b{tile.min_blocks}"
            + ("" if tile.wg_ranges else "-blockranges") + ("-tma" if tile.tma else "")
            + ("-lse" if lse else ""))


def require_wgmma(cp):
    if not current_device_info().has_wgmma:
        pytest.skip("attention_fwd_wgmma needs compute capability 9.0")


# The default rule's wgmma tiles through config=None (48 (batch, head) pairs: enough query
# tiles that the wave model does not split the keys, which would fall back to mma.sync).
DEFAULT_RULE_CASES = [  # (n_q, n_k, d, dv, causal, dtype, tile)
    (300, 300, 64, 64, True, BF16, D64_SHORT),
    (250, 1000, 64, 64, False, F16, TMA_TILES[64]),
    (250, 2000, 64, 64, True, F16, TMA_TILES[64]),
    (300, 300, 128, 128, True, F16, TMA_TILES[128]),
    (257, 700, 128, 96, False, BF16, TMA_TILES[128]),
    (300, 300, 96, 96, True, BF16, TMA_TILES[96]),
    (257, 400, 256, 256, False, F16, TMA_TILES[256]),
]


def kernel_name(tile):
    return "attention_fwd_wgmma_tma" if tile.tma else "attention_fwd_wgmma"


@pytest.mark.parametrize("case", DEFAULT_RULE_CASES,
                         ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-{'causal' if c[4] else 'full'}")
def test_wgmma_default_rule_dispatch(cp, rng, case):
    require_wgmma(cp)
    n_q, n_k, d, dv, causal, dtype, tile = case
    assert select.choose_by_sizes(n_q, n_k, d, dv, 48, dtype, current_device_info(), True, causal, True) == tile
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, "mha", dtype, batch=3, heads=16)
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []
    device = [cp.asarray(x) for x in (q, k, v)]
    assert launched(cp, attention, *device, causal=causal, return_lse=True) == [kernel_name(tile)]


def test_wgmma_default_without_tensor_maps_takes_the_cp_async_tile(cp, rng):
    # heads in reverse (a negative batch stride): no tensor map, the cp.async tile of the same keys
    require_wgmma(cp)
    q, k, v = make_inputs(rng, 250, 2000, 64, 64, "mha", F16, batch=3, heads=16)
    flip = (slice(None), slice(None, None, -1))
    assert check_against_oracle(cp, q, k, v, causal=True, return_lse=True, use_out=True,
                                to_device=lambda x: cp.asarray(x[flip])[flip]) == []
    device = [cp.asarray(x[flip])[flip] for x in (q, k, v)]
    assert launched(cp, attention, *device, causal=True) == ["attention_fwd_wgmma"]


def test_wgmma_uniform_scores_isolate_p_v(cp, rng):
    # scale 1e-6: every probability is ~1/Nk whatever S is, so the output is the mean of V:
    # this passes with a wrong S = Q K^T (or a permuted P fragment) and fails with a wrong V
    # layout, P V descriptor, row sum or store. (In the other tests lse depends on S alone:
    # a right lse with a wrong output points at P / V, a wrong lse at Q / K or the masking.)
    require_wgmma(cp)
    q, k, v = make_inputs(rng, 128, 128, 64, 64, "mha", BF16)
    assert check_wgmma(cp, q, k, v, D64_MID, causal=False, return_lse=True, scale=1e-6) == []


# The same cases on the TMA-fed twin of each tile (attention_fwd_wgmma_tma: the producer
# warpgroup's Q / K / V boxes, the mbarrier ring, skipped tiles released, zero-filled rows past
# Nq / Nk from the 3-D maps).
TMA_CASES = [case[:7] + (tma_twin(case[7]),) + case[8:] for case in WGMMA_CASES]


@pytest.mark.parametrize("case", WGMMA_CASES + TMA_CASES, ids=_wgmma_id)
def test_wgmma_matches_oracle(cp, rng, case):
    require_wgmma(cp)
    n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
    assert check_wgmma(cp, q, k, v, tile, causal=causal, return_lse=return_lse) == []


@pytest.mark.parametrize("tile", [D64_MID, D96_TILE, D128_TILE, D256_TILE], ids=["hd64", "hd96", "hd128", "hd256"])
def test_wgmma_strided_views_and_misaligned_out(cp, rng, tile):
    # (B, N, H, D) storage viewed as (B, H, N, D): rows H * D apart; out 2 bytes off 16-byte
    # alignment takes the element-wise store; causal with Nq > Nk: rows without keys are 0
    require_wgmma(cp)
    d = tile.head_dim
    q_store = rng.standard_normal((2, 300, 3, d)).astype(F16)
    k_store, v_store = (rng.standard_normal((2, 257, 3, d)).astype(F16) for _ in range(2))
    views = [np.swapaxes(x, 1, 2) for x in (q_store, k_store, v_store)]
    ref, ref_lse = reference.attention(*views, causal=True, return_lse=True)
    out = cp.full(math.prod(ref.shape) + 1, np.nan, dtype=F16)[1:].reshape(ref.shape)
    got, lse = attention(*(cp.asarray(x).swapaxes(1, 2) for x in (q_store, k_store, v_store)), causal=True,
                         return_lse=True, out=out, config=tile)
    assert got is out
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse)
    assert (got[..., :43, :] == 0).all() and np.isneginf(lse[..., :43]).all()
    naive_err = np.abs(naive_in_dtype(*views, True, 1 / math.sqrt(d), F16) - ref).max()
    assert np.abs(got - ref).max() <= 2 * naive_err + 1e-3, error_map(got, ref, 2 * naive_err + 1e-3)
    assert np.abs(lse[..., 43:] - ref_lse[..., 43:]).max() <= 2e-3 * (1 + np.abs(ref_lse[..., 43:]).max())


# and on the TMA twins: rows H * D apart, the batch unit D elements (overlapping map dims)
@pytest.mark.parametrize("case", STREAM_CASES + [case[:6] + (tma_twin(case[6]),) + case[7:] for case in STREAM_CASES],
                         ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-dv{c[3]}-{'causal' if c[4] else 'full'}-"
                                       f"w{c[6].warpgroups}n{c[6].block_n}" + ("-tma" if c[6].tma else ""))
def test_wgmma_default_tiles_on_strided_rows(cp, rng, case):
    require_wgmma(cp)
    assert check_stream_case(cp, rng, case) == []


def test_wgmma_nan_key_reaches_only_rows_that_see_it(cp, rng):
    require_wgmma(cp)
    q, k, v = make_inputs(rng, 200, 200, 64, 64, "mha", BF16, heads=1)
    k[..., 70, 5] = np.nan  # causal, Nq = Nk: rows >= 70 see key 70
    got = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, config=D64_MID)
    got = cp.asnumpy(got).astype(np.float64)
    assert np.isnan(got[..., 70:, :]).all() and np.isfinite(got[..., :70, :]).all()


def test_wgmma_config_preconditions(cp, rng):
    # the checks themselves are CPU tests (test_select.py); here they hold on real arrays
    require_wgmma(cp)
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 128, 128, 64, 64, "mha", BF16))
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        attention(q, k, v, scale=-0.125, config=D64_MID)
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        attention(q[..., ::2], k[..., ::2], v, config=D64_MID)  # D 32 but columns 2 elements apart
    with pytest.raises(ValueError, match="attention: argument 'config' asks for the wgmma kernel, which takes"):
        attention(q.astype(F32), k.astype(F32), v.astype(F32), config=D64_MID)


def test_wgmma_tma_launches_one_kernel_and_nan_stays_in_its_rows(cp, rng):
    require_wgmma(cp)
    tile = TMA_TILES[64]
    q, k, v = make_inputs(rng, 200, 200, 64, 64, "mha", BF16, heads=1)
    k[..., 70, 5] = np.nan  # causal, Nq = Nk: rows >= 70 see key 70
    device = [cp.asarray(x) for x in (q, k, v)]
    got = cp.asnumpy(attention(*device, causal=True, config=tile)).astype(np.float64)
    assert np.isnan(got[..., 70:, :]).all() and np.isfinite(got[..., :70, :]).all()
    assert launched(cp, attention, *device, causal=True, config=tile) == ["attention_fwd_wgmma_tma"]
