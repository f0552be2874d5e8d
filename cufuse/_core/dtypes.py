"""The floating dtypes cufuse supports and their CUDA C names."""
from __future__ import annotations

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_DTYPES = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))

_CTYPES = {
    np.dtype(np.float16): "__half",
    BFLOAT16: "__nv_bfloat16",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}


def is_supported_float(dtype) -> bool:
    return np.dtype(dtype) in _CTYPES


def ctype(dtype) -> str:
    """CUDA C type name of a supported dtype, as written in template arguments."""
    return _CTYPES[np.dtype(dtype)]


def accumulator_dtype(dtype) -> np.dtype:
    """float64 for float64 input, float32 for everything narrower."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def shifted_integers(xp, x, axes, dtype, where=None):
    """Integer ``x`` less its maximum over ``axes`` (kept dims), in float ``dtype``, and that
    maximum in float64: SciPy shifts integers in their own dtype before ``exp``, so that large
    int64 values keep their differences. The difference is taken modulo 2^64 in uint64, exact
    for every entry not above the maximum (no wrap-around, unlike ``x - x.max()``). ``where``
    (broadcast with x): the entries the maximum is taken over (others give what they give)."""
    lowest = np.iinfo(x.dtype).min
    candidates = x if where is None else xp.where(where, x, xp.asarray(lowest, dtype=x.dtype))
    top = candidates.max(axis=axes, keepdims=True)
    return shifted_by(xp, x, top, dtype), top.astype(np.float64)


def shifted_by(xp, x, top, dtype):
    """``x - top`` of integer arrays (top broadcast with x, not below it), exactly, in float
    ``dtype`` (see ``shifted_integers``)."""
    with np.errstate(over="ignore"):
        gap = top.astype(np.uint64) - x.astype(np.uint64)
    return (-gap.astype(np.float64)).astype(dtype, copy=False)
