"""Input checks shared by every public op.

Every error names the function, the argument, what was expected and what came,
in the form ``fn: argument 'x' expected ..., got ...``.
"""
from __future__ import annotations

import functools
import numbers
import operator

import numpy as np

from .dtypes import FLOAT_DTYPES, dtype_name, is_supported_float

try:  # numpy >= 1.25
    from numpy.exceptions import AxisError
except ImportError:  # pragma: no cover
    from numpy import AxisError

_FLOAT_NAMES = "float16, bfloat16, float32 or float64"


@functools.cache
def _cupy():
    """cupy, or None where it is not installed (looked up once: every call checks its inputs)."""
    try:
        import cupy
    except ImportError:
        return None
    return cupy


_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged: memory a CUDA kernel can read


def is_cuda_resident(value) -> bool:
    """Whether ``value`` is a GPU array of another library (PyTorch, JAX, Numba, ...) that
    CuPy can take zero-copy: it exposes ``__cuda_array_interface__``, or ``__dlpack__`` with a
    CUDA device."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    device = getattr(value, "__dlpack_device__", None)
    if device is None or not hasattr(value, "__dlpack__"):
        return False
    try:
        return int(device()[0]) in _DLPACK_CUDA
    except Exception:  # a broken protocol: not a CUDA array we can take
        return False


def describe(value) -> str:
    """Short description of what the caller passed, for error messages."""
    if isinstance(value, np.ndarray):
        return f"numpy.ndarray of dtype {dtype_name(value.dtype)} and shape {value.shape}"
    cp = _cupy()
    if cp is not None and isinstance(value, cp.ndarray):
        return f"cupy.ndarray of dtype {dtype_name(value.dtype)} and shape {value.shape}"
    kind = type(value)
    if isinstance(getattr(value, "shape", None), tuple) and hasattr(value, "dtype"):  # Dask, PyTorch, ...
        parts = kind.__module__.split(".")
        public = [p for p in parts[:next((i for i, p in enumerate(parts) if p.startswith("_") or p == "core"),
                                          len(parts))]] or parts[:1]  # dask.array.core: dask.array
        return f"{'.'.join(public)}.{kind.__name__} of dtype {value.dtype} and shape {value.shape}"
    return kind.__name__


def as_arrays(fn: str, *, optional: tuple = (), **values):
    """``(xp, arrays)``: the module that runs the call and its arrays by name.

    numpy runs NumPy arrays and array-likes (lists, tuples, scalars, objects with
    ``__array__``: converted with ``numpy.asarray``, as SciPy does); cupy runs CuPy arrays and
    GPU arrays of other libraries (``__cuda_array_interface__`` or a CUDA ``__dlpack__``:
    PyTorch, JAX, Numba), taken zero-copy as CuPy views. The arguments named in ``optional``
    may be None. A call mixing host and GPU inputs is a TypeError naming them; GPU inputs on
    different devices are a ValueError.
    """
    if all(type(value) is np.ndarray or (value is None and name in optional) for name, value in values.items()):
        return np, values  # NumPy arrays only (the common host call): nothing to convert or compare
    cp = _cupy()
    arrays, on_gpu = {}, {}
    for name, value in values.items():
        if value is None and name in optional:
            arrays[name] = None
            continue
        if isinstance(value, np.ndarray):
            array, gpu = value, False
        elif cp is not None and isinstance(value, cp.ndarray):
            array, gpu = value, True
        elif is_cuda_resident(value):
            if cp is None:
                raise TypeError(f"{fn}: argument '{name}' is a GPU array ({type(value).__name__}), which needs CuPy: "
                                f"cufuse's extra 'cuda13' or 'cuda12' (from a clone: pip install -e \".[cuda13]\")")
            array, gpu = _from_cuda(cp, fn, name, value), True
        else:
            array, gpu = _from_host(fn, name, value), False
        arrays[name], on_gpu[name] = array, gpu
    if len(set(on_gpu.values())) > 1:
        listing = ", ".join(f"'{n}' {'on the GPU' if g else 'on the host'}" for n, g in on_gpu.items())
        raise TypeError(f"{fn}: arguments must all be host arrays (NumPy, array-likes) or all GPU arrays, got {listing}")
    if not any(on_gpu.values()):
        return np, arrays
    devices = {name: arr.device.id for name, arr in arrays.items() if arr is not None}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"'{n}' on device {d}" for n, d in devices.items())
        raise ValueError(f"{fn}: arguments must be on one device, got {listing}")
    return cp, arrays


def _from_cuda(cp, fn, name, value):
    """CuPy's zero-copy view of a GPU array: through DLPack where the object has it (its
    dtype codes name bfloat16, which ``__cuda_array_interface__`` cannot), else through
    ``__cuda_array_interface__`` (Numba)."""
    problem = None
    if hasattr(value, "__dlpack__"):
        try:
            return cp.from_dlpack(value)
        except Exception as exc:  # e.g. a device DLPack cannot describe: the interface may still do
            problem = exc
    if hasattr(value, "__cuda_array_interface__"):
        try:
            return cp.asarray(value)
        except Exception as exc:
            problem = exc
    raise TypeError(f"{fn}: argument '{name}' expected a GPU array CuPy can view without a copy, got "
                    f"{type(value).__name__} ({type(problem).__name__}: {problem})")


def _from_host(fn, name, value):
    try:
        if not hasattr(value, "__array__") and hasattr(value, "__dlpack__"):
            array = np.from_dlpack(value)  # a host array of another library, without a copy
        else:
            array = np.asarray(value)
    except Exception as exc:
        raise TypeError(f"{fn}: argument '{name}' expected an array or an array-like, got {describe(value)} "
                        f"({type(exc).__name__}: {exc})") from None
    if array.dtype == object:
        raise TypeError(f"{fn}: argument '{name}' expected an array or an array-like of numbers, got {describe(value)}")
    return array


def require_bool(fn: str, name: str, value) -> bool:
    """``bool(value)``, as SciPy takes flags (1, np.True_, a one-element array). A string is
    refused (TypeError: 'no' would be True); an object without an unambiguous truth value (an
    array of several elements) raises the error ``bool`` raises, naming the argument."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{fn}: argument '{name}' expected a bool (or a value with a truth value, not a string), "
                        f"got {value!r}")
    try:
        return bool(value)
    except Exception as exc:
        error = ValueError if isinstance(exc, ValueError) else TypeError
        raise error(f"{fn}: argument '{name}' expected a bool (or a value with an unambiguous truth value), got "
                    f"{describe(value)} ({exc})") from None


