"""attention_varlen, GPU: both kernels, attention_varlen_wgmma_tma (compute capability 9.0, forced
with its VARLEN_WGMMA tile) and attention_varlen_simt (forced with VarlenSimtRows), and the default
choice, against the float64 oracle per sequence (reference.attention_varlen) with lengths 0, 1, 7,
63, 64, 65, 1000 and 4097 mixed in one batch, GQA groups 1 / 4 / 8, head dims 32 to 256, causal and
not, windows, softcap, sinks with and without keys, lse, poisoned outputs, strided inputs, every
dtype, and captures into a CUDA graph (no call reads cu_seqlens on the host). The SIMT kernel is
exact in the accumulator type (a tolerance of the output's rounding); the wgmma kernel passes
FlashAttention's rule per sequence and head (oracle.error_budget)."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import attention, attention_varlen, reference
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select
from cufuse.ops.attention.varlen_simt import VarlenSimtRows

from ..conftest import poisoned
from .oracle import BF16, F16, F32, launched, naive_in_dtype
from .test_varlen_host import packed

F64 = np.dtype(np.float64)
TOLERANCE = {F16: 2e-3, BF16: 1.6e-2, F32: 2e-5, F64: 1e-12}  # out rounding of an exact float32 / float64 sum
MIXED_Q = [0, 1, 7, 63, 64, 65, 1000, 4097]
MIXED_K = [5, 0, 7, 63, 64, 65, 1000, 4097]
KERNELS = ("wgmma", "simt")


def config_for(cp, kernel, width):
    """``config=`` of a kernel: the VARLEN_WGMMA tile holding ``width`` (skipped off compute
    capability 9.0) or VarlenSimtRows."""
    if kernel == "simt":
        return VarlenSimtRows()
    if not current_device_info().has_wgmma:
        pytest.skip("attention_varlen_wgmma_tma needs compute capability 9.0")
    return select.VARLEN_WGMMA[min(h for h in select.VARLEN_WGMMA if width <= h)]


def budget(q, k, v, cu_q, cu_k, want, dtype, sinks=None, causal=False, scale=None, window=None, softcap=None):
    """FlashAttention's rule for the packed layout: 2 x the worst error of the naive in-dtype
    computation of each (sequence with keys, query head) + the output's rounding floor."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    worst = 0.0
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b + 1] == cu_q[b] or cu_k[b + 1] == cu_k[b]:
            continue
        for h in range(q.shape[1]):
            naive = naive_in_dtype(q[rows, h][None], k[keys, h // group][None], v[keys, h // group][None], causal,
                                   scale, dtype, window, softcap, None if sinks is None else sinks[h:h + 1])
            worst = max(worst, np.abs(naive[0].astype(np.float64) - want[rows, h]).max(initial=0))
    floor = 2 * np.abs((want + 0.3 - 0.3).astype(dtype).astype(np.float64) - want).max(initial=0) + 1e-5
    return 2 * worst + floor


def run(cp, rng, lens_q, lens_k, heads_q, heads_kv, d, dv, dtype, kernel=None, sinks=False, to_device=None,
        **options):
    """One call on fresh random inputs into a poisoned out, checked against the oracle; ``kernel``
    None takes the default choice. Returns (q, out, lse, sink logits) as NumPy."""
    q, k, v, cu_q, cu_k = packed(rng, lens_q, lens_k, heads_q, heads_kv, d, dv, dtype)
    config = None if kernel is None else config_for(cp, kernel, max(d, dv))
    logits = (2 * rng.standard_normal(heads_q)).astype(np.float32) if sinks else None
    out = poisoned(cp, (q.shape[0], heads_q, dv), q.dtype)
    to_device = to_device or cp.asarray
    got, lse = attention_varlen(to_device(q), to_device(k), to_device(v), cp.asarray(cu_q), cp.asarray(cu_k), out=out,
                                return_lse=True, sinks=None if logits is None else cp.asarray(logits), config=config,
                                **options)
    want, want_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, sinks=logits, return_lse=True, **options)
    assert got is out and lse.dtype == (F64 if dtype == F64 else F32)
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse)
    keyless = np.repeat(np.diff(cu_k) == 0, np.diff(cu_q))
    assert np.all(got[keyless] == 0)  # exactly, whatever the other rows hold
    exact = kernel == "simt" or np.dtype(dtype) in (F32, F64) or (kernel is None and
                                                                  not current_device_info().has_wgmma)
    if exact:
        tol = TOLERANCE[np.dtype(dtype)]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(lse, want_lse, rtol=max(tol, 1e-6) / 10, atol=1e-5)
    else:
        limit = budget(q, k, v, cu_q, cu_k, want, np.dtype(dtype), logits, **options)
        err = np.abs(got - want).max(initial=0)
        assert err <= limit, f"max error {err:.3g} > FlashAttention's budget {limit:.3g}"
        assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
        finite = np.isfinite(want_lse)
        np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=0,
                                   atol=2e-3 * (1 + np.abs(want_lse[finite]).max(initial=0)))
    return q, got, lse, logits


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mixed_lengths(cp, rng, kernel, causal, dtype):
    run(cp, rng, MIXED_Q, MIXED_K, 8, 2, 128, 128, dtype, kernel, causal=causal)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("d, dv", [(64, 64), (128, 128), (256, 256), (96, 96), (80, 80), (32, 32), (128, 96),
                                   (64, 256)])
