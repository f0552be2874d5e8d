"""cufuse.dask against the float64 reference, on NumPy chunks with the synchronous scheduler
(CPU, everywhere) and on CuPy chunks (GPU): rows split into 1, 2, 3 and 7 unequal chunks,
non-finite rows across chunk borders, keys split unevenly with causal masks (a chunk whose
queries see no key), K split for linear, grouped-query heads, and the results' chunks, dtype
and meta."""
from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import cufuse  # noqa: E402
import cufuse.dask as cd  # noqa: E402
from cufuse import reference  # noqa: E402

SPLITS = {1: (45,), 2: (20, 25), 3: (7, 30, 8), 7: (1, 9, 3, 12, 5, 8, 7)}


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def rows_with_non_finite(rng, rows=6, length=45):
    x = rng.standard_normal((rows, length))
    x[1, [3, 21, 40]] = -np.inf  # -inf entries in several chunks
    x[2, :] = -np.inf  # a row of -inf
    x[3, 29] = np.nan
    x[4, 44] = np.inf
    return x


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("parts", sorted(SPLITS))
def test_softmax_rows_across_chunks(rng, log, parts):
    x = rows_with_non_finite(rng)
    dx = da.from_array(x, chunks=((2, 4), SPLITS[parts]))
    fn, oracle = (cd.log_softmax, reference.log_softmax) if log else (cd.softmax, reference.softmax)
    result = fn(dx, axis=1)
    assert result.chunks == dx.chunks and result.dtype == np.float64 and isinstance(result._meta, np.ndarray)
    np.testing.assert_allclose(result.compute(), oracle(x, 1), rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_softmax_every_axis_form(rng, dtype):
    x = rng.standard_normal((10, 12, 14)).astype(dtype)
    dx = da.from_array(x, chunks=(3, (5, 7), (2, 12)))
    for axis in (0, 1, 2, (0, 2), (1, 2), None, -1):
        got = cd.softmax(dx, axis=axis).compute()
        assert got.dtype == dtype
        expected = reference.softmax(x.astype(np.float64), axis if axis is not None else (0, 1, 2))
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-3 if dtype == np.float16 else 1e-5,
                                   atol=1e-6)


def test_softmax_whole_rows_is_one_call_a_chunk(rng):
    x = rng.standard_normal((40, 50)).astype(np.float32)
    dx = da.from_array(x, chunks=(7, 50))
    result = cd.softmax(dx, axis=1)
    assert len(dict(result.__dask_graph__())) == len(dict(dx.__dask_graph__())) + dx.numblocks[0]
    np.testing.assert_array_equal(result.compute(), cufuse.softmax(x, axis=1))


def test_softmax_integers_and_bad_input(rng):
    x = rng.integers(-3, 50, (4, 30)).astype(np.int16)
    got = cd.softmax(da.from_array(x, chunks=(2, 7)), axis=1)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.compute(), reference.softmax(x.astype(np.float64), 1), rtol=1e-6)
    top = np.iinfo(np.int64).max - rng.integers(0, 30, (4, 30))  # past 2^53: shifted in int64, as eager
    for log in (False, True):
        fn = cd.log_softmax if log else cd.softmax
        got = fn(da.from_array(top, chunks=(2, 7)), axis=1).compute()
        np.testing.assert_allclose(got, (cufuse.log_softmax if log else cufuse.softmax)(top, axis=1), rtol=1e-12,
                                   atol=1e-15)
    with pytest.raises(TypeError, match=r"cufuse.dask.softmax: argument 'x' expected a Dask array"):
        cd.softmax([1.0, 2.0])
    with pytest.raises(TypeError, match=r"^cufuse.dask.softmax: argument 'x' expected a float16, bfloat16, float32, "
                                        r"float64 or integer array, got dask.array.Array of dtype bool and shape \(3,\)"):
        cd.softmax(da.ones(3, dtype=bool))


