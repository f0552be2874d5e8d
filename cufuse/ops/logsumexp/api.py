"""logsumexp with the semantics of ``scipy.special.logsumexp``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the vectorised
path ``numpy_path.logsumexp`` (SciPy's rules in SciPy's precision, checked against the tiled
oracle ``cufuse.reference.logsumexp``); GPU inputs run ``kernels/logsumexp/``: one read of a
(and b), one value (and sign) a row.

GPU path. a and b are broadcast together (views), then viewed as softmax's (outer, length,
inner) rows (``problem.make_problem``); out is C-contiguous. Documented exceptions:

- explicit copies: reduced axes that are not consecutive, or a group of axes of a or of b's
  broadcast view that does not collapse to one stride: a and b are first copied with the
  reduced axes last. Integer a (or b of another dtype than the result) is cast to a copy in
  the result dtype first.
- split rows and strips exchange their partial statistics through a scratch held per
  (device, stream, accumulator dtype); the kernels leave its counters at zero.
"""
from __future__ import annotations

import functools

import numpy as np

from ..._core.driver import Op, bound_plan, run
from ..._core.dtypes import BFLOAT16, is_supported_float, shifted_integers
from ..._core.validate import as_arrays, check_config, describe, normalize_axis, require_bool
from . import numpy_path
from .plan import plan_logsumexp
from .select import VARIANTS

FN = "logsumexp"


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, config=None):
    """``log(sum(b * exp(a)))`` over ``axis``, computed stably, with ``scipy.special.logsumexp``'s semantics.

    Parameters
    ----------
    a : array_like
        Float16, bfloat16, float32, float64, integer or bool values. NumPy arrays and array-likes run the
        NumPy path and return NumPy; GPU arrays (CuPy, PyTorch, JAX, ...) run the GPU kernels and return CuPy.
    axis : None, int or tuple of ints, optional
        The axes summed over; None (the default) sums every element.
    b : array_like or number, optional
        Weights broadcastable with ``a``: zero weights drop their entries; negative ones need
        ``return_sign=True`` for a negative sum (else the value is NaN). A Python scalar does not promote.
    keepdims : bool, optional
        Keep the reduced axes with size 1. Any value with a truth value (1, ``np.True_``), as SciPy.
    return_sign : bool, optional
        Return ``(value, sign)``: the logarithm of ``|sum|`` and the sign of the sum. Any value with a truth
        value, as SciPy.
    config : kernel variant, optional
        Overrides the kernel configuration chosen by ``cufuse.ops.logsumexp.select`` (GPU only; checked and
        ignored on NumPy inputs).

    Returns
    -------
    value : ndarray or scalar
        The logarithm of the sum, ``a``'s (broadcast) shape less the reduced axes (kept with ``keepdims``). Its
        dtype is a's and b's promoted as SciPy promotes them: floats as NumPy promotes them, integer or bool a
        (and b) float64. NumPy inputs reduced to 0-d give a NumPy scalar, as SciPy.
    sign : ndarray or scalar
        With ``return_sign`` only: +1, -1, 0 (a zero sum) or NaN, value's shape and dtype.

    Raises
    ------
    TypeError
        An unsupported dtype of a or b; an axis of another type; ``keepdims`` / ``return_sign`` without a truth
        value; a ``config`` that is not a logsumexp variant; host and GPU inputs mixed.
    ValueError
        A ``b`` whose shape does not broadcast with a's; repeated axes; on the GPU, a ``config`` that cannot
        run this call. ``numpy.exceptions.AxisError`` (a ValueError) for an axis out of range.

    Notes
    -----
    Non-finite rows give what SciPy gives. An empty reduction gives -inf (sign -1), as SciPy; SciPy 1.17 raises
    over several axes of an empty array, cufuse gives -inf there too. Integer a is shifted by its maximum (over
    the entries b weighs) in the integer dtype first, so large int64 values keep their differences. Where
    SciPy's shifted sum with weights fails and its fallback overflows ``exp``, SciPy gives NaN and cufuse the
    sum's logarithm. The documented differences: docs/scipy.md.

    The NumPy path computes in float64 where a or b is float64 or promotes to it, else in float32 (float32 as
    SciPy does, float16 / bfloat16 rounded once). On the GPU, a and b are broadcast together (views) and read
    once as (outer, length, inner) rows, one value (and sign) a row; reduced axes that are not consecutive,
    or a view that does not collapse, are first copied with the reduced axes last.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> a = np.array([[0.0, np.log(3.0)], [1.0, 1.0]])
    >>> np.round(cufuse.logsumexp(a, axis=1), 4)
    array([1.3863, 1.6931])
    >>> np.round(cufuse.logsumexp(a, axis=1, keepdims=True), 4)
    array([[1.3863],
           [1.6931]])
    >>> value, sign = cufuse.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -2.0]), return_sign=True)
    >>> float(np.round(value, 4)), float(sign)
    (0.0, -1.0)
    >>> float(cufuse.logsumexp(np.zeros(0)))
    -inf
    >>> cufuse.logsumexp(np.array([1, 2], dtype=np.int8)).dtype
    dtype('float64')
    """
    return run(_OP, None, (), None, a, axis, b, keepdims, return_sign, config)


