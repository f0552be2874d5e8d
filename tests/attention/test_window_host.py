"""attention's ``window`` and ``softcap`` on the NumPy path (CPU, no GPU needed): the result
against a direct element-by-element formula and the float64 oracle, the argument rules
(``window=(None, None)`` is no window, causal caps the right side at 0, NumPy ints and
lists as sides, sides far beyond Nk), the checks (TypeError / ValueError naming the
function and the argument, as attention_paged's), and the oracle helpers of oracle.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cufuse
from cufuse import reference

from .oracle import BF16, F16, F32, naive_in_dtype


def direct(q, k, v, causal=False, scale=None, window=None, softcap=None):
    """The formula row by row on 3-D (B, N, D) inputs: query i at p = i + Nk - Nq sees key j
    iff (not causal or j <= p) and p - left <= j <= p + right; softmax of the (capped)
    scaled scores of those keys; a row that sees none is 0 with lse -inf."""
    batch, n_q, head_dim = q.shape
    n_k = k.shape[1]
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    left, right = window if window is not None else (None, None)
    out, lse = np.zeros((batch, n_q, v.shape[-1])), np.full((batch, n_q), -np.inf)
    for b in range(batch):
        for i in range(n_q):
            p = i + n_k - n_q
            seen = [j for j in range(n_k) if (not causal or j <= p) and (left is None or j >= p - left)
                    and (right is None or j <= p + right)]
            if not seen:
                continue
            s = np.array([q[b, i] @ k[b, j] for j in seen]) * scale
            if softcap is not None:
                s = softcap * np.tanh(s / softcap)
            w = np.exp(s - s.max())
            out[b, i] = w @ v[b, seen] / w.sum()
            lse[b, i] = s.max() + np.log(w.sum())
    return out, lse


# (n_q, n_k): Nq < Nk, Nq = Nk, Nq > Nk (rows before the first key)
SHAPES = [(5, 13), (9, 9), (11, 4)]
WINDOWS = [None, (0, 0), (1, 0), (3, 2), (4, None), (None, 2), (100, 100), (0, 5)]


@pytest.mark.parametrize("n_q,n_k", SHAPES)
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_numpy_path_matches_the_direct_formula(rng, n_q, n_k, window, causal):
    q, k, v = rng.standard_normal((2, n_q, 8)), rng.standard_normal((2, n_k, 8)), rng.standard_normal((2, n_k, 6))
    softcap = 2.0 if (n_q + n_k) % 2 else None  # softcap on about half the cases
    out, lse = cufuse.attention(q * 3, k, v, causal=causal, window=window, softcap=softcap, return_lse=True)
    want, want_lse = direct(q * 3, k, v, causal, None, window, softcap)
    assert out.dtype == np.float64 and lse.dtype == np.float64 and lse.shape == (2, n_q)
    np.testing.assert_allclose(out, want, atol=1e-12)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    np.testing.assert_allclose(lse[np.isfinite(want_lse)], want_lse[np.isfinite(want_lse)], rtol=1e-6, atol=1e-6)
    # rows that see no key: exactly 0, lse -inf
    assert np.all(out[np.isneginf(want_lse)] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, F16, BF16])
@pytest.mark.parametrize("window,softcap", [((7, 0), None), (None, 5.0), ((20, 3), 30.0), ((0, 0), 1.0)])
def test_numpy_path_equals_the_oracle(rng, dtype, window, softcap):
    q = rng.standard_normal((2, 3, 40, 16)).astype(dtype)
    k, v = (rng.standard_normal((2, 1, 70, 16)).astype(dtype) for _ in range(2))
    for causal in (False, True):
        out, lse = cufuse.attention(q, k, v, causal=causal, scale=0.4, window=window, softcap=softcap, return_lse=True)
        want, want_lse = reference.attention(q, k, v, causal=causal, scale=0.4, window=window, softcap=softcap,
                                             return_lse=True)
        lse_dtype = np.float64 if dtype == np.float64 else np.float32  # the accumulator's
        assert out.dtype == q.dtype and lse.dtype == lse_dtype
        np.testing.assert_array_equal(out, want.astype(dtype))
        np.testing.assert_array_equal(lse, want_lse.astype(lse_dtype))
        given = np.full(want.shape, np.nan, dtype=dtype)
        assert cufuse.attention(q, k, v, causal=causal, scale=0.4, window=window, softcap=softcap, out=given) is given
        np.testing.assert_array_equal(given, want.astype(dtype))


def test_window_and_softcap_change_the_result(rng):
    q, k, v = rng.standard_normal((30, 16)) * 3, rng.standard_normal((50, 16)), rng.standard_normal((50, 16))
    plain = cufuse.attention(q, k, v)
    assert np.abs(cufuse.attention(q, k, v, window=(5, 5)) - plain).max() > 0.1
    assert np.abs(cufuse.attention(q, k, v, softcap=1.0) - plain).max() > 0.1


def test_window_none_none_is_no_window(rng):
    q, k, v = rng.standard_normal((2, 7, 8)), rng.standard_normal((2, 12, 8)), rng.standard_normal((2, 12, 8))
    for causal in (False, True):
        plain = cufuse.attention(q, k, v, causal=causal, return_lse=True)
        for window in ((None, None), [None, None]):
            got = cufuse.attention(q, k, v, causal=causal, window=window, return_lse=True)
            np.testing.assert_array_equal(got[0], plain[0])
            np.testing.assert_array_equal(got[1], plain[1])


@pytest.mark.parametrize("left", [None, 0, 3])
def test_causal_caps_the_right_side_at_zero(rng, left):
    q, k, v = rng.standard_normal((2, 9, 8)), rng.standard_normal((2, 14, 8)), rng.standard_normal((2, 14, 8))
    capped = cufuse.attention(q, k, v, causal=True, window=(left, 0), return_lse=True)
    for right in (1, 5, 1000, None):
        got = cufuse.attention(q, k, v, causal=True, window=(left, right), return_lse=True)
        np.testing.assert_array_equal(got[0], capped[0])
        np.testing.assert_array_equal(got[1], capped[1])
    if left is None:  # (None, right) with causal is causal alone
        np.testing.assert_array_equal(capped[0], cufuse.attention(q, k, v, causal=True))


def test_window_sides_beyond_the_keys_and_numpy_ints(rng):
    q, k, v = rng.standard_normal((6, 8)), rng.standard_normal((10, 8)), rng.standard_normal((10, 8))
    np.testing.assert_array_equal(cufuse.attention(q, k, v, window=(2**40, 2**40)), cufuse.attention(q, k, v))
    np.testing.assert_array_equal(cufuse.attention(q, k, v, causal=True, window=(10**18, 0)),
                                  cufuse.attention(q, k, v, causal=True))
    want = cufuse.attention(q, k, v, window=(3, 1))
    for window in ([3, 1], (np.int64(3), np.int32(1)), (np.uint8(3), 1)):
        np.testing.assert_array_equal(cufuse.attention(q, k, v, window=window), want)
    np.testing.assert_array_equal(cufuse.attention(q, k, v, softcap=np.float32(2.5)),
                                  cufuse.attention(q, k, v, softcap=2.5))
    np.testing.assert_array_equal(cufuse.attention(q, k, v, softcap=3), cufuse.attention(q, k, v, softcap=3.0))


def test_rows_that_see_no_key_are_zero_with_lse_minus_inf(rng):
    # non-causal, Nq = 10 > Nk = 4, window (0, 0): query i at p = i - 6 sees key p only
    q, k, v = rng.standard_normal((10, 8)), rng.standard_normal((4, 8)), rng.standard_normal((4, 5))
    out, lse = cufuse.attention(q, k, v, window=(0, 0), return_lse=True)
    assert np.all(out[:6] == 0) and np.all(np.isneginf(lse[:6]))
    np.testing.assert_allclose(out[6:], v, atol=1e-15)  # one key a row: its value
    # (None, 1): rows with p + 1 < 0 see nothing
    out, lse = cufuse.attention(q, k, v, window=(None, 1), return_lse=True)
    assert np.all(out[:5] == 0) and np.all(np.isneginf(lse[:5])) and np.all(np.isfinite(lse[5:]))


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_heads_with_a_window(rng, causal):
    q = rng.standard_normal((2, 8, 5, 16))
    k, v = rng.standard_normal((2, 2, 9, 16)), rng.standard_normal((2, 2, 9, 12))
    out, lse = cufuse.attention(q, k, v, causal=causal, window=(2, 1), softcap=3.0, enable_gqa=True, return_lse=True)
    want, want_lse = reference.attention(q, np.repeat(k, 4, axis=-3), np.repeat(v, 4, axis=-3), causal=causal,
                                         window=(2, 1), softcap=3.0, return_lse=True)
    assert out.shape == (2, 8, 5, 12) and lse.shape == (2, 8, 5)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6)


# (value, error): a window that is not a pair is a TypeError, a pair with a side that is not
# a non-negative int (negative, float, bool) a ValueError: attention_paged's rules.
BAD_WINDOWS = [
    (3, TypeError), ("ab", TypeError), ((1,), TypeError), ((1, 2, 3), TypeError), ({1, 2}, TypeError),
    (np.array([1, 2]), TypeError),
    ((-1, 0), ValueError), ((0, -2), ValueError), ((None, -1), ValueError), ((2.0, 1), ValueError),
    ((True, 0), ValueError), ((0, np.bool_(False)), ValueError), (("1", 0), ValueError),
]


@pytest.mark.parametrize("window,error", BAD_WINDOWS, ids=lambda x: repr(x) if not isinstance(x, type) else x.__name__)
def test_bad_window_names_the_argument(window, error):
    q = np.ones((4, 8))
    with pytest.raises(error, match=r"^attention: argument 'window' expected "):
        cufuse.attention(q, q, q, window=window)


@pytest.mark.parametrize("window,error", BAD_WINDOWS, ids=lambda x: repr(x) if not isinstance(x, type) else x.__name__)
def test_bad_window_errors_match_attention_paged(window, error):
    q = np.ones((1, 2, 1, 8))
    pages, table, lens = np.ones((2, 2, 4, 8)), np.zeros((1, 1), np.int32), np.ones(1, np.int32)
    with pytest.raises(error) as paged:
        cufuse.attention_paged(q, pages, pages, table, lens, window=window)
    with pytest.raises(error) as dense:
        cufuse.attention(q, q, q, window=window)
    assert str(dense.value).replace("attention:", "attention_paged:", 1) == str(paged.value)


@pytest.mark.parametrize("softcap,error", [
    (0.0, ValueError), (-1.0, ValueError), (0, ValueError), (np.float32(-2.0), ValueError),
    (float("inf"), ValueError), (float("nan"), ValueError), ("5", TypeError), (True, TypeError), (1 + 2j, TypeError),
    ([5.0], TypeError), (np.array([5.0]), TypeError),
], ids=repr)
def test_bad_softcap_names_the_argument(softcap, error):
    q = np.ones((4, 8))
    with pytest.raises(error, match=r"^attention: argument 'softcap' expected "):
        cufuse.attention(q, q, q, softcap=softcap)


def test_flags_and_config_are_still_checked_with_a_window():
    q = np.ones((4, 8))
    with pytest.raises(TypeError, match=r"attention: argument 'causal' expected a bool"):
        cufuse.attention(q, q, q, causal="yes", window=(1, 1))
    with pytest.raises(TypeError, match=r"attention: argument 'config' expected None or one of"):
        cufuse.attention(q, q, q, window=(1, 1), softcap=2.0, config="mma")


# ---- the test helpers of oracle.py -----------------------------------------------------

@pytest.mark.parametrize("window,softcap", [(None, None), ((5, 3), None), (None, 5.0), ((64, 0), 30.0), ((0, 0), 2.0)])
@pytest.mark.parametrize("causal", [False, True])
def test_naive_in_dtype_follows_the_oracle(rng, window, softcap, causal):
    # Nq = 60 > Nk = 45: query i sits at p = i - 15, so the first rows see no key when causal
    # or with a bounded right side
    q = rng.standard_normal((2, 60, 32)) * 4
    k, v = rng.standard_normal((2, 45, 32)), rng.standard_normal((2, 45, 24))
    want = reference.attention(q, k, v, causal=causal, scale=0.2, window=window, softcap=softcap)
    # float32 rounding: close to the oracle; float16: further off, but the same masks
    assert np.abs(naive_in_dtype(q, k, v, causal, 0.2, F32, window, softcap) - want).max() < 1e-4
    q16, k16, v16 = (x.astype(F16) for x in (q, k, v))
    err16 = np.abs(naive_in_dtype(q16, k16, v16, causal, 0.2, F16, window, softcap)
                   - reference.attention(q16, k16, v16, causal=causal, scale=0.2, window=window, softcap=softcap)).max()
    assert err16 < 0.05
    # rows without keys are exactly zero
    visible = reference.visible_keys(np.arange(45), 60, 45, causal, window)
    if visible is not None:
        keyless = ~visible.any(axis=1)
        assert keyless.any() == (causal or (window is not None and window[1] is not None))
        assert np.all(naive_in_dtype(q, k, v, causal, 0.2, BF16, window, softcap)[:, keyless] == 0)


@pytest.mark.parametrize("n_q,n_k", [(7, 11), (11, 7), (5, 5)])
def test_naive_in_dtype_masks_as_before_without_a_window(n_q, n_k):
    # naive_in_dtype's mask is now visible_keys: with causal alone it is the former
    # bottom-right mask, and no mask at all without causal
    former = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
    assert np.array_equal(reference.visible_keys(np.arange(n_k), n_q, n_k, True, None), former)
    assert reference.visible_keys(np.arange(n_k), n_q, n_k, False, None) is None