@pytest.mark.parametrize("bias", [None, "vector", 0.5, "row"])
def test_linear_rows_and_k_across_chunks(rng, bias):
    x = rng.standard_normal((2, 30, 40))
    w = rng.standard_normal((40, 24))
    b = {"vector": rng.standard_normal(24), "row": rng.standard_normal((1, 24)), 0.5: 0.5, None: None}[bias]
    expected = reference.fused_linear_relu(x, w, None if b is None else np.broadcast_to(np.asarray(b), (1, 24))[0])
    for x_chunks, w_chunks in (((1, 7, 40), (40, 24)), ((2, 11, (9, 31)), ((9, 31), (10, 14))), ((1, 30, 5), (5, 6))):
        got = cd.fused_linear_relu(da.from_array(x, chunks=x_chunks), da.from_array(w, chunks=w_chunks), b)
        assert got.shape == (2, 30, 24) and got.dtype == np.float64
        np.testing.assert_allclose(got.compute(), expected, rtol=1e-12, atol=1e-12)


def test_linear_checks_its_inputs(rng):
    x = da.ones((4, 8))
    with pytest.raises(ValueError, match=r"argument 'weight' expected shape \(8, N\)"):
        cd.fused_linear_relu(x, da.ones((7, 3)))
    with pytest.raises(ValueError, match=r"argument 'bias' expected shape \(3,\), \(1, 3\) or one value"):
        cd.fused_linear_relu(x, da.ones((8, 3)), da.ones((4, 3)))


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "silu", "relu"])
def test_linear_activation_once_after_the_k_sum(rng, activation):
    x = rng.standard_normal((30, 40)) * 3
    w, b = rng.standard_normal((40, 24)), rng.standard_normal(24)
    expected = reference.fused_linear(x, w, b, activation=activation)
    for x_chunks, w_chunks in (((7, 40), (40, 24)), ((11, (9, 31)), ((9, 31), (10, 14)))):
        got = cd.fused_linear(da.from_array(x, chunks=x_chunks), da.from_array(w, chunks=w_chunks), b,
                              activation=activation)
        np.testing.assert_allclose(got.compute(), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cufuse.dask.fused_linear: argument 'activation'"):
        cd.fused_linear(da.from_array(x), w, activation="elu")


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", None])
def test_gated_linear_rows_and_k_across_chunks(rng, activation):
    x = rng.standard_normal((2, 15, 40)) * 2
    w_gate, w_up = rng.standard_normal((40, 24)), rng.standard_normal((40, 24))
    expected = reference.fused_gated_linear(x, w_gate, w_up, activation=activation)
    for x_chunks, w_chunks, up_chunks in (((1, 7, 40), (40, 24), (40, 24)),
                                          ((2, (4, 11), (9, 31)), ((9, 31), (10, 14)), ((20, 20), (24,)))):
        got = cd.fused_gated_linear(da.from_array(x, chunks=x_chunks), da.from_array(w_gate, chunks=w_chunks),
                                    da.from_array(w_up, chunks=up_chunks), activation=activation)
        assert got.chunks[-1] == da.from_array(w_gate, chunks=w_chunks).chunks[1]
        np.testing.assert_allclose(got.compute(), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cufuse.dask.fused_gated_linear: argument 'w_up' expected the shape"):
        cd.fused_gated_linear(da.from_array(x), w_gate, w_up[:, :20])
    with pytest.raises(TypeError, match="argument 'w_up' expected dtype float64"):
        cd.fused_gated_linear(da.from_array(x), w_gate, w_up.astype(np.float32))
    with pytest.raises(ValueError, match="cufuse.dask.fused_gated_linear: argument 'activation'"):
        cd.fused_gated_linear(da.from_array(x), w_gate, w_up, activation="elu")


def test_gated_linear_on_cupy_chunks(cp, rng):
    x = rng.standard_normal((30, 40)).astype(np.float32)
    w_gate, w_up = (rng.standard_normal((40, 24)).astype(np.float32) for _ in range(2))
    expected = reference.fused_gated_linear(x, w_gate, w_up)
    for chunks in ((7, 40), (11, (9, 31))):
        got = cd.fused_gated_linear(da.from_array(cp.asarray(x), chunks=chunks, asarray=False), cp.asarray(w_gate),
                                    cp.asarray(w_up)).compute()
        assert isinstance(got, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(got), expected, rtol=1e-4, atol=1e-4)


def test_linear_activation_on_cupy_chunks(cp, rng):
    x = rng.standard_normal((30, 40)).astype(np.float32) * 3
    w = rng.standard_normal((40, 24)).astype(np.float32)
    for chunks in ((7, 40), (11, (9, 31))):
        got = cd.fused_linear(da.from_array(cp.asarray(x), chunks=chunks, asarray=False), cp.asarray(w),
                              activation="gelu").compute()
        assert isinstance(got, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(got), reference.fused_linear(x, w, activation="gelu"), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("key_chunks, query_chunks", [((50,), (30,)), ((13, 20, 17), (30,)), ((5, 45), (7, 23)),
                                                      ((20, 30), (10, 11, 9))])
def test_attention_keys_and_queries_across_chunks(rng, causal, key_chunks, query_chunks):
    q, k = rng.standard_normal((2, 3, 30, 16)), rng.standard_normal((2, 3, 50, 16))
    v = rng.standard_normal((2, 3, 50, 12))
    out, lse = cd.attention(da.from_array(q, chunks=(1, 2, query_chunks, 16)), da.from_array(k, chunks=(2, 1, key_chunks, 16)),
                            da.from_array(v, chunks=(2, 3, key_chunks, 12)), causal=causal, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, causal=causal, return_lse=True)
    assert out.shape == (2, 3, 30, 12) and out.dtype == np.float64 and lse.dtype == np.float64
    np.testing.assert_allclose(out.compute(), expected, rtol=1e-12, atol=1e-13)  # float64 partials: float64 accuracy
    np.testing.assert_allclose(lse.compute(), expected_lse, rtol=1e-13, atol=1e-13)
    out32, lse32 = cd.attention(*(da.from_array(a.astype(np.float32), chunks=(1, 2, None, None)) for a in (q, k, v)),
                                causal=causal, return_lse=True)
    assert out32.dtype == lse32.dtype == np.float32
    np.testing.assert_allclose(out32.compute(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, (3, 0), (0, 4), (5, None), (None, 2), (40, 40), (0, 0)], ids=str)
@pytest.mark.parametrize("n_q, n_k", [(30, 50), (40, 20), (17, 17)])
def test_attention_window_and_softcap_across_chunks(rng, causal, window, n_q, n_k):
    """A window and a softcap over query and key chunks of every size: each block's rows see the
    band of its keys the whole's bottom-right frame gives them (blocks wholly inside, past or
    before the band, and straddling it)."""
    q, k, v = rng.standard_normal((2, n_q, 8)) * 2, rng.standard_normal((2, n_k, 8)), rng.standard_normal((2, n_k, 5))
    softcap = 3.0 if (n_q + n_k) % 2 else None
    expected, expected_lse = reference.attention(q, k, v, causal=causal, window=window, softcap=softcap, return_lse=True)
    for q_chunks, k_chunks in (((n_q,), (n_k,)), ((7, n_q - 7), (3, 11, n_k - 14)), ((1,) * 5 + (n_q - 5,), (n_k - 1, 1))):
        out, lse = cd.attention(da.from_array(q, chunks=(1, q_chunks, 8)), da.from_array(k, chunks=(2, k_chunks, 8)),
                                da.from_array(v, chunks=(2, k_chunks, 5)), causal=causal, window=window,
                                softcap=softcap, return_lse=True)
        np.testing.assert_allclose(out.compute(), expected, rtol=1e-12, atol=1e-13)
        got_lse = lse.compute()
        assert np.array_equal(np.isneginf(got_lse), np.isneginf(expected_lse))
        np.testing.assert_allclose(got_lse, expected_lse, rtol=1e-13, atol=1e-13)


def test_attention_checks_name_cufuse_dask_and_the_callers_shapes():
    q = da.ones((1, 8, 9, 16), chunks=(1, 3, 9, 8))
    with pytest.raises(ValueError, match=r"^cufuse.dask.attention: argument 'q' expected at least 2 dims with the last "
                                         r"\(head dim\) in one chunk, got shape \(1, 8, 9, 16\)"):
        cd.attention(q, da.ones((1, 2, 5, 16)), da.ones((1, 2, 5, 16)), enable_gqa=True)
    with pytest.raises(ValueError, match=r"^cufuse.dask.attention: arguments 'q', 'k', 'v' expected leading dims "
                                         r"that broadcast .*, got \(2, 9, 16\), \(3, 5, 16\), \(3, 5, 16\)"):
        cd.attention(da.ones((2, 9, 16)), da.ones((3, 5, 16)), da.ones((3, 5, 16)))
    with pytest.raises(TypeError, match=r"^cufuse.dask.attention: argument 'k' expected dtype float64 \(the dtype of "
                                        r"'q'\), got float32"):
        cd.attention(da.ones((9, 16)), da.ones((5, 16), dtype=np.float32), da.ones((5, 16)))
    with pytest.raises(TypeError, match=r"^cufuse.dask.attention: argument 'q' expected dtype float16"):
        cd.attention(da.ones((9, 16), dtype=int), da.ones((5, 16)), da.ones((5, 16)))
    with pytest.raises(ValueError, match=r"^cufuse.dask.attention: argument 'scale' expected None or a finite real"):
        cd.attention(da.ones((9, 16)), da.ones((5, 16)), da.ones((5, 16)), scale=float("nan"))
    with pytest.raises(ValueError, match=r"^cufuse.dask.attention: argument 'window' expected None or non-negative"):
        cd.attention(da.ones((9, 16)), da.ones((5, 16)), da.ones((5, 16)), window=(-1, 2))


@pytest.mark.parametrize("axis", [1, 0, None, (0, 1), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_across_chunks_matches_scipy(rng, axis, keepdims):
    import scipy.special

    a = rows_with_non_finite(rng)
    b = rng.standard_normal(a.shape)
    b[5, :] = 0  # a row of zero weights
    b[0, :3] = 0
    for chunks in ((6, 45), (2, SPLITS[3]), (4, SPLITS[7])):
        da_a, da_b = da.from_array(a, chunks=chunks), da.from_array(b, chunks=chunks)
        with np.errstate(all="ignore"):
            want = scipy.special.logsumexp(a, axis=axis, keepdims=keepdims)
            want_signed = scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)
            want_weighted = scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims)
        got = cd.logsumexp(da_a, axis=axis, keepdims=keepdims)
        assert isinstance(got, da.Array) and got.dtype == np.float64
        np.testing.assert_allclose(got.compute(), want, rtol=1e-12, equal_nan=True)
        value, sign = cd.logsumexp(da_a, axis=axis, b=da_b, keepdims=keepdims, return_sign=True)
        np.testing.assert_allclose(value.compute(), want_signed[0], rtol=1e-12, equal_nan=True)
        np.testing.assert_array_equal(sign.compute(), want_signed[1])
        np.testing.assert_allclose(cd.logsumexp(da_a, axis=axis, b=da_b, keepdims=keepdims).compute(), want_weighted,
                                   rtol=1e-12, equal_nan=True)


def test_logsumexp_dtypes_broadcast_and_empty(rng):
    import scipy.special

    x = rng.integers(-50, 50, (5, 30)).astype(np.int8)
    got = cd.logsumexp(da.from_array(x, chunks=(2, 7)), axis=1)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.compute(), scipy.special.logsumexp(x, axis=1), rtol=1e-14)
    f16 = rng.standard_normal((5, 30)).astype(np.float16)
    got = cd.logsumexp(da.from_array(f16, chunks=(5, 7)), axis=1, b=2.0)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.compute().astype(np.float64), scipy.special.logsumexp(f16.astype(np.float64), axis=1,
                                                                                         b=2.0), rtol=1e-3)
    b = rng.standard_normal(30)
    got = cd.logsumexp(da.from_array(f16.astype(np.float64), chunks=(2, 11)), axis=1, b=da.from_array(b, chunks=13))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got.compute(), scipy.special.logsumexp(f16.astype(np.float64), axis=1, b=b),
                                   rtol=1e-12, equal_nan=True)
    empty = cd.logsumexp(da.zeros((3, 0)), axis=1)
    assert empty.shape == (3,) and np.all(empty.compute() == -np.inf)
    with pytest.raises(TypeError, match=r"^cufuse.dask.logsumexp: argument 'a' expected a float16, .*, got "
                                        r"dask.array.Array of dtype complex128 and shape \(3,\)"):
        cd.logsumexp(da.ones(3, dtype=complex))
    with pytest.raises(ValueError, match=r"^cufuse.dask.logsumexp: argument 'b' expected a shape broadcastable"):
        cd.logsumexp(da.ones((2, 3)), b=da.ones(2))