def _check(a, axis, b, keepdims, return_sign, config):
    keepdims = require_bool(FN, "keepdims", keepdims)
    return_sign = require_bool(FN, "return_sign", return_sign)
    check_config(FN, config, VARIANTS)
    weak_b = b is not None and type(b) in (bool, int, float)  # a Python scalar: no promotion (NEP 50)
    xp, arrays = as_arrays(FN, optional=("b",), a=a, b=None if weak_b else b)
    a, b_arr = arrays["a"], arrays["b"]
    dtype = result_dtype(a, b_arr)
    if weak_b:
        b_arr = xp.asarray(np.asarray(b, dtype=np.float64))
    shape = _broadcast_shape(a, b_arr)
    shape = shape if len(shape) else (1,)  # SciPy: a 0-d a is one element
    axes = normalize_axis(FN, axis, len(shape))
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    final = kept if keepdims else tuple(n for d, n in enumerate(shape) if d not in axes)
    return xp, {"a": a, "b": b_arr}, None, (shape, axes, kept, final, dtype, return_sign, config)


def _numpy(arrays, out, problem):
    a, b_arr = arrays["a"], arrays["b"]
    shape, axes, kept, final, dtype, return_sign, _ = problem
    with np.errstate(all="ignore"):
        if 0 in shape:
            value, sign = _empty(np, kept)
        else:
            a, top = _shifted(np, a, b_arr, shape, axes)
            value, sign = numpy_path.logsumexp(a, axes, b_arr)
            if not isinstance(top, float):  # integer a: add its shift back
                value = value + top
            if not return_sign:  # SciPy: a negative sum without its sign is NaN
                value = np.where(sign < 0, np.nan, value)
    value, sign = (v.reshape(final).astype(dtype)[()] for v in (value, sign))
    return (value, sign) if return_sign else value


def _broadcast_shape(a, b):
    if b is None:
        return a.shape
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{FN}: argument 'b' expected a shape broadcastable with a's {a.shape}, got {b.shape}") from None


def _shifted(xp, a, b, shape, axes):
    """a (integers: less their maximum over the entries b weighs, in the integer dtype, so
    that large int64 values keep their differences) broadcast to ``shape``, and the shift to
    add to the result (kept dims; 0 for float a)."""
    a = xp.broadcast_to(a.reshape(a.shape or (1,)), shape)
    if a.dtype.kind not in "iu":
        return a, 0.0
    return shifted_integers(xp, a, axes, np.float64, where=None if b is None else b != 0)


def _empty(xp, kept):
    """SciPy's result of an empty a: -inf, sign -1 (np.sign(-inf))."""
    return xp.full(kept, -np.inf), xp.full(kept, -1.0)


