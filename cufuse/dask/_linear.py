"""fused_linear, fused_linear_relu and fused_gated_linear over Dask arrays.

x chunked along its rows (and the weights along N): one fused call an output block
(``blockwise``), bias and activation (the gated form: act(gate) * up) in the GEMM's epilogue.
K split across chunks: the partial products of an output block (x's k-th chunk times the
weight's k-th chunk, in the accumulator dtype) are summed in chunk order, then the bias and the
activation (the gate's activation and the product with up) apply once to the sums: the
epilogue cannot fuse into the GEMM there, and the partial products are unfused matmuls.
"""
from __future__ import annotations

import functools
import numbers

import dask.array as da

from .. import fused_gated_linear as _fused_gated_linear
from .. import fused_linear as _fused_linear
from .. import reference
from .._core.dtypes import accumulator_dtype
from .._core.validate import require_float
from ..ops.linear.operands import activation_code, check_bias_shape
from ._common import array_module, as_dask, meta


def fused_linear(x, weight, bias=None, *, activation=None):
    """``activation(x @ weight + bias)`` over a Dask array x of NumPy or CuPy chunks: a lazy Dask array.

    Parameters
    ----------
    x : dask.array.Array or array
        ``(..., K)``, a float dtype; a NumPy / CuPy array is one chunk.
    weight : dask.array.Array or array
        ``(K, N)``, x's dtype; rechunked along K as x's last axis.
    bias : dask.array.Array, array or number, optional
        As ``cufuse.fused_linear`` takes it: ``(N,)``, ``(1, N)`` or one value; None (the default): no bias.
    activation : {None, "relu", "gelu", "gelu_tanh", "silu"}, optional
        As ``cufuse.fused_linear``'s; None (the default) is the plain linear.

    Returns
    -------
    dask.array.Array
        Lazy ``(..., N)`` in x's dtype, chunked as x's rows and the weight's N.

    Raises
    ------
    TypeError
        x not an array or not a float; a weight or bias of another dtype than x's. Messages name
        ``cufuse.dask.fused_linear``.
    ValueError
        An unknown activation; a weight that is not ``(K, N)`` with x's K; a bias that differs from row to row.

    Notes
    -----
    x chunked along its rows (and the weights along N): one fused eager call an output block, the bias and the
    activation in the GEMM's epilogue. K split across chunks: the partial products of an output block (x's
    k-th chunk times the weight's k-th chunk, in the accumulator dtype) are summed in chunk order, then the
    bias and the activation apply once to the sums: the epilogue cannot fuse into the GEMM there, and the
    partial products are unfused matmuls.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> x = np.array([[1.0, -2.0, 0.5, 3.0], [0.5, 0.5, -1.0, 2.0]])
    >>> w = np.arange(12.0).reshape(4, 3) / 10
    >>> y = cufuse.dask.fused_linear(da.from_array(x, chunks=(1, 2)), da.from_array(w, chunks=(2, 3)), 0.5)
    >>> y.chunks  # K across two chunks: partial products summed, then the bias
    ((1, 1), (3,))
    >>> np.round(y.compute(), 4)
    array([[2.9 , 3.15, 3.4 ],
           [1.85, 2.05, 2.25]])
    >>> np.allclose(y.compute(), cufuse.fused_linear(x, w, 0.5))
    True
    """
    return _linear("fused_linear", x, weight, bias, activation)


def fused_linear_relu(x, weight, bias=None):
    """``np.maximum(x @ weight + bias, 0)`` over a Dask array x: ``fused_linear(x, weight, bias, activation="relu")``.

    Parameters
    ----------
    x : dask.array.Array or array
        ``(..., K)``, a float dtype, of NumPy or CuPy chunks.
    weight : dask.array.Array or array
        ``(K, N)``, x's dtype.
    bias : dask.array.Array, array or number, optional
        ``(N,)``, ``(1, N)`` or one value; None (the default): no bias.

    Returns
    -------
    dask.array.Array
        Lazy ``np.maximum(x @ weight + bias, 0)``, ``(..., N)`` in x's dtype, chunked as x's rows and the
        weight's N.

    Raises
    ------
    TypeError
        x not a float array; a weight or bias of another dtype (messages name ``cufuse.dask.fused_linear_relu``).
    ValueError
        A weight that is not ``(K, N)`` with x's K; a bias that differs from row to row.

    Notes
    -----
    ``cufuse.dask.fused_linear``'s blocks with the ReLU.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> x = da.from_array(np.array([[1.0, -2.0], [0.5, 0.5]]), chunks=(1, 2))
    >>> cufuse.dask.fused_linear_relu(x, np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([0.0, 1.0])).compute()
    array([[0. , 0. ],
           [1. , 1.5]])
    """
    return _linear("fused_linear_relu", x, weight, bias, "relu")


