"""attention with ``sinks``, CPU: the NumPy path, the tiled oracle, the paged path and
cufuse.dask against a naive float64 computation that appends each row's sink as one more key
column of value 0; the head mapping; the validation errors; the plans' sink arguments."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse import reference
from cufuse._core.device import A100, H200
from cufuse._core.plans import NULL
from cufuse.ops.attention.decode import DecodeTile
from cufuse.ops.attention.mma import FlashMmaTile
from cufuse.ops.attention.plan import plan_attention
from cufuse.ops.attention.simt import SimtRows
from cufuse.ops.attention.wgmma import FlashWgmmaTile

F16 = np.dtype(np.float16)


def naive(q, k, v, sinks, *, causal=False, scale=None, window=None, softcap=None):
    """softmax over [scores, sink] in float64, out = P[..., :-1] @ V, lse over both."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    n_q, n_k = scores.shape[-2:]
    visible = reference.visible_keys(np.arange(n_k), n_q, n_k, causal, window)
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    batch = scores.shape[:-2]
    items = int(np.prod(q.shape[:-2]))
    logits = np.asarray(sinks, dtype=np.float64)[np.arange(items) % len(sinks)].reshape(q.shape[:-2])
    column = np.broadcast_to(np.broadcast_to(logits, batch)[..., None, None], batch + (n_q, 1))
    full = np.concatenate([scores, column], axis=-1)
    m = full.max(axis=-1, keepdims=True)
    p = np.exp(full - m)
    total = p.sum(axis=-1, keepdims=True)
    out = (p[..., :-1] / total) @ v
    return out, (m + np.log(total))[..., 0]


CASES = [  # (q shape, k shape, Dv, sinks length, kwargs)
    ((2, 3, 5, 8), (2, 3, 7, 8), 4, 3, {}),
    ((2, 3, 9, 8), (2, 3, 4, 8), 6, 6, {"causal": True}),  # Nq > Nk: 5 rows without keys
    ((2, 2, 4, 6, 8), (2, 2, 1, 11, 8), 8, 8, {"causal": True, "window": (3, 0)}),  # broadcast GQA
    ((3, 7, 16), (3, 20, 16), 16, 1, {"window": (2, 1), "softcap": 2.0, "scale": 0.7}),
    ((4, 6, 8), (1, 6, 8), 5, 2, {"causal": True, "window": (None, 0)}),  # MQA
    ((1, 4, 5, 8), (3, 4, 5, 8), 8, 4, {}),  # q broadcast over the leading dim only
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("path", ["numpy", "reference"])
def test_matches_naive(rng, case, path):
    q_shape, k_shape, dv, heads, kwargs = case
    q, k = rng.standard_normal(q_shape), rng.standard_normal(k_shape)
    v = rng.standard_normal(k_shape[:-1] + (dv,))
    sinks = (3 * rng.standard_normal(heads)).astype(np.float32)
    expected, expected_lse = naive(q, k, v, sinks, **kwargs)
    if path == "numpy":
        out, lse = cufuse.attention(q, k, v, sinks=sinks, return_lse=True, **kwargs)
    else:
        out, lse = reference.attention(q, k, v, sinks=sinks, return_lse=True, tile=3, **kwargs)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-12, atol=1e-12)


def test_keyless_rows_and_no_keys():
    q, k, v = np.ones((2, 6, 4)), np.ones((2, 2, 4)), np.full((2, 2, 4), np.nan)
    sinks = np.float32([0.25, -2.0])
    out, lse = cufuse.attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
    assert np.all(out[:, :4] == 0) and np.all(lse[:, :4] == sinks[:, None])  # NaN v never reached
    out, lse = cufuse.attention(q, k[:, :0], v[:, :0], sinks=sinks, return_lse=True)
    assert np.all(out == 0) and np.all(lse == sinks[:, None])
    out, lse = reference.attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
    assert np.all(out[:, :4] == 0) and np.all(lse[:, :4] == sinks[:, None])


def test_minus_inf_sink_is_no_sink(rng):
    q, k, v = (rng.standard_normal((2, 5, 8)) for _ in range(3))
    plain, plain_lse = cufuse.attention(q, k, v, causal=True, return_lse=True)
    out, lse = cufuse.attention(q, k, v, causal=True, return_lse=True, sinks=np.float32([-np.inf]))
    np.testing.assert_array_equal(out, plain)
    np.testing.assert_array_equal(lse, plain_lse)


