"""attention_varlen, GPU: attention_varlen_simt against the float64 oracle per sequence
(reference.attention_varlen) with lengths 0, 1, 7, 63, 64, 65, 1000 and 4097 mixed in one batch,
GQA groups 1 / 4 / 8, head dims 64 / 80 / 128 / 256, causal and not, a window, softcap, sinks with
and without keys, lse, a poisoned out, every dtype, strided inputs, and a capture into a CUDA
graph (the call never reads cu_seqlens on the host)."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import attention_varlen, reference

from ..conftest import poisoned
from .oracle import BF16, F16, F32, launched
from .test_varlen_host import packed

F64 = np.dtype(np.float64)
TOLERANCE = {F16: 2e-3, BF16: 1.6e-2, F32: 2e-5, F64: 1e-12}  # out rounding of an exact float32 / float64 sum
MIXED_Q = [0, 1, 7, 63, 64, 65, 1000, 4097]
MIXED_K = [5, 0, 7, 63, 64, 65, 1000, 4097]


def run(cp, rng, lens_q, lens_k, heads_q, heads_kv, d, dv, dtype, sinks=False, **options):
    q, k, v, cu_q, cu_k = packed(rng, lens_q, lens_k, heads_q, heads_kv, d, dv, dtype)
    logits = (2 * rng.standard_normal(heads_q)).astype(np.float32) if sinks else None
    out = poisoned(cp, (q.shape[0], heads_q, dv), q.dtype)
    got, lse = attention_varlen(*(cp.asarray(x) for x in (q, k, v, cu_q, cu_k)), out=out, return_lse=True,
                                sinks=None if logits is None else cp.asarray(logits), **options)
    want, want_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, sinks=logits, return_lse=True, **options)
    tol = TOLERANCE[np.dtype(dtype)]
    assert got is out and lse.dtype == (F64 if dtype == F64 else F32)
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(cp.asnumpy(lse), want_lse, rtol=max(tol, 1e-6) / 10, atol=1e-5)
    return q, cp.asnumpy(got), cp.asnumpy(lse), logits


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mixed_lengths(cp, rng, causal, dtype):
    run(cp, rng, MIXED_Q, MIXED_K, 8, 2, 128, 128, dtype, causal=causal)


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("d, dv", [(64, 64), (80, 80), (256, 256), (128, 96)])
def test_heads_and_dims(cp, rng, group, d, dv):
    run(cp, rng, [0, 1, 7, 65, 300], [3, 9, 7, 65, 280], 2 * group, 2, d, dv, F16, causal=True)


@pytest.mark.parametrize("options", [dict(window=(32, 0), causal=True), dict(window=(10, 20)),
                                     dict(softcap=5.0, causal=True), dict(scale=0.3, window=(None, 3))])
def test_window_and_softcap(cp, rng, options):
    run(cp, rng, [0, 1, 7, 64, 200], [4, 50, 7, 64, 190], 4, 2, 64, 64, BF16, **options)


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_sinks_with_and_without_keys(cp, rng, dtype):
    lens_q, lens_k = [3, 5, 0, 65], [0, 40, 6, 65]
    q, out, lse, logits = run(cp, rng, lens_q, lens_k, 4, 1, 64, 32, dtype, sinks=True, causal=True)
    assert np.all(out[:3] == 0) and np.allclose(lse[:3], logits, rtol=1e-6)  # the keyless sequence


@pytest.mark.parametrize("dtype", [F32, F64])
def test_float32_float64(cp, rng, dtype):
    run(cp, rng, [0, 1, 7, 63, 64, 65, 1000], [5, 0, 7, 63, 64, 65, 1000], 4, 2, 96, 64, dtype, causal=True)


def test_strided_inputs_and_no_out(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [7, 0, 33], [9, 2, 40], 4, 2, 64, 64, F16)
    q_dev = cp.asarray(np.ascontiguousarray(q.transpose(1, 0, 2))).transpose(1, 0, 2)  # heads outermost
    k_dev = cp.asarray(np.ascontiguousarray(k[:, :, ::-1]))[:, :, ::-1]  # a negative column stride
    cu_q_dev = cp.asarray(np.repeat(cu_q, 2))[::2]  # strided offsets
    got = attention_varlen(q_dev, k_dev, cp.asarray(v), cu_q_dev, cp.asarray(cu_k), window=(4, 4))
    want = reference.attention_varlen(q, k, v, cu_q, cu_k, window=(4, 4))
    np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_no_tokens_or_no_sequence(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [0, 0], [3, 0], 2, 1, 8, 8, F16)
    out, lse = attention_varlen(*(cp.asarray(x) for x in (q, k, v, cu_q, cu_k)), return_lse=True)
    assert out.shape == (0, 2, 8) and lse.shape == (0, 2)
    q, k, v, cu_q, cu_k = packed(rng, [2], [3], 2, 1, 8, 8, F32)
    one = cp.zeros(1, dtype=cp.int32)  # B = 0 while Tq = 2 breaks the contract: rows without keys, no read
    out, lse = attention_varlen(cp.asarray(q), cp.asarray(k), cp.asarray(v), one, one, return_lse=True)
    assert not out.any() and bool(cp.all(lse == -np.inf))


def test_records_into_a_graph_without_host_sync(cp, rng):
    q, k, v, cu_q, cu_k = (cp.asarray(x) for x in packed(rng, [0, 5, 70], [3, 5, 90], 4, 2, 64, 64, F16))
    assert launched(cp, attention_varlen, q, k, v, cu_q, cu_k, causal=True) == ["attention_varlen_simt"]


def test_host_cu_seqlens_with_gpu_arrays_is_refused(cp, rng):
    q, k, v, cu_q, cu_k = packed(rng, [2, 3], [2, 3], 2, 2, 8, 8, F16)
    with pytest.raises(TypeError, match="attention_varlen: arguments must all be host arrays"):
        attention_varlen(cp.asarray(q), cp.asarray(k), cp.asarray(v), cu_q, cp.asarray(cu_k))
