"""The fast NumPy path of every op against its tiled float64 oracle in cufuse.reference: the same
results within the rounding of the precision they are computed in, the same NaN / inf pattern,
the same shapes (CPU only)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cufuse import reference
from cufuse._core import numpy_attention as attention_path
from cufuse._core.validate import normalize_axis
from cufuse.ops.linear import numpy_path as linear_path
from cufuse.ops.logsumexp import numpy_path as logsumexp_path
from cufuse.ops.paged_attention import numpy_path as paged_path
from cufuse.ops.softmax import numpy_path as softmax_path

DTYPES = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)
# The row reductions compute float32 (and 16-bit) inputs in float32, as SciPy does: within ULPS float32 ulps of
# the result's scale, 1 + |value| for logarithms and |p| (1 + |log p|) for probabilities (exp's rounding grows
# with |x - max|, which is at most |log p|), times the sum's condition number for signed weights.
ULPS = 8
EPS32 = float(np.finfo(np.float32).eps)


def same(fast, oracle, rtol=1e-12, atol=1e-13, scale=None):
    """float64 (float32 where a ``scale`` is given), one shape, NaN and infinities in the same
    places, finite values within rounding: rtol / atol for float64, ULPS ulps of scale for float32."""
    fast, oracle = np.asarray(fast), np.asarray(oracle)
    assert fast.dtype == (np.float64 if scale is None else np.float32) and fast.shape == oracle.shape
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(oracle))
    np.testing.assert_array_equal(np.where(np.isinf(fast), fast, 0), np.where(np.isinf(oracle), oracle, 0))
    finite = np.isfinite(oracle)
    if scale is None:
        np.testing.assert_allclose(fast[finite], oracle[finite], rtol=rtol, atol=atol)
        return
    err = np.abs(fast[finite] - oracle[finite]) / np.broadcast_to(scale, oracle.shape)[finite]
    assert err.max(initial=0) <= ULPS * EPS32, f"{err.max() / EPS32:.1f} float32 ulps of the scale"


def precision(dtype) -> np.dtype:
    """The dtype the row reductions compute in: float64 for float64 and integers, else float32."""
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 or np.dtype(dtype).kind in "iu" else np.float32)


def axes_of(axis, ndim):
    """axis as the public functions hand it to the row reductions' NumPy paths."""
    return normalize_axis("test", axis, ndim)


def random(rng, shape, dtype, low=-8.0, high=8.0):
    return rng.uniform(low, high, size=shape).astype(dtype)


# softmax / log_softmax

SHAPES_AXES = [((), None), ((), 0), ((), -1), ((7,), None), ((7,), 0), ((5, 9), 1), ((5, 9), -2), ((5, 9), None),
               ((5, 9), (0, 1)), ((3, 4, 6), (0, 2)), ((3, 4, 6), (-1, 0)), ((3, 4, 6), 1), ((0, 4), 1), ((0, 4), 0),
               ((3, 0), -1), ((3, 0), None), ((2, 1, 1300), -1)]


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES + (np.int32, np.int16))
@pytest.mark.parametrize("shape, axis", SHAPES_AXES)
def test_softmax_matches_the_oracle(rng, name, dtype, shape, axis):
    x = random(rng, shape, dtype) if np.dtype(dtype).kind == "f" else rng.integers(-20, 20, shape).astype(dtype)
    fast = getattr(softmax_path, name)(x, axes_of(axis, x.ndim))
    check_softmax(name, fast, getattr(reference, name)(x, axis), precision(x.dtype))
    if x.size > 2:
        check_softmax(name, fast, getattr(reference, name)(x, axis, tile=3), precision(x.dtype))


