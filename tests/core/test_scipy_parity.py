"""cufuse's NumPy path against scipy.special: softmax, log_softmax and logsumexp over dtypes x
ranks x axes (x keepdims, weights and return_sign for logsumexp) x non-finite patterns (NaN,
+inf, -inf, rows of -inf) x empty shapes. The result's type (NumPy scalar or array), shape and
dtype must be SciPy's on the inputs as given; its NaN and infinity pattern and its values (within
the rounding of the result dtype) SciPy's on float64 copies of float16 / float32 inputs, rounded
to that dtype: cufuse computes them in float32 or float64 and rounds once, where SciPy's float16
arithmetic rounds at every step (a sum that cancels exactly can leave a residue). Where SciPy
raises, cufuse raises the same exception type. The cases cufuse answers differently on purpose
are listed once, in DIVERGENCES (docs/scipy.md gives the same list); nothing else is skipped."""
from __future__ import annotations

import itertools
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.special

import cufuse

# The documented divergences from scipy.special, by name; docs/scipy.md mirrors this list.
DIVERGENCES = {
    "empty-softmax-reduction": "softmax / log_softmax over an empty reduction return an empty result; SciPy raises "
                               "(the maximum of an empty array).",
    "integer-wrap-around": "softmax / log_softmax of an integer row whose entries lie further apart than the dtype "
                           "holds (unsigned rows with two different values, signed rows spanning more than its "
                           "maximum): SciPy's x - x.max() wraps around in the integer dtype; cufuse takes the "
                           "exact difference.",
    "empty-logsumexp-over-axes": "logsumexp of an empty array over several axes (a tuple, or None for 2 or more "
                                 "dims): SciPy 1.17 raises IndexError; cufuse gives -inf (sign -1), as over one axis.",
    "direct-fallback-overflow": "logsumexp with weights, of a row where SciPy's shifted sum fails (all weights 0, or "
                                "the weights of its largest entries sum to 0) and its fallback log(sum(b * exp(a))) "
                                "overflows exp in the dtype (an entry beyond about 709 in float64, 88 in float32, 11 "
                                "in float16): SciPy gives NaN; cufuse gives the sum's logarithm (-inf for a sum of "
                                "nothing).",
}

FLOATS = [np.float16, np.float32, np.float64]
INTEGERS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64]
SHAPES = [(), (7,), (4, 6), (2, 3, 5), (0,), (3, 0), (0, 4), (2, 0, 3)]
# |got - want| <= TOL (1 + |want|) in the result dtype: SciPy computes float16 in float16, cufuse in float32
# and rounds once, so their float16 results differ by a few units of its rounding.
TOL = {np.dtype(np.float16): 8e-3, np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-13}


def axes_of(ndim):
    """Every axis form SciPy takes for this rank: None, each axis (and -1), and pairs of axes."""
    forms = [None] + list(range(ndim)) + ([-1] if ndim else [0, -1])
    return forms + [pair for pair in itertools.combinations(range(ndim), 2)] + ([(-1, 0)] if ndim == 3 else [])


