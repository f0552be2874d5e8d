"""attention, GPU: a repeated CuPy call signature skips validation and planning
(``PreparedCall``); it must still read each call's own arrays, give the same bits as the full
path, and reject every argument the full path rejects."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import attention, reference
from cufuse._core.plans import PLANS, PreparedCall

from .oracle import BF16, make_inputs

pytestmark = pytest.mark.gpu


def _oracle(q, k, v, causal):
    return reference.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=causal)


@pytest.mark.parametrize("n_q, n_k, mode", [(1, 3000, "gqa"), (4, 700, "mha"), (300, 300, "mqa")])
def test_a_prepared_call_reads_its_own_arrays_and_matches_the_full_path(cp, rng, n_q, n_k, mode):
    first = make_inputs(rng, n_q, n_k, 64, 64, mode, BF16, batch=2, heads=2, group=4)
    second = make_inputs(rng, n_q, n_k, 64, 64, mode, BF16, batch=2, heads=2, group=4)
    PLANS.clear()
    full, full_lse = attention(*map(cp.asarray, first), causal=True, return_lse=True)
    key_count = len(PLANS)
    again, again_lse = attention(*map(cp.asarray, first), causal=True, return_lse=True)
    assert len(PLANS) == key_count  # the second call found its prepared signature
    assert any(isinstance(entry, PreparedCall) for entry in PLANS._plans.values())
    assert cp.asnumpy(again).tobytes() == cp.asnumpy(full).tobytes()
    assert cp.asnumpy(again_lse).tobytes() == cp.asnumpy(full_lse).tobytes()
    other = attention(*map(cp.asarray, second), causal=True)
    expected = _oracle(*second, True)
    assert np.abs(cp.asnumpy(other).astype(np.float64) - expected).max() < 0.05


def test_grouped_heads_prepared_keep_their_shapes(cp, rng):
    q = cp.asarray(rng.standard_normal((2, 8, 1, 64)).astype(BF16))
    k = cp.asarray(rng.standard_normal((2, 2, 500, 64)).astype(BF16))
    v = cp.asarray(rng.standard_normal((2, 2, 500, 64)).astype(BF16))
    for _ in range(2):
        out, lse = attention(q, k, v, enable_gqa=True, return_lse=True)
        assert out.shape == (2, 8, 1, 64) and lse.shape == (2, 8, 1)
    expected = reference.attention(cp.asnumpy(q).astype(np.float64).reshape(2, 2, 4, 1, 64),
                                   cp.asnumpy(k).astype(np.float64)[:, :, None],
                                   cp.asnumpy(v).astype(np.float64)[:, :, None]).reshape(2, 8, 1, 64)
    assert np.abs(cp.asnumpy(out).astype(np.float64) - expected).max() < 0.05


@pytest.mark.parametrize("bad", [dict(causal=1), dict(return_lse=0), dict(enable_gqa=1), dict(scale=True),
                                 dict(scale=[0.1]), dict(config=[1])])
def test_a_prepared_signature_still_rejects_bad_arguments(cp, rng, bad):
    q, k, v = map(cp.asarray, make_inputs(rng, 1, 100, 64, 64, "mha", BF16))
    good = dict(causal=True, return_lse=False, enable_gqa=False, scale=1.0, config=None)
    attention(q, k, v, **good)
    attention(q, k, v, **good)
    with pytest.raises(TypeError, match="attention: argument"):
        attention(q, k, v, **{**good, **bad})


def test_an_unaligned_pointer_after_an_aligned_call(cp, rng):
    """Same shapes and strides, k two bytes off 16: a different signature (alignment is in it)."""
    q, k, v = make_inputs(rng, 1, 2001, 64, 64, "mha", BF16)
    q_gpu, v_gpu = cp.asarray(q), cp.asarray(v)
    attention(q_gpu, cp.asarray(k), v_gpu)
    flat = cp.empty(k.size + 1, dtype=k.dtype)
    flat[1:] = cp.asarray(k).ravel()
    shifted_k = flat[1:].reshape(k.shape)
    assert shifted_k.strides == cp.asarray(k).strides and shifted_k.data.ptr % 16 == 2
    out = attention(q_gpu, shifted_k, v_gpu)
    assert np.abs(cp.asnumpy(out).astype(np.float64) - _oracle(q, k, v, False)).max() < 0.05


def test_a_prepared_call_with_out_writes_it_and_still_rejects_an_overlapping_out(cp, rng):
    q, k, v = map(cp.asarray, make_inputs(rng, 4, 900, 64, 64, "mha", BF16))
    expected = _oracle(*map(cp.asnumpy, (q, k, v)), False)
    for _ in range(2):
        out = cp.full(q.shape, cp.nan, dtype=q.dtype)
        assert attention(q, k, v, out=out) is out
        assert np.abs(cp.asnumpy(out).astype(np.float64) - expected).max() < 0.05
    with pytest.raises(ValueError, match="argument 'out' must not overlap input 'q'"):
        attention(q, k, v, out=q)
    attention(q, k, v, out=cp.empty_like(q))
    with pytest.raises(ValueError, match="argument 'out' must not overlap input 'q'"):
        attention(q, k, v, out=q)