def require_finite_real(fn: str, name: str, value) -> float:
    """``value`` as a float: a real number (bool refused, else TypeError) that is finite (else
    ValueError)."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: argument '{name}' expected None or a finite real number, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{fn}: argument '{name}' expected None or a finite real number, got {value!r}")
    return float(value)


def require_writable(fn: str, name: str, value) -> None:
    """An argument written in place must be an array the caller holds: a writeable NumPy
    array, or a GPU array (CuPy, or one CuPy views without a copy). Anything converted on the
    way in (a list, a read-only array) is a TypeError: the write would be lost."""
    if isinstance(value, np.ndarray):
        if not value.flags.writeable:
            raise TypeError(f"{fn}: argument '{name}' is written in place and expected a writeable array, "
                            f"got a read-only {describe(value)}")
        return
    cp = _cupy()
    if (cp is not None and isinstance(value, cp.ndarray)) or is_cuda_resident(value):
        return
    raise TypeError(f"{fn}: argument '{name}' is written in place and expected a NumPy or GPU array, got "
                    f"{describe(value)} (a converted copy would be written and lost)")


def as_index_array(fn: str, name: str, value):
    """An integer index argument (``block_table``, ``seq_lens``) given as an array-like (a
    list, a tuple): converted to int32 when every value fits, else a ValueError. Arrays (NumPy,
    GPU) pass as they are: their dtype is checked where they are used."""
    cp = _cupy()
    if value is None or isinstance(value, np.ndarray) or (cp is not None and isinstance(value, cp.ndarray)):
        return value
    if is_cuda_resident(value):
        return value
    array = _from_host(fn, name, value)
    if array.size == 0:
        return array.astype(np.int32)
    if array.dtype.kind not in "iu":
        return array  # the dtype check where it is used names what came
    info = np.iinfo(np.int32)
    low, high = int(array.min()), int(array.max())
    if low < info.min or high > info.max:
        raise ValueError(f"{fn}: argument '{name}' expected int32 values (from {info.min} to {info.max}), got "
                         f"values from {low} to {high}")
    return array.astype(np.int32)


def require_window(fn: str, window):
    """An attention ``window``: None, or a (left, right) pair of None or non-negative ints,
    returned as a tuple."""
    if window is None:
        return None
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"{fn}: argument 'window' expected None or a (left, right) pair, got {window!r}")
    for side in window:
        if side is not None and (not isinstance(side, numbers.Integral) or isinstance(side, (bool, np.bool_))
                                 or side < 0):
            raise ValueError(f"{fn}: argument 'window' expected None or non-negative ints on each side, "
                             f"got {window!r}")
    return tuple(None if side is None else int(side) for side in window)


def require_softcap(fn: str, softcap):
    """An attention ``softcap``: None or a positive finite real, as a float."""
    if softcap is None:
        return None
    softcap = require_finite_real(fn, "softcap", softcap)
    if softcap <= 0:
        raise ValueError(f"{fn}: argument 'softcap' expected None or a positive number, got {softcap!r}")
    return softcap


def check_config(fn: str, config, classes: tuple):
    """``config`` must be None or an instance of one of the op's variant ``classes`` (it picks
    a GPU kernel; the NumPy path checks it and ignores it)."""
    if config is not None and not isinstance(config, classes):
        names = ", ".join(c.__name__ for c in classes)
        raise TypeError(f"{fn}: argument 'config' expected None or one of {names}, got {config!r}")
    return config


def require_float(fn: str, name: str, arr) -> None:
    """TypeError unless arr has one of the four supported float dtypes."""
    if not is_supported_float(arr.dtype):
        raise TypeError(
            f"{fn}: argument '{name}' expected dtype {_FLOAT_NAMES}, got {dtype_name(arr.dtype)}"
        )


def require_same_dtype(fn: str, ref_name: str, ref, **others) -> None:
    for name, arr in others.items():
        if arr is not None and arr.dtype != ref.dtype:
            raise TypeError(
                f"{fn}: argument '{name}' expected dtype {dtype_name(ref.dtype)} "
                f"(the dtype of '{ref_name}'), got {dtype_name(arr.dtype)}"
            )


def check_prefix_sums(fn: str, name: str, cu, n_tokens: int, total: str) -> None:
    """A host prefix sum (``cu_seqlens_*``, NumPy): starts at 0, never decreases, ends at the
    token count ``n_tokens`` (called ``total`` in the message)."""
    if cu[0] != 0:
        raise ValueError(f"{fn}: argument '{name}' expected 0 first, got {int(cu[0])}")
    drops = np.flatnonzero(np.diff(cu) < 0)
    if drops.size:
        at = int(drops[0])
        raise ValueError(f"{fn}: argument '{name}' expected non-decreasing values, got {int(cu[at])} then "
                         f"{int(cu[at + 1])} at index {at}")
    if cu[-1] != n_tokens:
        raise ValueError(f"{fn}: argument '{name}' expected {n_tokens} last ({total}, the token count), "
                         f"got {int(cu[-1])}")


def require_ndim(fn: str, name: str, arr, *, at_least: int = 0, exactly: int | None = None) -> None:
    if exactly is not None and arr.ndim != exactly:
        raise ValueError(f"{fn}: argument '{name}' expected a {exactly}-D array, got shape {arr.shape}")
    if arr.ndim < at_least:
        raise ValueError(
            f"{fn}: argument '{name}' expected at least {at_least} dimensions, got shape {arr.shape}"
        )


def normalize_axis(fn: str, axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints, negatives allowed) as sorted non-negative
    axes. A 0-d array takes 0, -1 and None, as SciPy does (its one element is the reduction);
    a bool is not an axis (TypeError, where ``operator.index`` would take True as 1)."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, a microsecond less than the loop below
        return (axis % ndim,)
    items = axis if isinstance(axis, tuple) else (axis,)
    result = []
    for item in items:
        try:
            if isinstance(item, (bool, np.bool_)):
                raise TypeError
            index = operator.index(item)
        except TypeError:
            raise TypeError(
                f"{fn}: argument 'axis' expected None, an int or a tuple of ints, got {axis!r}"
            ) from None
        if ndim == 0:
            if index not in (0, -1):
                raise AxisError(f"{fn}: argument 'axis' expected 0, -1 or None for a 0-d array, got {axis!r}")
            continue
        if not -ndim <= index < ndim:
            raise AxisError(
                f"{fn}: argument 'axis' expected values in [{-ndim}, {ndim - 1}] for a {ndim}-D array, got {axis!r}"
            )
        result.append(index % ndim)
    if len(set(result)) != len(result):
        raise ValueError(f"{fn}: argument 'axis' expected distinct axes, got {axis!r}")
    return tuple(sorted(result))


def check_out(fn: str, out, *, shape, dtype, xp, inputs: dict):
    """Validate a caller-provided ``out``; returns it (or None when none was given).

    ``out`` must be an array of the same kind as the inputs, with exactly the result's
    shape and dtype, C-contiguous and writeable, on the inputs' device, and must not
    share memory with any input.
    """
    if out is None:
        return None
    shape = tuple(shape)
    dtype = np.dtype(dtype)
    if xp is not np and not isinstance(out, xp.ndarray) and is_cuda_resident(out):
        out = _from_cuda(xp, fn, "out", out)  # written in place through a zero-copy view
    if not isinstance(out, xp.ndarray):
        raise TypeError(f"{fn}: argument 'out' expected a {xp.__name__}.ndarray like the inputs, got {describe(out)}")
    if out.shape != shape:
        raise ValueError(f"{fn}: argument 'out' expected shape {shape}, got {out.shape}")
    if out.dtype != dtype:
        raise TypeError(f"{fn}: argument 'out' expected dtype {dtype_name(dtype)}, got {dtype_name(out.dtype)}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{fn}: argument 'out' expected a C-contiguous array, got strides {out.strides}")
    if xp is np and not out.flags.writeable:
        raise TypeError(f"{fn}: argument 'out' expected a writeable array, got a read-only one")
    if xp is not np:
        device = next((a.device.id for a in inputs.values() if a is not None), out.device.id)
        if out.device.id != device:
            raise ValueError(f"{fn}: argument 'out' expected an array on device {device}, got device {out.device.id}")
    for name, arr in inputs.items():
        if arr is not None and out.size and arr.size and xp.may_share_memory(out, arr):
            raise ValueError(f"{fn}: argument 'out' must not overlap input '{name}', got a view sharing its memory")
    return out


__all__ = [
    "AxisError",
    "FLOAT_DTYPES",
    "as_arrays",
    "as_index_array",
    "check_config",
    "is_cuda_resident",
    "require_bool",
    "check_out",
    "describe",
    "normalize_axis",
    "require_float",
    "require_ndim",
    "require_same_dtype",
    "require_sinks",
    "require_writable",
]


def require_sinks(fn: str, sinks, q_lead: tuple, batch: tuple) -> int:
    """Attention ``sinks``: a 1-D contiguous float32 array of H >= 1 logits, H dividing the
    batch items of q (its leading dims ``q_lead``, C order: item b takes ``sinks[b % H]``).
    q's leading dims must not broadcast inside the call's ``batch`` (past leading 1s), so that
    every output item has one q item, and its head. Returns H."""
    if sinks.dtype != np.float32:
        raise TypeError(f"{fn}: argument 'sinks' expected dtype float32, got {dtype_name(sinks.dtype)}")
    if sinks.ndim != 1:
        raise ValueError(f"{fn}: argument 'sinks' expected a 1-D array (one logit a query head), got shape "
                         f"{sinks.shape}")
    items = int(np.prod(q_lead, dtype=np.int64))
    heads = sinks.shape[0]
    if heads == 0 or items % heads:
        raise ValueError(f"{fn}: argument 'sinks' expected a length >= 1 dividing q's {items} batch items "
                         f"(leading dims {tuple(q_lead)}), got shape {sinks.shape}")
    if heads > 1 and sinks.strides[0] != sinks.itemsize:
        raise ValueError(f"{fn}: argument 'sinks' expected a contiguous array, got strides {sinks.strides}")
    own = tuple(q_lead)
    while own and own[0] == 1:
        own = own[1:]
    if heads > 1 and own and tuple(batch[len(batch) - len(own):]) != own:
        raise ValueError(f"{fn}: argument 'sinks' expected q's leading dims {tuple(q_lead)} not broadcast inside "
                         f"the batch {tuple(batch)} (each output item's query head), got a broadcast dim")
    return heads
