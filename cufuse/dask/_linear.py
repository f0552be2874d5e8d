"""fused_linear and fused_linear_relu over Dask arrays.

x chunked along its rows (and the weight along N): one fused call an output block
(``blockwise``), bias and activation in the GEMM's epilogue. K split across chunks: the
partial products of an output block (x's k-th chunk times the weight's k-th chunk, in the
accumulator dtype) are summed in chunk order, then the bias and the activation apply once to
the sum: the epilogue cannot fuse into the GEMM there, and the partial products are unfused
matmuls.
"""
from __future__ import annotations

import functools
import numbers

import dask.array as da

from .. import fused_linear as _fused_linear
from .. import reference
from .._core.dtypes import accumulator_dtype
from .._core.validate import require_float
from ..ops.linear.operands import activation_code, check_bias_shape
from ._common import array_module, as_dask, meta


def fused_linear(x, weight, bias=None, *, activation="relu"):
    """``activation(x @ weight + bias)`` over a Dask array x ``(..., K)`` of NumPy or CuPy
    chunks; weight ``(K, N)`` and bias (as ``cufuse.fused_linear`` takes them) Dask arrays or
    single arrays; ``activation`` as ``cufuse.fused_linear``'s. A lazy Dask array ``(..., N)``,
    chunked as x's rows and the weight's N."""
    return _linear("fused_linear", x, weight, bias, activation)


def fused_linear_relu(x, weight, bias=None):
    """``np.maximum(x @ weight + bias, 0)``: ``fused_linear(x, weight, bias, activation="relu")``."""
    return _linear("fused_linear_relu", x, weight, bias, "relu")


def _linear(fn, x, weight, bias, activation):
    qualified = f"cufuse.dask.{fn}"
    activation_code(qualified, activation)
    x, weight = as_dask(fn, "x", x), as_dask(fn, "weight", weight)
    require_float(fn, "x", x)
    if weight.ndim != 2 or x.ndim < 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{qualified}: argument 'weight' expected shape ({x.shape[-1] if x.ndim else 'K'}, N) "
                         f"to match x's last axis, got {weight.shape}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{qualified}: argument 'weight' expected dtype {x.dtype} (the dtype of 'x'), got "
                        f"{weight.dtype}")
    n = weight.shape[1]
    weight = weight.rechunk({0: x.chunks[-1]})  # K chunks of x and the weight pair up
    x_index = "".join(chr(ord("a") + i) for i in range(x.ndim - 1)) + "k"
    out_index = x_index[:-1] + "n"
    operands = [x, x_index, weight, "kn"]
    if bias is not None:
        operands += [_bias_vector(fn, bias, n, x.dtype, x).rechunk((weight.chunks[1],)), "n"]
    return da.blockwise(functools.partial(_output_block, activation), out_index, *operands, dtype=x.dtype,
                        concatenate=False, meta=meta(x, x.dtype, len(out_index)))


def _bias_vector(fn, bias, n: int, dtype, x):
    """The bias as a Dask (N,) array: (N,), (1, N) or one value, as the eager function takes it
    (``check_bias_shape``)."""
    if isinstance(bias, numbers.Real) and not isinstance(bias, bool):
        xp = array_module(x._meta)
        return da.from_array(xp.full(n, bias, dtype=dtype), chunks=n, asarray=False)
    bias = as_dask(fn, "bias", bias)
    if bias.dtype != dtype:
        raise TypeError(f"cufuse.dask.{fn}: argument 'bias' expected dtype {dtype} (the dtype of 'x'), got "
                        f"{bias.dtype}")
    if check_bias_shape(f"cufuse.dask.{fn}", bias.shape, n):
        return bias.reshape(n)
    return da.broadcast_to(bias.reshape(-1)[:1], (n,))


def _output_block(activation, x_blocks, weight_blocks, bias=None):
    if len(x_blocks) == 1:  # K whole: one fused call
        return _fused_linear(x_blocks[0], weight_blocks[0], bias, activation=activation)
    xp = array_module(x_blocks[0])
    dtype = x_blocks[0].dtype
    acc = accumulator_dtype(dtype)
    total = sum(xp.matmul(xb.astype(acc), wb.astype(acc)) for xb, wb in zip(x_blocks, weight_blocks))
    if bias is not None:
        total = total + bias.astype(acc)
    return _activate(xp, activation, total).astype(dtype)


def _activate(xp, activation, total):
    """``activation`` on a block's K sum, in its array module and dtype: the oracle's formulas
    (``reference.activation_formula``; erf from cupyx on CuPy)."""
    if xp.__name__ == "numpy":
        return reference.apply_activation(activation, total).astype(total.dtype)
    from cupyx.scipy.special import erf

    return reference.activation_formula(activation, total, erf)
