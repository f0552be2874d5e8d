"""Property tests of the float64 oracles in cufuse.reference (CPU only)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cufuse import reference

finite = st.floats(-30, 30, allow_nan=False, allow_infinity=False, width=64)
tiles = st.integers(1, 40)


def matrices(min_side=1, max_side=12, elements=finite):
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=min_side, max_side=max_side), elements=elements)


@settings(max_examples=60, deadline=None)
@given(x=matrices(), tile=tiles)
def test_any_tile_size_gives_scipy_softmax(x, tile):
    for axis in (0, 1, None, (0, 1)):
        np.testing.assert_allclose(reference.softmax(x, axis, tile=tile), scipy.special.softmax(x, axis), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(reference.log_softmax(x, axis, tile=tile), scipy.special.log_softmax(x, axis), rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(x=matrices(), tile=tiles, shift=st.floats(-100, 100))
def test_softmax_rows_sum_to_one_and_are_shift_invariant(x, tile, shift):
    result = reference.softmax(x, 1, tile=tile)
    np.testing.assert_allclose(result.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(reference.softmax(x + shift, 1, tile=tile), result, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(reference.log_softmax(x + shift, 1, tile=tile), reference.log_softmax(x, 1, tile=tile), atol=1e-9)


special = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0, 700.0, -700.0])


@settings(max_examples=150, deadline=None)
@given(x=matrices(max_side=6, elements=special), tile=tiles)
def test_nan_pattern_matches_scipy_exactly(x, tile):
    with np.errstate(all="ignore"):
        for axis in (0, 1, None):
            for ours, theirs in ((reference.softmax, scipy.special.softmax), (reference.log_softmax, scipy.special.log_softmax)):
                got, want = ours(x, axis, tile=tile), theirs(x, axis)
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
                np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
                np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
                finite_mask = np.isfinite(want)
                np.testing.assert_allclose(got[finite_mask], want[finite_mask], rtol=1e-12, atol=1e-300)


def test_named_non_finite_rows():
    rows = np.array([
        [1.0, np.nan, 2.0],       # NaN -> NaN row
        [1.0, np.inf, 2.0],       # +inf -> softmax NaN; log_softmax NaN at inf, -inf elsewhere
        [-np.inf, -np.inf, -np.inf],  # all -inf -> NaN row
        [-np.inf, 0.0, 0.0],      # -inf entries -> 0 (log: -inf)
    ])
    sm, lsm = reference.softmax(rows, 1), reference.log_softmax(rows, 1)
    assert np.isnan(sm[0]).all() and np.isnan(sm[1]).all() and np.isnan(sm[2]).all()
    np.testing.assert_array_equal(sm[3], [0.0, 0.5, 0.5])
    assert np.isnan(lsm[0]).all() and np.isnan(lsm[2]).all()
    np.testing.assert_array_equal(lsm[1], [-np.inf, np.nan, -np.inf])
    np.testing.assert_allclose(lsm[3], [-np.inf, np.log(0.5), np.log(0.5)])


def test_integer_input_matches_scipy():
    x = np.arange(12).reshape(3, 4) % 5
    np.testing.assert_allclose(reference.softmax(x, 1), scipy.special.softmax(x, 1), rtol=1e-14)


@st.composite
def attention_inputs(draw):
    batch = draw(st.sampled_from([(), (2,), (2, 3)]))
    n_q, n_k = draw(st.integers(1, 9)), draw(st.integers(0, 9))
    head_dim, head_dim_v = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # a size-1 axis on k/v exercises MQA/GQA broadcasting
    kv_batch = tuple(1 if (i == len(batch) - 1 and draw(st.booleans())) else b for i, b in enumerate(batch))
    q = rng.standard_normal(batch + (n_q, head_dim)) * 2
    k = rng.standard_normal(kv_batch + (n_k, head_dim)) * 2
    v = rng.standard_normal(kv_batch + (n_k, head_dim_v))
    return q, k, v


@settings(max_examples=80, deadline=None)
@given(inputs=attention_inputs(), causal=st.booleans(), tile=tiles)
def test_attention_equals_dense_masked_formula(inputs, causal, tile):
    q, k, v = inputs
    out, lse = reference.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    np.testing.assert_allclose(out, reference.attention_dense(q, k, v, causal=causal), rtol=1e-10, atol=1e-12)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal:
        visible = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        scores = np.where(visible, scores, -np.inf)
    with np.errstate(divide="ignore"):
        expected_lse = scipy.special.logsumexp(scores, axis=-1) if n_k else np.full(out.shape[:-1], -np.inf)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-10, atol=1e-12)


def test_causal_alignment_and_empty_rows():
    rng = np.random.default_rng(0)
    n_q, n_k = 7, 3  # bottom-right: rows 0..3 see no key, row 4 sees key 0, ...
    q, k, v = rng.standard_normal((n_q, 4)), rng.standard_normal((n_k, 4)), rng.standard_normal((n_k, 2))
    out, lse = reference.attention(q, k, v, causal=True, return_lse=True, tile=2)
    np.testing.assert_array_equal(out[:4], 0.0)
    np.testing.assert_array_equal(lse[:4], -np.inf)
    np.testing.assert_allclose(out[4], v[0])  # sees exactly key 0
    np.testing.assert_allclose(out[6], reference.attention(q[6:], k, v)[0])  # last row sees all keys


def test_attention_nan_key_hits_only_rows_that_see_it():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    k[3] = np.nan
    out = reference.attention(q, k, v, causal=True, tile=4)
    assert np.isfinite(out[:3]).all() and np.isnan(out[3:]).all()


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 6), k=st.integers(0, 9), n=st.integers(0, 6), tile=tiles, with_bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear_relu_matches_direct(m, k, n, tile, with_bias, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    bias = rng.standard_normal(n) if with_bias else None
    expected = np.maximum(x @ w + (bias if with_bias else 0.0), 0.0)
    np.testing.assert_allclose(reference.fused_linear_relu(x, w, bias, tile=tile), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [reference.softmax, reference.log_softmax])
def test_bad_tile_rejected(fn):
    with pytest.raises(ValueError, match=r"reference: argument 'tile' expected a positive int, got 0"):
        fn(np.ones(3), tile=0)