def with_pattern(x, pattern, rng):
    """x (a float array) with a non-finite pattern in some rows: NaN, +inf, -inf entries, a row
    of -inf, or +inf and -inf together."""
    x = x.copy()
    flat = x.reshape(-1)
    if flat.size == 0 or pattern == "finite":
        return x
    spots = rng.choice(flat.size, size=max(1, flat.size // 5), replace=False)
    if pattern == "all -inf":
        x[...] = -np.inf
        if x.ndim > 1:
            x[tuple(rng.integers(0, n) for n in x.shape[:-1])] = 1.5  # one row finite
        return x
    values = {"nan": [np.nan], "+inf": [np.inf], "-inf": [-np.inf], "mixed": [np.inf, -np.inf, np.nan]}[pattern]
    flat[spots] = np.resize(values, spots.size)
    return x


def inputs(dtype, shape, rng):
    """Fresh random inputs of the dtype: floats of a few units and their non-finite patterns;
    integers over a small range, and rows at the top of the dtype's range."""
    if np.dtype(dtype).kind == "f":
        base = np.asarray(rng.standard_normal(shape) * 3).astype(dtype)
        return [(p, with_pattern(base, p, rng)) for p in ("finite", "nan", "+inf", "-inf", "all -inf", "mixed")]
    info = np.iinfo(dtype)
    small = np.asarray(rng.integers(max(info.min, -40), min(info.max, 40), shape, endpoint=True)).astype(dtype)
    top = np.asarray(info.max - rng.integers(0, 30, shape)).astype(dtype)
    return [("small", small), ("top", top)]


def reduced(x, axis):
    axes = range(x.ndim) if axis is None else np.atleast_1d(axis) % max(x.ndim, 1)
    return [] if x.ndim == 0 else [int(a) for a in axes]


def divergence(fn, x, axis, b=None) -> str | None:
    """The name in DIVERGENCES of the case, or None where cufuse must give SciPy's answer."""
    axes = reduced(x, axis)
    empty_reduction = x.ndim > 0 and any(x.shape[a] == 0 for a in axes)
    if fn in ("softmax", "log_softmax"):
        if empty_reduction:
            return "empty-softmax-reduction"
        if x.dtype.kind in "iu" and x.size and x.ndim:
            spread = (np.max(x, axis=tuple(axes), keepdims=True).astype(object) - x.astype(object))
            if x.dtype.kind == "u" and (spread != 0).any() or (spread > np.iinfo(x.dtype).max).any():
                return "integer-wrap-around"
        return None
    if x.size == 0 and (axis is None and x.ndim >= 2 or isinstance(axis, tuple)):
        return "empty-logsumexp-over-axes"
    if b is not None and x.size and _fallback_overflows(np.atleast_1d(x), np.asarray(b), axis):
        return "direct-fallback-overflow"
    return None


def _fallback_overflows(a, b, axis):
    """Whether a row's largest entries with a nonzero weight have weights that sum to 0 (or it
    has none) while one of its entries overflows exp in float64 (the dtype of the values the
    sweep compares): SciPy's shifted sum divides by that 0 and its direct fallback overflows."""
    a, b = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    axes = tuple(reduced(a, axis))
    with np.errstate(all="ignore"):
        top = np.max(np.where(b != 0, a, -np.inf), axis=axes, keepdims=True)
        at_top = np.sum(np.where((b != 0) & (a == top), b, 0), axis=axes)
        overflow = np.any(a > np.log(np.finfo(np.float64).max), axis=axes)
    return bool(np.any(overflow & (at_top == 0)))


def scipy_result(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return getattr(scipy.special, fn)(*args, **kwargs)


def assert_same(got, want, where, condition=1.0):
    """got is want: type, shape, dtype, NaN and infinities, and values within the rounding of
    the dtype, ``condition`` times that for sums whose signed weights cancel."""
    assert type(got) is type(want), f"{where}: type {type(got).__name__}, SciPy {type(want).__name__}"
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{where}: {got.dtype} {got.shape}, SciPy {want.dtype} {want.shape}")
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{where}: NaN pattern\n{g}\nSciPy\n{w}"
    assert np.array_equal(np.where(np.isinf(g), g, 0), np.where(np.isinf(w), w, 0)), f"{where}: infinities"
    finite = np.isfinite(w)
    tol = TOL[want.dtype]
    err = np.abs(g[finite] - w[finite]) / (1 + np.abs(w[finite])) / np.broadcast_to(condition, w.shape)[finite]
    assert err.max(initial=0) <= tol, f"{where}: error {err.max():.3g} > {tol} (x the sum's condition)"


def widened(value):
    """A float16 / float32 array as float64 (SciPy's arithmetic then rounds once); others as they are."""
    return value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype.kind == "f" else value


def run_case(fn, call, x, axis, where, **kwargs):
    """cufuse against SciPy on one case: the same answer, or the same exception type."""
    if divergence(fn, x, axis, kwargs.get("b")) is not None:
        return
    try:
        form = scipy_result(fn, x, axis=axis, **kwargs)
    except Exception as exc:  # SciPy refuses: cufuse refuses with the same type
        with pytest.raises(type(exc)):
            call(x, axis=axis, **kwargs)
        return
    wide = {k: widened(v) for k, v in kwargs.items()}
    values = scipy_result(fn, widened(x), axis=axis, **wide)
    got = call(x, axis=axis, **kwargs)
    pairs = zip(got, form, values) if kwargs.get("return_sign") else ((got, form, values),)
    for g, f, v in pairs:
        want = np.asarray(v).astype(np.asarray(f).dtype)
        assert_same(g, want[()] if np.ndim(f) == 0 and not isinstance(f, np.ndarray) else want, where,
                    condition(x, axis, wide) if "b" in kwargs else 1.0)


def condition(x, axis, kwargs):
    """The condition number of each weighted sum, sum |b e^a| / |sum b e^a| (1 where it is not
    finite): signed weights that cancel amplify the rounding of the terms by this much."""
    kwargs = {**kwargs, "return_sign": True}
    magnitude = scipy_result("logsumexp", widened(x), axis=axis, **{**kwargs, "b": np.abs(kwargs["b"])})[0]
    value = scipy_result("logsumexp", widened(x), axis=axis, **kwargs)[0]
    with np.errstate(all="ignore"):
        ratio = np.exp(np.asarray(magnitude, dtype=np.float64) - value)
    return np.where(np.isfinite(ratio), np.maximum(ratio, 1.0), 1.0)


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [bool], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_matches_scipy(rng, fn, dtype):
    call = getattr(cufuse, fn)
    for shape in SHAPES:
        for pattern, x in inputs(dtype, shape, rng) if dtype is not bool else [("bool", rng.random(shape) < 0.5)]:
            for axis in axes_of(len(shape)):
                run_case(fn, call, x, axis, f"{fn}({pattern} {x.dtype} {shape}, axis={axis})")


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [bool], ids=lambda d: np.dtype(d).name)
def test_logsumexp_matches_scipy(rng, dtype):
    for shape in SHAPES:
        for pattern, x in inputs(dtype, shape, rng) if dtype is not bool else [("bool", rng.random(shape) < 0.5)]:
            for axis, keepdims in itertools.product(axes_of(len(shape)), (False, True)):
                where = f"logsumexp({pattern} {x.dtype} {shape}, axis={axis}, keepdims={keepdims}"
                for return_sign in (False, True):
                    run_case("logsumexp", cufuse.logsumexp, x, axis, where + ")", keepdims=keepdims,
                             return_sign=return_sign)


@pytest.mark.parametrize("a_dtype", [np.float16, np.float32, np.float64, np.int16])
def test_logsumexp_weights_match_scipy(rng, a_dtype):
    """Weights of other dtypes (promotion), zeros (dropped entries, at infinities too), negative
    ones (a negative sum: NaN, or its sign with return_sign) and broadcast shapes."""
    for shape in [(7,), (4, 6), (2, 3, 5), (3, 0)]:
        for pattern, a in inputs(a_dtype, shape, rng):
            for b_dtype, b_shape in itertools.product((np.float32, np.float64, np.int8, bool),
                                                      (shape, shape[-1:], (1,) * len(shape))):
                b = rng.standard_normal(b_shape) * 2  # signed floats: cancellation by chance only
                b[rng.random(b_shape) < 0.3] = 0
                b = (np.abs(b) if np.dtype(b_dtype).kind == "i" else b).astype(b_dtype)  # small ints cancel exactly
                for axis in axes_of(len(shape)):
                    for return_sign in (False, True):
                        run_case("logsumexp", cufuse.logsumexp, a, axis, f"logsumexp({pattern} {a.dtype} {shape}, "
                                 f"b={b.dtype} {b_shape}, axis={axis}, return_sign={return_sign})", b=b,
                                 return_sign=return_sign)


def test_divergences_are_the_documented_ones():
    """The list above and docs/scipy.md name the same divergences, and each still diverges
    (SciPy has not changed its answer)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "scipy.md").read_text()
    assert set(re.findall(r"^- `([a-z-]+)`", doc, re.M)) == set(DIVERGENCES)
    with pytest.raises(ValueError):
        scipy_result("softmax", np.zeros((3, 0)), axis=1)
    assert cufuse.softmax(np.zeros((3, 0)), axis=1).shape == (3, 0)
    x = np.array([-128, 127], dtype=np.int8)
    assert scipy_result("softmax", x)[0] > 0.5 and cufuse.softmax(x)[0] == 0.0  # SciPy's -128 - 127 wrapped to 1
    with pytest.raises(IndexError):
        scipy_result("logsumexp", np.zeros((2, 0)), axis=(0, 1))
    assert cufuse.logsumexp(np.zeros((2, 0)), axis=(0, 1)) == -np.inf
    a, b = np.array([1000.0, 1.0]), np.array([0.0, 0.0])
    assert np.isnan(scipy_result("logsumexp", a, b=b)) and cufuse.logsumexp(a, b=b) == -np.inf
    a, b = np.array([1000.0, 1000.0, 990.0]), np.array([1.0, -1.0, 1.0])  # tied maxima whose weights cancel
    assert np.isnan(scipy_result("logsumexp", a, b=b)) and cufuse.logsumexp(a, b=b) == 990.0