def fused_gated_linear(x, w_gate, w_up, *, activation="silu"):
    """``activation(x @ w_gate) * (x @ w_up)`` over a Dask array x of NumPy or CuPy chunks: a lazy Dask array.

    Parameters
    ----------
    x : dask.array.Array or array
        ``(..., K)``, a float dtype; a NumPy / CuPy array is one chunk.
    w_gate, w_up : dask.array.Array or array
        ``(K, N)`` each, x's dtype (w_up takes w_gate's chunks).
    activation : {"silu", "relu", "gelu", "gelu_tanh"}, optional
        As ``cufuse.fused_gated_linear``'s; "silu" by default.

    Returns
    -------
    dask.array.Array
        Lazy ``(..., N)`` in x's dtype, chunked as x's rows and w_gate's N.

    Raises
    ------
    TypeError
        x not a float array; weights of another dtype than x's. Messages name ``cufuse.dask.fused_gated_linear``.
    ValueError
        An unknown activation; weights that are not ``(K, N)`` with x's K, or of different shapes.

    Notes
    -----
    K whole in a chunk: one fused ``cufuse.fused_gated_linear`` call an output block. K across chunks: both
    products' partial sums in the accumulator dtype, in chunk order, then ``activation(gate) * up`` once.

    Examples
    --------
    >>> import numpy as np
    >>> import dask.array as da
    >>> import cufuse.dask
    >>> x = np.array([[1.0, 2.0, -1.0, 0.5]])
    >>> w_gate = np.arange(8.0).reshape(4, 2) / 8
    >>> w_up = np.ones((4, 2))
    >>> y = cufuse.dask.fused_gated_linear(da.from_array(x, chunks=(1, 2)), w_gate, w_up)
    >>> np.allclose(y.compute(), cufuse.fused_gated_linear(x, w_gate, w_up))
    True
    """
    fn = "fused_gated_linear"
    x, w_gate = _checked_operands(fn, x, "w_gate", w_gate, activation)
    _, w_up = _checked_operands(fn, x, "w_up", w_up, activation)
    if w_up.shape != w_gate.shape:
        raise ValueError(f"cufuse.dask.{fn}: argument 'w_up' expected the shape of w_gate {w_gate.shape}, got "
                         f"{w_up.shape}")
    w_up = w_up.rechunk(w_gate.chunks)
    x_index = "".join(chr(ord("a") + i) for i in range(x.ndim - 1)) + "k"
    out_index = x_index[:-1] + "n"
    return da.blockwise(functools.partial(_gated_block, activation), out_index, x, x_index, w_gate, "kn", w_up, "kn",
                        dtype=x.dtype, concatenate=False, meta=meta(x, x.dtype, len(out_index)))


def _checked_operands(fn, x, name, weight, activation):
    """x and ``weight`` as Dask arrays, checked as the eager function checks them, the weight's
    K chunks those of x (so that they pair up)."""
    qualified = f"cufuse.dask.{fn}"
    activation_code(qualified, activation)
    x, weight = as_dask(fn, "x", x), as_dask(fn, name, weight)
    require_float(qualified, "x", x)
    if weight.ndim != 2 or x.ndim < 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{qualified}: argument '{name}' expected shape ({x.shape[-1] if x.ndim else 'K'}, N) "
                         f"to match x's last axis, got {weight.shape}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{qualified}: argument '{name}' expected dtype {x.dtype} (the dtype of 'x'), got "
                        f"{weight.dtype}")
    return x, weight.rechunk({0: x.chunks[-1]})


def _linear(fn, x, weight, bias, activation):
    x, weight = _checked_operands(fn, x, "weight", weight, activation)
    n = weight.shape[1]
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
    xp, total = _k_sum(x_blocks, weight_blocks)
    if bias is not None:
        total = total + bias.astype(total.dtype)
    return _activate(xp, activation, total).astype(x_blocks[0].dtype)


def _gated_block(activation, x_blocks, gate_blocks, up_blocks):
    if len(x_blocks) == 1:  # K whole: one fused call
        return _fused_gated_linear(x_blocks[0], gate_blocks[0], up_blocks[0], activation=activation)
    xp, gate = _k_sum(x_blocks, gate_blocks)
    _, up = _k_sum(x_blocks, up_blocks)
    return (_activate(xp, activation, gate) * up).astype(x_blocks[0].dtype)


def _k_sum(x_blocks, weight_blocks):
    """(array module, the sum over K chunks of x_k @ w_k in the accumulator dtype, in chunk order)."""
    xp = array_module(x_blocks[0])
    acc = accumulator_dtype(x_blocks[0].dtype)
    return xp, sum(xp.matmul(xb.astype(acc), wb.astype(acc)) for xb, wb in zip(x_blocks, weight_blocks))


def _activate(xp, activation, total):
    """``activation`` on a block's K sum, in its array module and dtype: the oracle's formulas
    (``reference.activation_formula``; erf from cupyx on CuPy)."""
    if xp.__name__ == "numpy":
        return reference.apply_activation(activation, total).astype(total.dtype)
    from cupyx.scipy.special import erf

    return reference.activation_formula(activation, total, erf)