def test_heads_and_dims(cp, rng, kernel, group, d, dv):
    run(cp, rng, [0, 1, 7, 65, 300, 129], [3, 9, 7, 65, 280, 400], 2 * group, 2, d, dv, F16, kernel, causal=True)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("options", [dict(window=(32, 0), causal=True), dict(window=(10, 20)),
                                     dict(softcap=5.0, causal=True), dict(scale=0.3, window=(None, 3)),
                                     dict(softcap=3.0, scale=-0.5), dict(window=(300, 100), causal=False)])
def test_window_and_softcap(cp, rng, kernel, options):
    run(cp, rng, [0, 1, 7, 64, 200, 700], [4, 50, 7, 64, 190, 900], 4, 2, 64, 64, BF16, kernel, **options)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True])
def test_sinks_with_and_without_keys(cp, rng, kernel, causal):
    lens_q, lens_k = [3, 5, 0, 65, 200], [0, 40, 6, 65, 130]
    q, out, lse, logits = run(cp, rng, lens_q, lens_k, 4, 1, 64, 32, F16, kernel, sinks=True, causal=causal)
    assert np.all(out[:3] == 0) and np.allclose(lse[:3], logits, rtol=1e-6)  # the keyless sequence


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_simt_sinks_every_dtype(cp, rng, dtype):
    run(cp, rng, [3, 5, 0, 65], [0, 40, 6, 65], 4, 1, 64, 32, dtype, "simt", sinks=True, causal=True)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_float32_float64(cp, rng, dtype):
    run(cp, rng, [0, 1, 7, 63, 64, 65, 1000], [5, 0, 7, 63, 64, 65, 1000], 4, 2, 96, 64, dtype, causal=True)


def test_one_long_sequence_and_many_short(cp, rng):
    # B = 300 (two search rounds of 32 candidates); then one sequence of 4097 rows
    lens = rng.integers(0, 80, size=300).tolist()
    run(cp, rng, lens, lens, 4, 4, 64, 64, BF16, "wgmma", causal=True)
    run(cp, rng, [4097], [4097], 2, 1, 128, 128, F16, "wgmma")


