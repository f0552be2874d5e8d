"""What every ``cufuse.dask`` function shares: its inputs as Dask arrays, the meta (an empty
block of the chunks' array type) of its results, and nested block lists flattened."""
from __future__ import annotations

import numpy as np

import dask.array as da  # cufuse.dask (the package) says how to install it where it is missing


def as_dask(fn: str, name: str, value):
    """``value`` as a Dask array: a Dask array as it is, a NumPy / CuPy array as one chunk."""
    if isinstance(value, da.Array):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return da.from_array(value, chunks=value.shape or (), asarray=False)
    raise TypeError(f"cufuse.dask.{fn}: argument '{name}' expected a Dask array (or a NumPy / CuPy array), "
                    f"got {type(value).__name__}")


def meta(x, dtype, ndim: int):
    """An empty array of x's chunk type (NumPy or CuPy) with ``dtype`` and ``ndim`` dims."""
    return array_module(x._meta).empty((0,) * ndim, dtype=dtype)


def array_module(block):
    """numpy or cupy: the module of a block."""
    if isinstance(block, np.ndarray):
        return np
    import cupy

    return cupy


def flatten(blocks) -> list:
    """The blocks of a nested list (Dask's ``concatenate=False`` arguments), in order."""
    if isinstance(blocks, (list, tuple)):
        return [b for part in blocks for b in flatten(part)]
    return [blocks]
