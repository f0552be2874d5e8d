"""Shared piece of the fast NumPy paths of the row reductions (softmax, log_softmax, logsumexp):
the input in the dtype it is computed in."""
from __future__ import annotations

import numpy as np

from .dtypes import is_supported_float

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


def float_input(x) -> np.ndarray:
    """x in the dtype it is computed in, as SciPy computes it: float32 and float64 as they are,
    float16 and bfloat16 as float32 (exact; the result is rounded once), integers as float64."""
    x = np.asarray(x)
    if x.dtype in _NATIVE:
        return x
    return x.astype(np.float32 if is_supported_float(x.dtype) else np.float64)