def test_enable_gqa_takes_query_heads(rng):
    q = rng.standard_normal((2, 8, 3, 16))
    k, v = (rng.standard_normal((2, 2, 9, 16)) for _ in range(2))
    sinks = rng.standard_normal(8).astype(np.float32)
    out, lse = cufuse.attention(q, k, v, enable_gqa=True, causal=True, sinks=sinks, return_lse=True)
    # query head h uses KV head h // 4 and sink h
    expected, expected_lse = naive(q, np.repeat(k, 4, axis=1), np.repeat(v, 4, axis=1), sinks, causal=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_inputs(rng, dtype):
    q, k, v = (rng.standard_normal((2, 4, 8)).astype(dtype) for _ in range(3))
    sinks = np.float32([1.0, -1.0])
    out, lse = cufuse.attention(q, k, v, sinks=sinks, return_lse=True)
    expected, expected_lse = naive(q, k, v, sinks)
    assert out.dtype == dtype and lse.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(lse, expected_lse, rtol=1e-6)


BAD = [  # (sinks, error, message)
    (np.float64([1.0, 2.0]), TypeError, "expected dtype float32, got float64"),
    (np.float16([1.0, 2.0]), TypeError, "expected dtype float32"),
    ([1.0, 2.0], TypeError, "expected dtype float32"),  # an array-like converts to float64: refused
    (np.zeros((2, 1), np.float32), ValueError, "expected a 1-D array"),
    (np.float32(1.0), ValueError, "expected a 1-D array"),
    (np.zeros(0, np.float32), ValueError, "expected a length >= 1 dividing q's 6 batch items"),
    (np.zeros(4, np.float32), ValueError, "expected a length >= 1 dividing q's 6 batch items"),
    (np.zeros(12, np.float32)[::2], ValueError, "expected a contiguous array"),
]


@pytest.mark.parametrize("sinks, error, message", BAD)
def test_bad_sinks_name_the_argument(rng, sinks, error, message):
    q, k, v = (rng.standard_normal((2, 3, 4, 8)) for _ in range(3))
    with pytest.raises(error, match=f"attention: argument 'sinks' {message}"):
        cufuse.attention(q, k, v, sinks=sinks)


def test_bad_sinks_broadcast_q_and_paged(rng):
    q = rng.standard_normal((2, 1, 4, 8))  # q broadcast over k's heads: no query head per item
    k = rng.standard_normal((2, 3, 4, 8))
    with pytest.raises(ValueError, match="attention: argument 'sinks' expected q's leading dims"):
        cufuse.attention(q, k, k, sinks=np.float32([1.0, 2.0]))
    cufuse.attention(q, k, k, sinks=np.float32([1.0]))  # one sink: every item alike
    k_pages = np.zeros((2, 1, 4, 8))
    with pytest.raises(ValueError, match="attention_paged: argument 'sinks' expected a length >= 1 dividing q's 4"):
        cufuse.attention_paged(np.zeros((1, 4, 1, 8)), k_pages, k_pages, [[0, 1]], [3], sinks=np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="attention_paged: argument 'sinks' expected dtype float32"):
        cufuse.attention_paged(np.zeros((1, 4, 1, 8)), k_pages, k_pages, [[0, 1]], [3], sinks=np.zeros(4))


def test_paged_matches_naive(rng):
    heads_q, heads_kv, n_q, page_size = 6, 2, 3, 4
    lengths = [9, 0, 2]  # an empty sequence; Nq > length: rows without keys
    k_pages, v_pages = (rng.standard_normal((8, heads_kv, page_size, 8)) for _ in range(2))
    table = np.int32([[5, 1, 7], [0, 0, 0], [3, 0, 0]])
    q = rng.standard_normal((3, heads_q, n_q, 8))
    sinks = (2 * rng.standard_normal(3)).astype(np.float32)  # H = 3 divides Hq: head h takes sinks[h % 3]
    out, lse = cufuse.attention_paged(q, k_pages, v_pages, table, np.int32(lengths), sinks=sinks, return_lse=True,
                                      window=(5, None))
    ref, ref_lse = reference.attention_paged(q, k_pages, v_pages, table, lengths, sinks=sinks, return_lse=True,
                                             window=(5, None), tile=2)
    for b, length in enumerate(lengths):
        keys, values = (reference.gather_pages(p, table[b], length) for p in (k_pages, v_pages))
        group = heads_q // heads_kv
        expected, expected_lse = naive(q[b], np.repeat(keys, group, axis=0), np.repeat(values, group, axis=0), sinks,
                                       causal=True, window=(5, None))
        np.testing.assert_allclose(out[b], expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse[b], expected_lse, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ref[b], expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ref_lse[b], expected_lse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"window": (3, 2)}, {"causal": True, "window": (4, None)}])