def check_softmax(name, fast, oracle, dtype):
    """same() in the precision of the computation: in float32, a logarithm's scale (log_softmax)
    or a probability's, with float32's smallest normal number as a floor (exp's subnormals)."""
    if dtype == np.float64:
        return same(fast, oracle)
    if name == "log_softmax":
        return same(fast, oracle, scale=1 + np.abs(oracle))
    tiny = np.finfo(np.float32).tiny
    same(fast, oracle, scale=oracle * (1 + np.abs(np.log(np.maximum(oracle, tiny)))) + tiny)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_non_finite_rows(rng, name, dtype):
    x = random(rng, (9, 6), dtype)
    x[0, 2] = np.nan
    x[1, :] = -np.inf
    x[2, 4] = np.inf
    x[3, [1, 5]] = -np.inf
    x[4, [0, 3]] = np.inf
    x[5, 1], x[5, 2] = np.inf, -np.inf
    x[6, 0], x[6, 1] = np.nan, np.inf
    x[7, :] = np.inf
    x[8, :] = 700.0
    for axis in (1, 0, None):
        fast = getattr(softmax_path, name)(x, axes_of(axis, x.ndim))
        check_softmax(name, fast, getattr(reference, name)(x, axis), np.dtype(dtype))


# logsumexp

def check_logsumexp(a, axis, b=None):
    ndim = max(1, len(np.broadcast_shapes(np.shape(a), np.shape(b))))  # a 0-d a is one element
    fast, oracle = logsumexp_path.logsumexp(a, axes_of(axis, ndim), b), reference.logsumexp(a, axis, b)
    if fast[0].dtype == np.float64:
        same(fast[0], oracle[0], atol=1e-12)
        same(fast[1], oracle[1])
        return
    scale = (1 + np.abs(oracle[0])) * (1 if b is None else cancellation(a, axis, b, oracle[0]))
    same(fast[0], oracle[0], scale=scale)
    determined = scale * ULPS * EPS32 < 1  # a sum that cancels below float32's rounding has no sign to check
    assert fast[1].dtype == np.float32
    np.testing.assert_array_equal(fast[1][determined], oracle[1][determined])


def cancellation(a, axis, b, value):
    """The sum's condition number sum |b e^a| / |sum b e^a| (1 where it is not finite)."""
    with np.errstate(all="ignore"):
        ratio = np.exp(reference.logsumexp(a, axis, np.abs(b))[0] - value)
    return np.where(np.isfinite(ratio), np.maximum(ratio, 1.0), 1.0)


@pytest.mark.parametrize("dtype", DTYPES + (np.int64,))
@pytest.mark.parametrize("shape, axis", [s for s in SHAPES_AXES if 0 not in s[0]] + [((4, 1, 3), 1)])
def test_logsumexp_matches_the_oracle(rng, dtype, shape, axis):
    a = random(rng, shape, dtype) if np.dtype(dtype).kind == "f" else rng.integers(-20, 20, shape).astype(dtype)
    check_logsumexp(a, axis)
    check_logsumexp(a, axis, b=rng.uniform(0.1, 2.0, size=shape))
    check_logsumexp(a, axis, b=rng.uniform(-2.0, 2.0, size=shape).astype(a.dtype if a.dtype.kind == "f" else bool))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_logsumexp_weights(rng, axis):
    a = random(rng, (6, 5), np.float64)
    for b in (rng.uniform(-1, 1, (6, 5)), rng.uniform(-1, 1, (1, 5)), rng.uniform(-1, 1, (6, 1)), -2.0, 0.0,
              np.where(rng.random((6, 5)) < 0.4, 0.0, 1.0), np.array([1.0, -1.0, 0.0, 2.0, -0.5]),
              (rng.random((6, 5)) < 0.5)):
        check_logsumexp(a, axis, b)
    check_logsumexp(np.float32(3.0), None, np.ones(4))  # b widens a 0-d a


SPECIAL_A = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0, 800.0, -800.0])
SPECIAL_B = np.array([0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan, 1e-300])


