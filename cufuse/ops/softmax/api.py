"""softmax / log_softmax with the semantics of ``scipy.special``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the vectorised
path of ``numpy_path`` (SciPy's algorithm in SciPy's precision; the tiled oracle
``cufuse.reference`` checks it); CuPy inputs run the kernels of ``kernels/softmax/``.

GPU path. x is viewed as (outer, length, inner) (``problem.collapse``): the reduced axes must
form one run of consecutive axes (size-1 axes ignored), and each of the three groups of axes
must collapse to a single stride; out is C-contiguous. Any strides work in place (negative,
transposed, sliced), with 64-bit offsets. A new out (none given) is laid out as x is, its
axes in x's memory order (NumPy's ``np.exp`` gives such results too): the reduced axis of a
transposed view is then strided over a contiguous one, the column kernels' layout. Which
kernel runs which layout: ``select`` and docs/softmax.md. Documented exceptions:

- explicit copies: when the reduced axes are not consecutive (``axis=(0, 2)`` of a 3-D
  array) or a group of axes of a view does not collapse to one stride, x is first copied
  into a C-contiguous array with the reduced axes last (``cupy.ascontiguousarray`` of a
  ``moveaxis``), the kernel writes a temporary and the result is copied into ``out``.
- integer inputs are shifted by their maximum in the integer dtype (as SciPy does) into a
  copy of the float dtype NumPy's ``np.exp`` gives them (int8 / uint8 float16, int16 / uint16
  float32, wider ones float64) first.
- rows longer than the split kernel holds on chip (H200: about 17 M float16 / 8.4 M float32
  elements) are streamed with the online rule, the tiles that fit in neither registers nor
  shared memory read a second time, most recent first (so that part of it comes from L2).
- the persistent kernels (``split.SplitConfig``, ``cols.ColsSplitConfig``) exchange their
  statistics through a scratch held per (device, stream, accumulator dtype) and grown when a
  larger one is needed (``split.split_scratch``); they leave its counters at zero, so later
  calls on that stream reuse it without a memset.

Host path (``cufuse._core.driver``): a CuPy call's signature (x's and out's ``gpu_signature``,
axis as given, config, log) is its prepared-call key; a repeated call is one dict lookup, the
overlap check of a given ``out``, a new ``out`` (in x's memory order) if none was given, and
the launch.
"""
from __future__ import annotations

import functools

import numpy as np

from ..._core.driver import Op, bound_plan, run
from ..._core.dtypes import is_supported_float, shifted_integers
from ..._core.numpy_path import deliver
from ..._core.plans import gpu_signature
from ..._core.validate import as_arrays, check_config, check_out, describe, normalize_axis
from . import numpy_path
from .plan import plan_softmax
from .select import VARIANTS


def softmax(x, axis=None, *, out=None, config=None):
    """Softmax over ``axis``: ``exp(x - max) / sum(exp(x - max))``, with ``scipy.special.softmax``'s semantics.

    Parameters
    ----------
    x : array_like
        Float16, bfloat16 (``ml_dtypes.bfloat16``), float32, float64 or integer values. NumPy arrays and
        array-likes run the NumPy path and return NumPy; GPU arrays (CuPy, PyTorch, JAX, ...) run the GPU
        kernels, zero-copy, and return CuPy.
    axis : None, int or tuple of ints, optional
        The axes reduced together as one row; None (the default) reduces the whole array. Negative axes count
        from the end; a 0-d input takes 0, -1 or None; a bool is not an axis.
    out : array, optional
        Written in place and returned: x's shape, the result dtype, C-contiguous, on x's side (a NumPy array
        for host inputs, a GPU array for GPU inputs), not overlapping x.
    config : kernel variant, optional
        Overrides the kernel configuration chosen by ``cufuse.ops.softmax.select`` (GPU only; checked and
        ignored on NumPy inputs).

    Returns
    -------
    ndarray
        The softmax, x's shape, in x's float dtype; integer inputs give the dtype ``np.exp`` gives them (int8 /
        uint8 float16, int16 / uint16 float32, wider ones float64), as SciPy. A 0-d NumPy input gives a NumPy
        scalar, as SciPy. ``out`` when it is given.

    Raises
    ------
    TypeError
        A bool x (as SciPy) or another unsupported dtype; an axis that is not None, an int or a tuple of ints;
        a ``config`` that is not a softmax variant; an ``out`` of another dtype or array type, or read-only;
        host and GPU inputs mixed.
    ValueError
        Repeated axes; an ``out`` of another shape, not C-contiguous, overlapping x or on another device; on
        the GPU, a ``config`` that cannot run this call. ``numpy.exceptions.AxisError`` (a ValueError) for an
        axis out of range.

    Notes
    -----
    Non-finite rows follow SciPy's NaN pattern: a row with NaN or +inf is NaN, an all ``-inf`` row is NaN,
    other ``-inf`` entries give 0. Integer inputs are shifted by their maximum in the integer dtype first, as
    SciPy does. Differences from SciPy (docs/scipy.md): an empty reduction gives an empty result (SciPy
    raises), and an integer row whose entries lie further apart than the dtype holds takes the exact
    difference (SciPy's ``x - x.max()`` wraps around).

    The NumPy path computes float64 and integers in float64, float32 in float32 (as SciPy does) and float16 /
    bfloat16 in float32, rounded once to the result dtype. On the GPU, x is viewed as (outer, length, inner)
    rows: any strides work in place (negative, transposed, sliced) where the reduced axes are consecutive and
    each group of axes collapses to one stride; otherwise x is first copied with the reduced axes last. A new
    result is laid out as x is (its axes in x's memory order, as ``np.exp`` gives them). Which kernel runs which
    layout: ``cufuse.ops.softmax.select`` and docs/softmax.md.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> np.round(cufuse.softmax(np.array([1.0, 2.0, 3.0])), 4)
    array([0.09  , 0.2447, 0.6652])
    >>> p = cufuse.softmax(np.array([[0.0, 0.0], [0.0, np.log(3.0)]], dtype=np.float32), axis=1)
    >>> p
    array([[0.5 , 0.5 ],
           [0.25, 0.75]], dtype=float32)
    >>> cufuse.softmax(np.array([1, 2], dtype=np.int16)).dtype
    dtype('float32')
    >>> cufuse.softmax(np.array([-np.inf, 0.0]))
    array([0., 1.])
    """
    return run(_OP, _prepared_key("softmax", x, axis, out, config), (x,), out, "softmax", x, axis, out, config, False)