def test_dask_keys_over_chunks(rng, kwargs):
    da = pytest.importorskip("dask.array")
    import cufuse.dask

    q = rng.standard_normal((2, 4, 13, 8))  # Nq > Nk: rows without keys under causal
    k, v = (rng.standard_normal((2, 4, 9, 8)) for _ in range(2))
    sinks = (2 * rng.standard_normal(4)).astype(np.float32)
    out, lse = cufuse.dask.attention(da.from_array(q, chunks=(1, 2, 5, 8)), da.from_array(k, chunks=(2, 1, 3, 8)),
                                     da.from_array(v, chunks=(2, 1, 4, 8)), sinks=sinks, return_lse=True, **kwargs)
    expected, expected_lse = naive(q, k, v, sinks, **kwargs)
    np.testing.assert_allclose(out.compute(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse.compute(), expected_lse, rtol=1e-12, atol=1e-12)


def test_dask_enable_gqa_and_no_batch(rng):
    da = pytest.importorskip("dask.array")
    import cufuse.dask

    q = rng.standard_normal((2, 6, 5, 8))
    k, v = (rng.standard_normal((2, 2, 7, 8)) for _ in range(2))
    sinks = rng.standard_normal(6).astype(np.float32)
    out, lse = cufuse.dask.attention(da.from_array(q, chunks=(1, 3, 2, 8)), da.from_array(k, chunks=(1, 1, 3, 8)),
                                     da.from_array(v, chunks=(1, 1, 3, 8)), sinks=sinks, enable_gqa=True,
                                     causal=True, return_lse=True)
    expected, expected_lse = cufuse.attention(q, k, v, sinks=sinks, enable_gqa=True, causal=True, return_lse=True)
    np.testing.assert_allclose(out.compute(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse.compute(), expected_lse, rtol=1e-12, atol=1e-12)
    out = cufuse.dask.attention(da.from_array(q[0, 0], chunks=(2, 8)), da.from_array(k[0, 0], chunks=(3, 8)),
                                da.from_array(v[0, 0], chunks=(3, 8)), sinks=sinks[:1])
    np.testing.assert_allclose(out.compute(), naive(q[0, 0], k[0, 0], v[0, 0], sinks[:1])[0], rtol=1e-12, atol=1e-12)
    out = cufuse.dask.attention(q, k, v, sinks=da.from_array(sinks, chunks=2), enable_gqa=True, causal=True)
    np.testing.assert_allclose(out.compute(), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="cufuse.dask.attention: argument 'sinks' expected dtype float32"):
        cufuse.dask.attention(da.from_array(q), da.from_array(q), da.from_array(q), sinks=np.zeros(6))


VARIANTS = [  # (config, dtype, n_q, device)
    (SimtRows(), np.dtype(np.float32), 40, A100),
    (FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2, splits=2, keys_per_split=256), F16, 40, A100),
    (DecodeTile(head_dim=64, warps=4, unroll=4, splits=2, keys_per_split=256), F16, 1, A100),
    (FlashWgmmaTile(head_dim=64, warpgroups=2, block_n=64, stages=2), F16, 200, H200),
    (FlashWgmmaTile(head_dim=64, warpgroups=2, block_n=64, stages=2, tma=True), F16, 200, H200),
]


@pytest.mark.parametrize("config, dtype, n_q, dev", VARIANTS, ids=lambda x: type(x).__name__)
def test_plans_pass_sinks_last(config, dtype, n_q, dev):
    strides_q, strides_k = (4 * n_q * 64, n_q * 64, 64, 1), (4 * 500 * 64, 500 * 64, 64, 1)
    args = ((2, 4, n_q, 64), strides_q, (2, 4, 500, 64), strides_k, (2, 4, 500, 64), strides_k, dtype, False, 0.125,
            True, (True,) * 3, dev)
    forward = plan_attention(*args, config=config, sink_heads=4).launches[0]
    assert forward.args[-2:] == ("sinks", np.int32(4))
    plain = plan_attention(*args, config=config).launches[0]
    assert plain.args[-2:] == (NULL, np.int32(0)) and plain.args[:-2] == forward.args[:-2]