def _checked_dtype(name, arr):
    if is_supported_float(arr.dtype) or arr.dtype.kind in "iub":
        return arr.dtype
    raise TypeError(f"{FN}: argument '{name}' expected a float16, bfloat16, float32, float64, integer or bool "
                    f"array, got {describe(arr)}")


def result_dtype(a, b) -> np.dtype:
    """SciPy's promotion of a and b (b a mask of bools allowed): NumPy's result type where
    one is a float (float16 with int8 float16, with int16 float32), float64 where neither is
    (SciPy's ``logsumexp`` promotes integers and bools to the default float, unlike its
    softmax); bfloat16 with float16 gives float32, with an integer what float16 would give."""
    da = _checked_dtype("a", a)
    db = da if b is None else _checked_dtype("b", b)
    if not (is_supported_float(da) or is_supported_float(db)):
        return np.dtype(np.float64)
    if da == db:
        return da
    if BFLOAT16 in (da, db):
        other = db if da == BFLOAT16 else da
        if other.kind == "b":
            return BFLOAT16
        if other.kind in "iu":  # as float16 would promote, bfloat16 in float16's place
            promoted = np.result_type(np.float16, other)
            return BFLOAT16 if promoted == np.float16 else promoted
        return np.dtype(np.float64) if other == np.float64 else np.dtype(np.float32)
    return np.result_type(da, db)


def _bind(call):
    """What runs the call, on a's device: the bound plan of a and b as the kernels read them
    (integer a shifted, both in the result dtype, b broadcast; copied with the reduced axes last
    where they do not collapse), or the fill of an empty sum."""
    import cupy

    a, b = call.arrays["a"], call.arrays["b"]
    shape, axes, _, final, dtype, return_sign, config = call.problem
    call.outputs = (("value", final, dtype, None),)
    if return_sign:
        call.outputs += (("sign", final, dtype, None),)
    else:
        call.arrays["sign"] = None  # the kernels' sign: a null pointer
    if 0 in shape:
        return _empty_sum
    a, top = _shifted(cupy, a, b, shape, axes)
    if a.dtype != dtype:
        a = a.astype(dtype)
    if b is not None and b.dtype != dtype:
        b = b.astype(dtype)
    b = None if b is None else cupy.broadcast_to(b, shape)
    bound = _bound_plan(a, b, axes, dtype, config)
    if bound is None:  # scattered reduced axes or a view that does not collapse: copies
        trailing = tuple(range(a.ndim - len(axes), a.ndim))
        a = cupy.ascontiguousarray(cupy.moveaxis(a, axes, trailing))
        b = None if b is None else cupy.ascontiguousarray(cupy.moveaxis(b, axes, trailing))
        axes = trailing
        bound = _bound_plan(a, b, axes, dtype, config)
    call.arrays.update(a=a, b=b)
    return bound if isinstance(top, float) else functools.partial(_shifted_back, bound, top)


def _empty_sum(arrays):
    """SciPy: an empty sum is -inf, sign -1."""
    arrays["value"].fill(-np.inf)
    if arrays["sign"] is not None:
        arrays["sign"].fill(-1)


def _shifted_back(bound, top, arrays):
    """Integer a's bound plan, then its shift added back."""
    bound(arrays)
    value = arrays["value"]
    value += top.reshape(value.shape).astype(value.dtype)


def _bound_plan(a, b, axes, dtype, config):
    itemsize = dtype.itemsize
    strides = tuple(s // itemsize for s in a.strides)
    b_strides = None if b is None else tuple(s // itemsize for s in b.strides)
    aligned = a.data.ptr % 16 == 0
    key = ("logsumexp", a.shape, strides, b_strides, dtype, axes, aligned, a.device.id, config)
    return bound_plan(key, a.device.id,
                      lambda dev: plan_logsumexp(a.shape, strides, b_strides, dtype, axes, aligned, dev, config))


_OP = Op(_check, _numpy, _bind)