def log_softmax(x, axis=None, *, out=None, config=None):
    """Log-softmax over ``axis``: ``x - max - log(sum(exp(x - max)))``, with ``scipy.special.log_softmax``'s
    semantics.

    Parameters
    ----------
    x : array_like
        Float16, bfloat16, float32, float64 or integer values; NumPy arrays and array-likes run the NumPy path,
        GPU arrays (CuPy, PyTorch, JAX, ...) the GPU kernels, as in ``softmax``.
    axis : None, int or tuple of ints, optional
        The axes reduced together as one row; None (the default) reduces the whole array.
    out : array, optional
        Written in place and returned, as in ``softmax``.
    config : kernel variant, optional
        A softmax kernel variant instead of the choice of ``cufuse.ops.softmax.select`` (GPU only; checked and
        ignored on NumPy inputs).

    Returns
    -------
    ndarray
        The log-softmax, x's shape, with ``softmax``'s result dtype (integers: the dtype ``np.exp`` gives
        them); a NumPy scalar for a 0-d NumPy input. ``out`` when it is given.

    Raises
    ------
    TypeError
        A bool x or another unsupported dtype, an axis of another type, a foreign ``config``, an ``out`` of
        another dtype or array type, or read-only (as ``softmax``).
    ValueError
        Repeated or out-of-range axes, an ``out`` of another shape, layout or device, or overlapping x; on the
        GPU, a ``config`` that cannot run this call.

    Notes
    -----
    Non-finite rows give ``scipy.special.log_softmax``'s own NaN pattern; integers are shifted by their
    maximum in the integer dtype, as SciPy does. The same kernels, layouts and documented differences from
    SciPy as ``softmax`` (docs/scipy.md): an empty reduction gives an empty result.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> np.round(cufuse.log_softmax(np.array([1.0, 2.0, 3.0])), 4)
    array([-2.4076, -1.4076, -0.4076])
    >>> lp = cufuse.log_softmax(np.array([[1.0, 2.0], [3.0, 5.0]]), axis=-1)
    >>> np.allclose(np.exp(lp).sum(axis=-1), 1.0)
    True
    """
    return run(_OP, _prepared_key("log_softmax", x, axis, out, config), (x,), out, "log_softmax", x, axis, out,
               config, True)


def result_dtype(fn: str, x) -> np.dtype:
    """x's own float dtype, or for integers the float dtype ``np.exp`` gives them (SciPy's
    result dtype); bool is refused as SciPy refuses it."""
    if is_supported_float(x.dtype):
        return x.dtype
    if x.dtype.kind in "iu":
        return np.exp(np.zeros(1, dtype=x.dtype)).dtype
    raise TypeError(
        f"{fn}: argument 'x' expected a float16, bfloat16, float32, float64 or integer array, got {describe(x)}"
    )


def _check(fn, x, axis, out, config, log):
    xp, arrays = as_arrays(fn, x=x)
    x = arrays["x"]
    dtype = result_dtype(fn, x)
    axes = normalize_axis(fn, axis, x.ndim)
    check_config(fn, config, VARIANTS)
    out = check_out(fn, out, shape=x.shape, dtype=dtype, xp=xp, inputs=arrays)
    return xp, arrays, out, (dtype, axes, config, log)