def test_without_dask_the_import_says_how_to_install_it():
    import subprocess
    import sys

    code = ("import sys; sys.modules['dask'] = None; sys.modules['dask.array'] = None\n"
            "try:\n    import cufuse.dask\nexcept ImportError as exc:\n    print(exc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=str(__import__("pathlib").Path(cufuse.__file__).parents[1]))
    assert 'pip install "cufuse[dask]"' in result.stdout, result.stdout + result.stderr


def test_attention_chunks_whose_queries_see_no_key(rng):
    """More queries than keys (bottom-right causal): the first 20 queries see nothing; the key
    chunk of the first 5 keys is seen by 5 queries only."""
    q, k, v = rng.standard_normal((40, 8)), rng.standard_normal((20, 8)), rng.standard_normal((20, 8))
    out, lse = cd.attention(da.from_array(q, chunks=(13, 8)), da.from_array(k, chunks=((5, 15), 8)),
                            da.from_array(v, chunks=((5, 15), 8)), causal=True, return_lse=True)
    expected, expected_lse = reference.attention(q, k, v, causal=True, return_lse=True)
    got = out.compute()
    assert not got[:20].any() and np.all(lse.compute()[:20] == -np.inf)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(lse.compute()[20:], expected_lse[20:], rtol=1e-5)


def test_attention_grouped_heads_broadcast_and_nan(rng):
    q = rng.standard_normal((1, 8, 9, 16))
    k, v = rng.standard_normal((1, 2, 33, 16)), rng.standard_normal((1, 2, 33, 16))
    k[0, 1, 20, 3] = np.nan  # rows of KV head 1 (query heads 4-7) are NaN
    got = cd.attention(da.from_array(q, chunks=(1, 4, 9, 16)), da.from_array(k, chunks=(1, 1, (11, 22), 16)),
                       da.from_array(v, chunks=(1, 1, (11, 22), 16)), enable_gqa=True).compute()
    expected = cufuse.attention(q, k, v, enable_gqa=True)
    assert got.shape == (1, 8, 9, 16)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert np.isnan(got[0, 4:]).all() and not np.isnan(got[0, :4]).any()


def test_cupy_chunks_on_the_gpu(cp, rng):
    x = rows_with_non_finite(rng, rows=64, length=45).astype(np.float32)
    for chunks in ((16, 45), (16, (20, 25))):
        got = cd.softmax(da.from_array(cp.asarray(x), chunks=chunks, asarray=False), axis=1)
        assert isinstance(got._meta, cp.ndarray)
        result = got.compute()
        assert isinstance(result, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(result), reference.softmax(x.astype(np.float64), 1), rtol=1e-5, atol=1e-6,
                                   equal_nan=True)
    q = rng.standard_normal((2, 4, 100, 64)).astype(np.float16)
    k = rng.standard_normal((2, 4, 300, 64)).astype(np.float16)
    out = cd.attention(*(da.from_array(cp.asarray(a), chunks=(1, 4, None, 64), asarray=False) for a in (q, k, k)),
                       causal=True).compute()
    expected = reference.attention(q, k, k, causal=True)
    np.testing.assert_allclose(cp.asnumpy(out).astype(np.float32), expected, atol=2e-3)
