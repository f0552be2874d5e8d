"""logsumexp with the semantics of ``scipy.special.logsumexp``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle ``cufuse.reference.logsumexp``; GPU inputs run ``kernels/logsumexp/``: one read of a
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

import numpy as np

from ... import reference
from ..._core.device import device_info
from ..._core.dtypes import BFLOAT16, is_supported_float
from ..._core.plans import PLANS, BoundPlan
from ..._core.validate import as_arrays, check_config, describe, normalize_axis, require_bool
from .plan import plan_logsumexp
from .select import VARIANTS

FN = "logsumexp"


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, config=None):
    """``log(sum(b * exp(a)))`` over ``axis`` (None: every element), computed stably.

    Exactly ``scipy.special.logsumexp``: ``axis`` None, an int or a tuple of ints; ``b``
    weights broadcastable with ``a`` (zero weights drop their entries, negative ones need
    ``return_sign=True`` for a negative sum, else NaN); ``keepdims``; ``return_sign=True``
    returns ``(value, sign)`` with sign +1, -1, 0 or NaN; non-finite rows as SciPy gives them.
    The result dtype is a's float dtype (integers: the dtype ``np.exp`` gives them, as
    softmax; bool a is refused) promoted with b's (a Python scalar b does not promote).
    An empty a gives -inf with sign -1, as SciPy. GPU arrays (CuPy, PyTorch, JAX, ...) run
    the GPU kernels and return CuPy arrays; ``config`` overrides the kernel configuration
    (GPU only; checked and ignored on NumPy inputs).
    """
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
    if xp is np:
        with np.errstate(all="ignore"):
            value, sign = reference.logsumexp(a, axes, b_arr) if a.size else _empty(np, kept)
            if not return_sign:  # SciPy: a negative sum without its sign is NaN
                value = np.where(sign < 0, np.nan, value)
        value, sign = (v.reshape(final).astype(dtype)[()] for v in (value, sign))
    else:
        value, sign = _logsumexp_gpu(a, b_arr, shape, axes, kept, dtype, return_sign, config)
        value, sign = value.reshape(final), None if sign is None else sign.reshape(final)
    return (value, sign) if return_sign else value


def _broadcast_shape(a, b):
    if b is None:
        return a.shape
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{FN}: argument 'b' expected a shape broadcastable with a's {a.shape}, got {b.shape}") from None


def _empty(xp, kept):
    """SciPy's result of an empty a: -inf, sign -1 (np.sign(-inf))."""
    return xp.full(kept, -np.inf), xp.full(kept, -1.0)


def _float_of(name, arr, *, allow_bool):
    if is_supported_float(arr.dtype):
        return arr.dtype
    if arr.dtype.kind in "iu" or (allow_bool and arr.dtype.kind == "b"):
        return np.exp(np.zeros(1, dtype=arr.dtype)).dtype
    expected = "a float16, bfloat16, float32, float64 or integer array" + (" or a bool array" if allow_bool else "")
    raise TypeError(f"{FN}: argument '{name}' expected {expected}, got {describe(arr)}")


def result_dtype(a, b) -> np.dtype:
    """a's float dtype (integers: ``np.exp``'s, as softmax; bool refused) promoted with b's
    (bool weights, a mask, allowed); bfloat16 with float16 gives float32."""
    da = _float_of("a", a, allow_bool=False)
    if b is None:
        return da
    db = _float_of("b", b, allow_bool=True)
    if da == db:
        return da
    if BFLOAT16 in (da, db):
        other = db if da == BFLOAT16 else da
        return np.dtype(np.float64) if other == np.float64 else np.dtype(np.float32)
    return np.result_type(da, db)


def _logsumexp_gpu(a, b, shape, axes, kept, dtype, return_sign, config):
    import cupy

    with a.device:
        if a.dtype != dtype:
            a = a.astype(dtype)
        if b is not None and b.dtype != dtype:
            b = b.astype(dtype)
        a = cupy.broadcast_to(a, shape)
        b = None if b is None else cupy.broadcast_to(b, shape)
        rows = int(np.prod(kept, dtype=np.int64))
        value = cupy.empty(rows, dtype=dtype)
        sign = cupy.empty(rows, dtype=dtype) if return_sign else None
        if a.size == 0:
            value.fill(-np.inf)
            if sign is not None:
                sign.fill(-1)
            return value, sign
        bound = _bound_plan(a, b, axes, dtype, config)
        if bound is None:  # scattered reduced axes or a view that does not collapse: copies
            trailing = tuple(range(a.ndim - len(axes), a.ndim))
            a = cupy.ascontiguousarray(cupy.moveaxis(a, axes, trailing))
            b = None if b is None else cupy.ascontiguousarray(cupy.moveaxis(b, axes, trailing))
            axes = trailing
            bound = _bound_plan(a, b, axes, dtype, config)
        bound({"a": a, "b": b, "value": value, "sign": sign})
        return value, sign


def _bound_plan(a, b, axes, dtype, config):
    itemsize = dtype.itemsize
    strides = tuple(s // itemsize for s in a.strides)
    b_strides = None if b is None else tuple(s // itemsize for s in b.strides)
    aligned = a.data.ptr % 16 == 0
    key = ("logsumexp", a.shape, strides, b_strides, dtype, axes, aligned, a.device.id, config)
    bound = PLANS.get(key)
    if bound is None:
        dev = device_info(a.device.id)
        plan = plan_logsumexp(a.shape, strides, b_strides, dtype, axes, aligned, dev, config)
        bound = PLANS.put(key, _COPY if plan is None else BoundPlan(plan, dev))
    return None if bound is _COPY else bound


_COPY = "copy"  # a layout that does not collapse: the explicit-copy path
