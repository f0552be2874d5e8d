"""attention, GPU: every kernel family against the float64 oracle on shapes that hit every
dispatch branch (FlashAttention's error rule, see oracle.py), forced configs, NaN and
empty-row patterns, strided views, launch counts and allocations. attention_fwd_wgmma's own
cases are in test_wgmma.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cufuse import attention, reference
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select
from cufuse.ops.attention.decode import DecodeTile

from ..conftest import allocations, poisoned
from .oracle import (BF16, F16, F32, OVERRIDE_CASES, check_against_oracle, launched, make_inputs, naive_in_dtype,
                     override_config)

SHAPES = [(1, 1), (1, 239), (113, 203), (128, 217), (108, 256), (256, 512), (512, 256), (1023, 1024),
          (1024, 1023), (239, 1), (799, 3), (2048, 2048)]
HEAD_DIMS = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
MODES = ("mha", "mqa", "gqa")


def covering_cases():
    """A covering design over the factors (not the cross product): every (Nq, Nk), head dim,
    Dv != D, causal, mode, dtype and return_lse value appears; f32 on a subset."""
    cases = []
    for i in range(24):
        n_q, n_k = SHAPES[i % len(SHAPES)]
        d = HEAD_DIMS[(7 * i) % len(HEAD_DIMS)]
        dv = d if i % 4 else HEAD_DIMS[(7 * i + 5) % len(HEAD_DIMS)]
        causal = bool((i // 2) % 2) if i < 12 else bool(i % 2)
        mode = MODES[i % 3]
        dtype = (F16, BF16)[(i // 3) % 2]
        return_lse = bool((i // 4) % 2) or i % 5 == 0
        use_out = i % 3 == 1
        cases.append((n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out))
    cases += [
        (113, 203, 40, 40, True, "gqa", F32, True, True),
        (1, 239, 128, 64, False, "mqa", F32, True, False),
        (256, 512, 256, 256, True, "mha", F32, False, False),
    ]
    return cases


def _case_id(case):
    n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
    return f"{n_q}x{n_k}-d{d}-dv{dv}-{'causal' if causal else 'full'}-{mode}-{dtype.name}" + (
        "-lse" if return_lse else "") + ("-out" if use_out else "")


def test_covering_design_covers_every_value():
    cases = covering_cases()
    assert {(c[0], c[1]) for c in cases} == set(SHAPES)
    assert set(HEAD_DIMS) <= {c[2] for c in cases}
    assert any(c[2] != c[3] for c in cases)
    assert {c[4] for c in cases} == {False, True} and {c[7] for c in cases} == {False, True}
    assert {c[5] for c in cases} == set(MODES)
    assert {c[6] for c in cases} == {F16, BF16, F32}
    for dtype in (F16, BF16):  # both 16-bit dtypes meet both masks and every mode
        assert {c[4] for c in cases if c[6] == dtype} == {False, True}
        assert {c[5] for c in cases if c[6] == dtype} == set(MODES)


@pytest.mark.parametrize("case", covering_cases(), ids=_case_id)
def test_matches_oracle(cp, rng, case):
    n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
    big = n_q * n_k >= 1 << 20
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1 if big else 2)
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=use_out) == []


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_split_keys_prefill_and_decode(cp, rng, dtype):
    # One (batch, head) with many keys: the wave model splits them; then merge.
    for n_q, n_k, causal in ((200, 3000, True), (16, 5000, False), (3, 4099, True)):
        config = select.choose_by_sizes(n_q, n_k, 64, 64, 1, dtype, current_device_info(), True)
        assert config.splits > 1
        q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", dtype, heads=1)
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []


@pytest.mark.parametrize("case", OVERRIDE_CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-{type(c[7]).__name__}")
def test_config_override_variants(cp, rng, case):
    n_q, n_k, d, dv, causal, mode, dtype, tile, splits = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
    config = override_config(case, q, k, current_device_info())
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True, config=config) == []


def test_decode_tile_nan_key_and_unaligned_rows(cp, rng):
    # causal, Nq = 4, Nk = 3000: row i sees key j iff j <= i + 2996
    q, k, v = make_inputs(rng, 4, 3000, 64, 64, "mha", BF16, heads=1)
    config = select.split_decode_keys(DecodeTile(head_dim=64, warps=4, unroll=8), 4, 3000, 1, current_device_info(), 3)
    for bad, first_seeing in ((100, 0), (2998, 2)):
        k_bad = k.copy()
        k_bad[..., bad, 5] = np.nan
        got = attention(cp.asarray(q), cp.asarray(k_bad), cp.asarray(v), causal=True, config=config)
        got = cp.asnumpy(got).astype(np.float32)
        assert np.isfinite(got[..., :first_seeing, :]).all() and np.isnan(got[..., first_seeing:, :]).all()
    # k rows not 16-byte aligned: the decode tile refuses instead of misreading
    wide = cp.asarray(rng.standard_normal((1, 3000, 65)).astype(BF16))
    with pytest.raises(ValueError, match="attention: argument 'config' expected k and v with 16-byte"):
        attention(cp.asarray(q[0]), wide[:, :, 1:], wide[:, :, 1:], config=config)
    with pytest.raises(TypeError, match="attention: argument 'config' expected None or one of"):
        attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), config="decode")


def test_strided_views_and_scalar_path(cp, rng):
    # (B, N, H, D) storage viewed as (B, H, N, D): strided rows, no copy, 16-byte loads.
    stores = [rng.standard_normal((2, n, 3, dd)).astype(F16) for n, dd in ((300, 64), (257, 64), (257, 48))]
    views = [np.swapaxes(x, 1, 2) for x in stores]
    ref = reference.attention(*views, causal=True)
    # out 2 bytes off 16-byte alignment (Dv 48): the epilogue's element-wise store path
    out = cp.full(math.prod(ref.shape) + 1, np.nan, dtype=F16)[1:].reshape(ref.shape)
    got = attention(*(cp.asarray(x).swapaxes(1, 2) for x in stores), causal=True, out=out)
    assert got is out
    naive_err = np.abs(naive_in_dtype(*views, True, 1 / 8, F16) - ref).max()
    assert np.abs(cp.asnumpy(got).astype(np.float64) - ref).max() <= 2 * naive_err + 1e-3
    # a non-unit last-axis stride, a misaligned base and an odd Dv take the scalar-load path
    wide = cp.asarray(rng.standard_normal((2, 130, 64)).astype(BF16))
    views = wide[:, :, ::2], wide[:, 1:, 1:33], wide[:, 1:, 33:]
    host = [cp.asnumpy(x) for x in views]
    ref = reference.attention(*host, scale=0.3)
    got = attention(*views, scale=0.3)
    naive_err = np.abs(naive_in_dtype(*host, False, 0.3, BF16) - ref).max()
    assert np.abs(cp.asnumpy(got).astype(np.float64) - ref).max() <= 2 * naive_err + 1e-2


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_causal_rows_without_keys_are_exactly_zero(cp, rng, dtype):
    n_q, n_k = 300, 100  # query i sees key j iff j <= i - 200: rows 0..199 see nothing
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", dtype)
    out = poisoned(cp, (1, 2, n_q, 64), dtype)
    got, lse = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, return_lse=True, out=out)
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse)
    assert (got[..., :200, :] == 0).all() and np.isneginf(lse[..., :200]).all()
    assert np.isfinite(got[..., 200:, :]).all() and np.isfinite(lse[..., 200:]).all()
    # decode-shaped: Nq = 8 > Nk = 3, split path not needed
    q, k, v = make_inputs(rng, 8, 3, 32, 32, "mha", dtype)
    got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True)).astype(np.float64)
    assert (got[..., :5, :] == 0).all() and np.isfinite(got).all()


@pytest.mark.parametrize("n_q,n_k", [(200, 200), (4, 4096)])
def test_nan_key_reaches_only_rows_that_see_it(cp, rng, n_q, n_k):
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", BF16, heads=1)
    bad = n_k - 2 if n_q < 16 else 70  # causal: rows i >= bad - (n_k - n_q) see it
    k[..., bad, 5] = np.nan
    got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True)).astype(np.float64)
    first_seeing = bad - (n_k - n_q)
    assert np.isnan(got[..., first_seeing:, :]).all()
    assert np.isfinite(got[..., :first_seeing, :]).all()
    ref = reference.attention(q, k, v, causal=True)[..., :first_seeing, :]
    naive_err = np.abs(naive_in_dtype(q, k, v, True, 1 / 8, BF16)[..., :first_seeing, :] - ref).max(initial=0)
    assert np.abs(got[..., :first_seeing, :] - ref).max(initial=0) <= 2 * naive_err + 1e-2


def test_float64_simt_path(cp, rng):
    q, k, v = make_inputs(rng, 37, 71, 24, 40, "gqa", np.dtype(np.float64))
    got, lse = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, return_lse=True)
    ref, ref_lse = reference.attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=1e-10, atol=1e-12)
    assert lse.dtype == np.float64  # float64 inputs: lse in the accumulator's float64
    np.testing.assert_allclose(cp.asnumpy(lse), ref_lse, rtol=1e-12, atol=1e-12)


def test_launch_counts(cp, rng):
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 1, 8192, 128, 128, "mha", BF16, batch=2, heads=2))
    # 4 (batch, head) pairs: split-KV decode
    assert launched(cp, attention, q, k, v) == ["attention_decode", "attention_merge"]
    # k rows not 16-byte aligned: the MMA decode tile
    assert launched(cp, attention, q[..., :127], k[..., :127], v) == ["attention_fwd_mma", "attention_merge"]
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 1024, 1024, 128, 128, "mha", BF16, batch=4, heads=16))
    # prefill: the wgmma kernel on compute capability 9.0
    wgmma = current_device_info().has_wgmma
    assert launched(cp, attention, q, k, v, causal=True) == ["attention_fwd_wgmma" if wgmma else "attention_fwd_mma"]
    # a negative scale keeps the mma.sync kernel
    assert launched(cp, attention, q, k, v, scale=-0.1) == ["attention_fwd_mma"]


def test_memory_is_linear_in_sequence_length(cp, rng):
    n, d = 16384, 64
    q, k, v = (cp.asarray(rng.standard_normal((1, 1, n, d)).astype(F16)) for _ in range(3))
    (out, lse), requested = allocations(cp, lambda: attention(q, k, v, causal=True, return_lse=True))
    cp.cuda.get_current_stream().synchronize()
    # out + lse + the split workspace (splits * N * (Dv + 1) float32): O(N);
    # one score matrix alone would be N^2 * 2 bytes = 512 MiB.
    bound = out.nbytes + lse.nbytes + 16 * n * (d + 1) * 4  # the wave model picks <= 16 splits here
    assert sum(requested) <= bound < n * n * 2 // 4
    assert np.isfinite(cp.asnumpy(out[0, 0, ::512]).astype(np.float32)).all()


def test_q_beyond_2_pow_31_elements(cp, rng):
    d, n_k = 128, 64
    n_q = (1 << 31) // d + 300  # q has more than 2^31 elements
    q = cp.zeros((1, n_q, d), dtype=BF16)
    head = rng.standard_normal((64, d)).astype(BF16)
    tail = rng.standard_normal((300, d)).astype(BF16)
    q[0, :64] = cp.asarray(head)
    q[0, -300:] = cp.asarray(tail)
    k, v = (rng.standard_normal((1, n_k, d)).astype(BF16) for _ in range(2))
    got = attention(q, cp.asarray(k), cp.asarray(v), causal=True)
    for rows, sl in ((head, slice(0, 64)), (tail, slice(n_q - 300, n_q))):
        # bottom-right causal: query i sees keys j <= i + n_k - n_q (none for the head rows)
        offset = sl.start + n_k - n_q
        visible = np.arange(n_k)[None, :] <= np.arange(len(rows))[:, None] + offset
        scores = rows.astype(np.float64) @ k[0].astype(np.float64).T / math.sqrt(d)
        scores = np.where(visible, scores, -np.inf)
        with np.errstate(invalid="ignore"):
            m = scores.max(axis=-1, keepdims=True)
            p = np.where(np.isfinite(m), np.exp(scores - np.where(np.isfinite(m), m, 0)), 0)
            total = p.sum(axis=-1, keepdims=True)
            ref = np.where(total > 0, p / np.where(total > 0, total, 1), 0) @ v[0].astype(np.float64)
        np.testing.assert_allclose(cp.asnumpy(got[0, sl]).astype(np.float64), ref, atol=3e-2)