def test_logsumexp_non_finite_patterns(rng):
    """Random rows of special values and weights (zero, negative, infinite, NaN): every rule of the oracle."""
    for _ in range(300):
        n = int(rng.integers(1, 6))
        a = rng.choice(SPECIAL_A, size=(3, n)) if rng.random() < 0.8 else rng.standard_normal((3, n))
        b = None if rng.random() < 0.3 else rng.choice(SPECIAL_B, size=(3, n) if rng.random() < 0.8 else (1, n))
        for axis in (None, 0, 1):
            check_logsumexp(a, axis, b)


def test_logsumexp_empty_reduction():
    """The oracle's rule for an empty sum (it cannot reshape a size-0 array into rows itself): -inf,
    sign 0; an empty result where no row is left."""
    for shape, axis, kept in (((0,), None, (1,)), ((3, 0), -1, (3, 1)), ((3, 0), None, (1, 1)), ((0, 3), 1, (0, 1)),
                              ((0, 3), 0, (1, 3))):
        for b in (None, np.ones(shape)):
            value, sign = logsumexp_path.logsumexp(np.zeros(shape), axes_of(axis, len(shape)), b)
            same(value, np.full(kept, -np.inf))
            same(sign, np.zeros(kept))


# fused_linear / fused_gated_linear

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape", [(33,), (5, 33), (2, 3, 33), (0, 33)])
def test_linear_matches_the_oracle(rng, activation, dtype, x_shape):
    x, weight = random(rng, x_shape, dtype, -2, 2), random(rng, (33, 17), dtype, -1, 1)
    for bias in (None, random(rng, (17,), dtype), np.asarray(0.5, dtype=dtype)):
        same(linear_path.fused_linear(x, weight, bias, activation=activation),
             reference.fused_linear(x, weight, bias, activation=activation, tile=8), atol=1e-12)
    same(linear_path.fused_linear(x, weight.T.copy().T), reference.fused_linear(x, weight), atol=1e-12)
    same(linear_path.fused_linear_relu(x, weight), reference.fused_linear_relu(x, weight), atol=1e-12)
    w_up = random(rng, (17, 33), dtype, -1, 1).T  # a transposed view
    same(linear_path.fused_gated_linear(x, weight, w_up, activation=activation),
         reference.fused_gated_linear(x, weight, w_up, activation=activation, tile=8), atol=1e-12)


@pytest.mark.parametrize("x_shape, n_dim", [((3, 0), 4), ((0, 5), 4), ((3, 5), 0), ((0,), 2)])
def test_linear_empty(rng, x_shape, n_dim):
    x, weight = random(rng, x_shape, np.float32), random(rng, (x_shape[-1], n_dim), np.float32)
    same(linear_path.fused_linear(x, weight, activation="gelu"), reference.fused_linear(x, weight, activation="gelu"))
    same(linear_path.fused_gated_linear(x, weight, weight), reference.fused_gated_linear(x, weight, weight))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the oracle's own inf * 0
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_non_finite(rng, activation):
    x, weight = random(rng, (6, 4), np.float64, -30, 30), random(rng, (4, 5), np.float64)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    weight[:, 4] = np.abs(weight[:, 4])
    same(linear_path.fused_linear(x, weight, activation=activation),
         reference.fused_linear(x, weight, activation=activation), atol=1e-12)
    same(linear_path.fused_gated_linear(x, weight, weight[:, ::-1], activation=activation),
         reference.fused_gated_linear(x, weight, weight[:, ::-1], activation=activation), atol=1e-12)


# attention