def test_strided_inputs_and_no_out(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [7, 0, 33], [9, 2, 40], 4, 2, 64, 64, F16)
    q_dev = cp.asarray(np.ascontiguousarray(q.transpose(1, 0, 2))).transpose(1, 0, 2)  # heads outermost
    k_dev = cp.asarray(np.ascontiguousarray(k[:, :, ::-1]))[:, :, ::-1]  # a negative column stride
    cu_q_dev = cp.asarray(np.repeat(cu_q, 2))[::2]  # strided offsets
    got = attention_varlen(q_dev, k_dev, cp.asarray(v), cu_q_dev, cp.asarray(cu_k), window=(4, 4))
    want = reference.attention_varlen(q, k, v, cu_q, cu_k, window=(4, 4))
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kernel", KERNELS)
def test_heads_outermost_and_padded_heads(cp, rng, kernel):
    # (H, T, D) storage viewed as (T, H, D): the maps' token stride is D, the head stride T x D; k / v
    # heads padded to 96 columns of which 64 are used
    def heads_outermost(x):
        return cp.asarray(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(1, 0, 2)

    def padded(x):
        wide = cp.zeros(x.shape[:2] + (96,), dtype=x.dtype)
        wide[..., :x.shape[2]] = cp.asarray(x)
        return wide[..., :x.shape[2]]

    run(cp, rng, [0, 70, 129, 5], [10, 70, 300, 0], 4, 2, 64, 64, F16, kernel, causal=True,
        to_device=lambda x: heads_outermost(x) if x.shape[1] == 4 else padded(x))


def test_unaligned_out_takes_element_stores(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [0, 70, 129], [10, 70, 300], 4, 2, 96, 96, BF16)
    config = config_for(cp, "wgmma", 96)
    flat = poisoned(cp, (q.shape[0] * 4 * 96 + 1,), q.dtype)
    out = flat[1:].reshape(q.shape[0], 4, 96)  # 2 bytes past a 16-byte boundary
    got = attention_varlen(*(cp.asarray(x) for x in (q, k, v, cu_q, cu_k)), out=out, config=config)
    want = reference.attention_varlen(q, k, v, cu_q, cu_k)
    assert got is out and bool(cp.isnan(flat[:1]).all())  # nothing written before out
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("d, causal", [(64, True), (128, False), (128, True), (256, True)])
def test_equal_lengths_match_dense_attention_bitwise(cp, rng, d, causal):
    # the same block body on the same tile: (query tile, head) items of equal sequences are the
    # dense (query tile, batch) items, so the bits agree (1000 rows: a ragged last tile)
    batch, n, heads_q, heads_kv = 3, 1000, 4, 2
    q, k, v, cu_q, cu_k = packed(rng, [n] * batch, [n] * batch, heads_q, heads_kv, d, d, F16)
    tile = config_for(cp, "wgmma", d)
    got = attention_varlen(*(cp.asarray(x) for x in (q, k, v, cu_q, cu_k)), causal=causal, config=tile)

    def dense(x):  # (B, H, N, D) views of the packed arrays
        return cp.asarray(x).reshape(batch, n, x.shape[1], d).transpose(0, 2, 1, 3)

    want = attention(dense(q), dense(k), dense(v), causal=causal, enable_gqa=True, config=tile.dense)
    assert cp.array_equal(got, want.transpose(0, 2, 1, 3).reshape(batch * n, heads_q, d))


def test_no_tokens_or_no_sequence(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [0, 0], [3, 0], 2, 1, 8, 8, F16)
    out, lse = attention_varlen(*(cp.asarray(x) for x in (q, k, v, cu_q, cu_k)), return_lse=True)
    assert out.shape == (0, 2, 8) and lse.shape == (0, 2)
    q, k, v, cu_q, cu_k = packed(rng, [2], [3], 2, 1, 8, 8, F32)
    one = cp.zeros(1, dtype=cp.int32)  # B = 0 while Tq = 2 breaks the contract: rows without keys, no read
    out, lse = attention_varlen(cp.asarray(q), cp.asarray(k), cp.asarray(v), one, one, return_lse=True)
    assert not out.any() and bool(cp.all(lse == -np.inf))


@pytest.mark.parametrize("kernel", KERNELS)
def test_records_into_a_graph_without_host_sync(cp, rng, kernel):
    config = config_for(cp, kernel, 64)
    q, k, v, cu_q, cu_k = (cp.asarray(x) for x in packed(rng, [0, 5, 270], [3, 5, 290], 4, 2, 64, 64, F16))
    names = launched(cp, attention_varlen, q, k, v, cu_q, cu_k, causal=True, config=config)
    assert names == [f"attention_varlen_{kernel}" + ("_tma" if kernel == "wgmma" else "")]


def test_a_captured_graph_replays_new_lengths(cp, rng):
    # the offsets are read on the device at every replay: a graph captured once serves new lengths
    config = config_for(cp, "wgmma", 64)
    lens = ([5, 200, 0, 60], [70, 0, 135, 60])
    q, k, v, _, _ = packed(rng, lens[0], lens[0], 4, 2, 64, 64, F16)
    dev = [cp.asarray(x) for x in (q, k, v)]
    cu = cp.zeros(5, dtype=cp.int32)
    out = cp.empty((q.shape[0], 4, 64), dtype=q.dtype)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:  # every copy and launch on the one stream (a non-blocking one is not ordered with the default)
        attention_varlen(*dev, cu, cu, causal=True, out=out, config=config)  # plans and compiles before the capture
        stream.begin_capture()
        attention_varlen(*dev, cu, cu, causal=True, out=out, config=config)
        graph = stream.end_capture()
        for lengths in lens:
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            cu.set(offsets)
            out.fill(np.nan)
            graph.launch(stream)
            got = cp.asnumpy(out, stream=stream, blocking=True).astype(np.float64)
            want = reference.attention_varlen(q, k, v, offsets, offsets, causal=True)
            np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_default_choice(cp, rng):
    q, k, v, cu_q, cu_k = (cp.asarray(x) for x in packed(rng, [0, 5, 70], [3, 5, 90], 4, 2, 64, 64, F16))
    hopper = current_device_info().has_wgmma
    assert launched(cp, attention_varlen, q, k, v, cu_q, cu_k) == [
        "attention_varlen_wgmma_tma" if hopper else "attention_varlen_simt"]
    assert launched(cp, attention_varlen, q.astype(cp.float32), k.astype(cp.float32), v.astype(cp.float32), cu_q,
                    cu_k) == ["attention_varlen_simt"]
    q60, k60, v60 = (x[..., :60] for x in (q, k, v))  # rows of 120 bytes: no tensor map
    assert launched(cp, attention_varlen, q60, k60, v60, cu_q, cu_k) == ["attention_varlen_simt"]


def test_a_config_that_cannot_run_is_refused(cp, rng):
    q, k, v, cu_q, cu_k = (cp.asarray(x) for x in packed(rng, [4, 5], [3, 5], 4, 2, 64, 64, F32))
    with pytest.raises(ValueError, match="attention_varlen: argument 'config' asks for the wgmma kernel, which"):
        attention_varlen(q, k, v, cu_q, cu_k, config=select.VARLEN_WGMMA[64])


def test_host_cu_seqlens_with_gpu_arrays_is_refused(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [2, 3], [2, 3], 2, 2, 8, 8, F16)
    with pytest.raises(TypeError, match="attention_varlen: arguments must all be host arrays"):
        attention_varlen(cp.asarray(q), cp.asarray(k), cp.asarray(v), cu_q, cp.asarray(cu_k))