def _numpy(arrays, out, problem):
    x = arrays["x"]
    dtype, axes, _, log = problem
    if x.dtype.kind in "iu" and x.size:  # shifted in the integer dtype, as SciPy does
        x = shifted_integers(np, x, axes, np.float64)[0]
    oracle = numpy_path.log_softmax if log else numpy_path.softmax
    result = deliver(oracle(x, axes), out, dtype)
    return result[()] if x.ndim == 0 and out is None else result  # SciPy: a 0-d input gives a scalar


def _bind(call):
    """What runs the call, on x's device: x's bound plan into an out laid out as x is (none
    given), else the explicit copy; None for an empty x."""
    import cupy

    x = call.arrays["x"]
    dtype, axes, config, log = call.problem
    shape = x.shape
    if x.size == 0:
        call.outputs = (("out", shape, dtype, None),)
        return None
    if x.ndim == 0:  # SciPy's 0-d case: the one element is the whole reduction (no prepared call)
        x, axes, call.prepare = x.reshape(1), (0,), False
    if x.dtype != dtype:  # integers: shifted by their max, then np.exp's float dtype, as SciPy (no prepared call:
        x, call.prepare = shifted_integers(cupy, x, axes, dtype)[0], False  # the conversion is part of every call)
    call.arrays["x"] = x
    order = _memory_order(x) if call.out is None else None
    bound = _bound_plan(x.shape, x.strides, dtype, axes, x.data.device_id, config, log, order)
    if bound is None and order is not None:  # x's own order does not collapse: C order, if that does
        bound = _bound_plan(x.shape, x.strides, dtype, axes, x.data.device_id, config, log, None)
        order = None if bound is not None else order
    call.outputs = (("out", shape, dtype, order),)
    if bound is None:  # the explicit copy: never a prepared call
        call.prepare = False
        return functools.partial(_copied, axes, dtype, config, log)
    return bound


def _copied(axes, dtype, config, log, arrays):
    """Scattered reduced axes or a view that does not collapse: the explicit copy (the module's notes)."""
    import cupy

    x, out = arrays["x"], arrays["out"]
    trailing = tuple(range(x.ndim - len(axes), x.ndim))
    moved = cupy.ascontiguousarray(cupy.moveaxis(x, axes, trailing))
    result = cupy.empty(moved.shape, dtype=dtype)
    _bound_plan(moved.shape, moved.strides, dtype, trailing, x.data.device_id, config, log, None)(
        {"x": moved, "out": result})
    out[...] = cupy.moveaxis(result, trailing, axes)


def _memory_order(x):
    """The axes of x by decreasing stride where that is not C order, else None: the order of
    a new out, laid out as x is (NumPy's ``np.exp`` gives order 'K' results too), so that a
    transposed view reduced over its last axis is the column kernels' layout (a strided axis
    over a contiguous one) instead of strided rows. Broadcast views (a stride 0) keep C order."""
    if x.flags.c_contiguous or any(stride == 0 and size > 1 for size, stride in zip(x.shape, x.strides)):
        return None
    order = tuple(sorted(range(x.ndim), key=lambda d: (-abs(x.strides[d]), d)))
    return None if order == tuple(range(x.ndim)) else order


def _bound_plan(shape, strides, dtype, axes, device_id, config, log, order):
    """The bound plan of x's layout on a device (strides in bytes) into an out dense in
    ``order`` (None: C order), or None: the copy path. The plan sees x and out with their axes
    in ``order``, out then C-contiguous (the kernels take the same pointers)."""
    key = ("softmax-layout", shape, strides, dtype, axes, device_id, config, log, order)
    return bound_plan(key, device_id, lambda dev: _plan(shape, strides, dtype, axes, config, log, order, dev))


def _plan(shape, strides, dtype, axes, config, log, order, dev):
    if order is not None:
        shape, strides = tuple(shape[d] for d in order), tuple(strides[d] for d in order)
        axes = tuple(sorted(order.index(a) for a in axes))
    return plan_softmax(shape, tuple(s // dtype.itemsize for s in strides), dtype, axes, log, dev, config)


_OP = Op(_check, _numpy, _bind)


def _prepared_key(fn, x, axis, out, config):
    """The ``PreparedCall`` key of a call on CuPy arrays with axis None, an int or a tuple of
    ints (anything else, e.g. True == 1, is left to the full validation), else None."""
    if not (axis is None or type(axis) is int or (type(axis) is tuple and all(type(a) is int for a in axis))):
        return None
    signature = gpu_signature(x) if out is None else gpu_signature(x, out)
    return None if signature is None else (fn, signature, axis, config)