def check_attention(q, k, v, **kwargs):
    fast = attention_path.attention(q, k, v, return_lse=True, **kwargs)
    for tile in (128, 5):
        oracle = reference.attention(q, k, v, return_lse=True, tile=tile, **kwargs)
        same(fast[0], oracle[0])
        same(fast[1], oracle[1], atol=1e-12)
    plain = attention_path.attention(q, k, v, **kwargs)
    np.testing.assert_array_equal(plain, fast[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_q, n_k", [(7, 19), (19, 7), (8, 8), (1, 30), (4, 0), (0, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_the_oracle(rng, dtype, n_q, n_k, causal):
    q = random(rng, (2, 3, n_q, 16), dtype, -1, 1)
    k = random(rng, (2, 1, n_k, 16), dtype, -1, 1)  # one KV head for three query heads: broadcast
    v = random(rng, (1, 3, n_k, 12), dtype, -1, 1)
    check_attention(q, k, v, causal=causal)
    check_attention(q, k, v, causal=causal, scale=0.7, softcap=2.5)
    for window in ((3, 2), (None, 0), (2, None), (0, 0), (40, 40)):
        check_attention(q, k, v, causal=causal, window=window)


def test_attention_leading_dims_and_gqa(rng):
    q = random(rng, (2, 2, 3, 5, 8), np.float32, -2, 2)  # (B, Hkv, G, Nq, D) of grouped-query heads
    k = random(rng, (2, 2, 1, 9, 8), np.float32, -2, 2)
    v = random(rng, (2, 2, 1, 9, 4), np.float32, -2, 2)
    check_attention(q, k, v, causal=True)
    check_attention(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0], window=(1, 1))  # 2-D


def test_attention_non_finite(rng):
    q, k, v = random(rng, (2, 6, 8), np.float64, -1, 1), random(rng, (2, 9, 8), np.float64, -1, 1), \
        random(rng, (2, 9, 8), np.float64, -1, 1)
    k[0, 8, 3] = np.nan  # only the rows that see key 8 (causal: the last) turn NaN
    q[1, 2, 0] = np.inf
    check_attention(q, k, v, causal=True)
    check_attention(q, k, v, window=(0, 0))
    v[0, 4, 1] = np.nan  # NaN in v reaches every row that sees a key, as in the oracle
    check_attention(q, k, v, causal=True, window=(2, 0))
    out = attention_path.attention(q, k, v, causal=True)
    assert np.isnan(out[0, 5]).all() and np.isnan(out[0, :, 1]).all()
    assert not np.isnan(np.delete(out[0, :5], 1, axis=-1)).any()


def test_attention_query_blocks(rng, monkeypatch):
    """Score matrices larger than the block bound are computed a block of query rows at a time."""
    monkeypatch.setattr(attention_path, "SCORE_BYTES", 3 * 8 * 2 * 40)
    q, k, v = (random(rng, (2, n, 8), np.float64, -1, 1) for n in (37, 40, 40))
    check_attention(q, k, v, causal=True, window=(5, None))
    check_attention(q, k[:, :23], v[:, :23], causal=True)


# attention_paged

@pytest.mark.parametrize("page_size", [1, 16, 3])
@pytest.mark.parametrize("n_q", [1, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_paged_attention_matches_the_oracle(rng, page_size, n_q, causal):
    batch, heads_q, heads_kv, max_pages, n_pages = 4, 6, 2, 5, 24
    k_pages = random(rng, (n_pages, page_size, heads_kv, 8), np.float32, -1, 1).transpose(0, 2, 1, 3)  # vLLM storage
    v_pages = random(rng, (n_pages, heads_kv, page_size, 5), np.float32, -1, 1)
    table = rng.permutation(n_pages)[: batch * max_pages].reshape(batch, max_pages).astype(np.int32)
    table[2, :2] = table[1, :2]  # a shared prefix
    full = max_pages * page_size
    lengths = np.array([0, full, min(full, n_q + 2), max(1, full - 3)], dtype=np.int32)
    q = random(rng, (batch, heads_q, n_q, 8), np.float32, -1, 1)
    for kwargs in ({}, {"window": (2, 0), "softcap": 3.0}, {"scale": 0.2}):
        fast = paged_path.attention_paged(q, k_pages, v_pages, table, lengths, causal=causal, return_lse=True, **kwargs)
        oracle = reference.attention_paged(q, k_pages, v_pages, table, lengths, causal=causal, return_lse=True,
                                           tile=4, **kwargs)
        same(fast[0], oracle[0])
        same(fast[1], oracle[1], atol=1e-12)
    assert (fast[0][0] == 0).all() and (fast[1][0] == -np.inf).all()
