"""fused_linear_relu over Dask arrays.

x chunked along its rows (and the weight along N): one fused call an output block
(``blockwise``), bias and ReLU in the GEMM's epilogue. K split across chunks: the partial
products of an output block (x's k-th chunk times the weight's k-th chunk, in the
accumulator dtype) are summed, then the bias and the ReLU apply once to the sum: the
epilogue cannot fuse into the GEMM there, and the partial products are unfused matmuls.
"""
from __future__ import annotations

import numbers

import numpy as np

import dask.array as da

from .. import fused_linear_relu as _fused_linear_relu
from .._core.dtypes import accumulator_dtype
from .._core.validate import require_float
from ._common import array_module, as_dask, meta

FN = "fused_linear_relu"


def fused_linear_relu(x, weight, bias=None):
    """``np.maximum(x @ weight + bias, 0)`` over a Dask array x ``(..., K)`` of NumPy or CuPy
    chunks; weight ``(K, N)`` and bias (as ``cufuse.fused_linear_relu`` takes it) Dask arrays
    or single arrays. A lazy Dask array ``(..., N)``, chunked as x's rows and the weight's N."""
    x, weight = as_dask(FN, "x", x), as_dask(FN, "weight", weight)
    require_float(FN, "x", x)
    if weight.ndim != 2 or x.ndim < 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"cufuse.dask.{FN}: argument 'weight' expected shape ({x.shape[-1] if x.ndim else 'K'}, N) "
                         f"to match x's last axis, got {weight.shape}")
    if weight.dtype != x.dtype:
        raise TypeError(f"cufuse.dask.{FN}: argument 'weight' expected dtype {x.dtype} (the dtype of 'x'), got "
                        f"{weight.dtype}")
    n = weight.shape[1]
    weight = weight.rechunk({0: x.chunks[-1]})  # K chunks of x and the weight pair up
    x_index = "".join(chr(ord("a") + i) for i in range(x.ndim - 1)) + "k"
    out_index = x_index[:-1] + "n"
    operands = [x, x_index, weight, "kn"]
    if bias is not None:
        operands += [_bias_vector(bias, n, x.dtype, x).rechunk((weight.chunks[1],)), "n"]
    return da.blockwise(_output_block, out_index, *operands, dtype=x.dtype, concatenate=False,
                        meta=meta(x, x.dtype, len(out_index)))


def _bias_vector(bias, n: int, dtype, x):
    """The bias as a Dask (N,) array: (N,), (1, N) or one value, as the eager function takes it."""
    if isinstance(bias, numbers.Real) and not isinstance(bias, bool):
        xp = array_module(x._meta)
        return da.from_array(xp.full(n, bias, dtype=dtype), chunks=n, asarray=False)
    bias = as_dask(FN, "bias", bias)
    if bias.dtype != dtype:
        raise TypeError(f"cufuse.dask.{FN}: argument 'bias' expected dtype {dtype} (the dtype of 'x'), got {bias.dtype}")
    shape = bias.shape
    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        raise ValueError(f"cufuse.dask.{FN}: argument 'bias' expected shape ({n},), (1, {n}) or one value, got {shape}")
    return da.broadcast_to(bias.reshape(-1)[:1], (n,)) if not shape or shape[-1] == 1 else bias.reshape(n)


def _output_block(x_blocks, weight_blocks, bias=None):
    if len(x_blocks) == 1:  # K whole: one fused call
        return _fused_linear_relu(x_blocks[0], weight_blocks[0], bias)
    xp = array_module(x_blocks[0])
    dtype = x_blocks[0].dtype
    acc = accumulator_dtype(dtype)
    total = sum(xp.matmul(xb.astype(acc), wb.astype(acc)) for xb, wb in zip(x_blocks, weight_blocks))
    if bias is not None:
        total = total + bias.astype(acc)
    return xp.maximum(total, 0).astype(dtype)
