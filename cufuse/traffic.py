"""Traffic model: the FLOPs and the DRAM bytes of each op, fused and unfused.

The accounting is the standard one. ``min_bytes`` reads every input once and writes
the output once: what a fused kernel can reach. ``unfused_bytes`` is what the usual
composition of separate array operations moves:

- softmax: ``max`` reads x; ``exp(x - max)`` reads x and writes e; ``sum`` reads e;
  the division reads e and writes the result. Four reads and two writes of the array,
  against one and one. (The per-row max and sum vectors are a factor ``1/row length``
  smaller and are not counted.)
- fused_linear_relu: the GEMM writes the M x N product, ``+ bias`` reads it and writes
  it again, the ReLU reads it and writes the result: four extra M x N passes.
- attention: ``q @ k^T`` writes the Nq x Nk scores, the softmax reads them and writes
  the probabilities, ``p @ v`` reads those: four extra Nq x Nk passes per head (with
  the softmax itself counted as fused, so this is the composition's lower bound).

FLOPs count a multiply-add as two. Attention counts ``2*Nq*Nk*(D + Dv)`` per head,
halved for ``causal`` (the convention of FlashAttention's benchmarks and of
``anchors-h200.json``). Softmax counts five operations per element (max, subtract,
exp, add, divide); it is bound by bytes, so its FLOPs only place it on a roofline.
"""
from __future__ import annotations

import dataclasses
import math

import numbers

import ml_dtypes  # noqa: F401  (registers the dtype name "bfloat16" with NumPy)
import numpy as np

from ._core.dtypes import FLOAT_DTYPES

SOFTMAX_FLOPS_PER_ELEMENT = 5


@dataclasses.dataclass(frozen=True)
class Traffic:
    """FLOPs and bytes of one call of an op on one shape and dtype."""

    flops: int
    min_bytes: int  # inputs read once, output written once
    unfused_bytes: int  # the unfused composition of separate array operations

    @property
    def intensity(self) -> float:
        """FLOPs per byte of the fused op (inputs and output moved once)."""
        return self.flops / self.min_bytes

    @property
    def unfused_intensity(self) -> float:
        """FLOPs per byte of the unfused composition."""
        return self.flops / self.unfused_bytes

    @property
    def saving(self) -> float:
        """How many times fewer bytes the fused op moves than the composition."""
        return self.unfused_bytes / self.min_bytes


def _itemsize(fn: str, dtype) -> int:
    """The item size of one of the four float dtypes (a dtype, a type or a name such as
    "bfloat16"), else TypeError naming the function and the argument."""
    try:
        resolved = np.dtype(dtype)  # the name "bfloat16" resolves once ml_dtypes is imported
    except TypeError:
        resolved = None
    if resolved is None or resolved not in FLOAT_DTYPES:
        raise TypeError(f"traffic.{fn}: argument 'dtype' expected float16, bfloat16, float32 or float64, got {dtype!r}")
    return resolved.itemsize


def _shape(fn: str, name: str, shape, min_ndim: int = 0) -> tuple:
    """``shape`` as a tuple of non-negative ints with at least ``min_ndim`` entries."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"traffic.{fn}: argument '{name}' expected a shape (a tuple of ints), got {shape!r}") from None
    if not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in dims):
        raise ValueError(f"traffic.{fn}: argument '{name}' expected non-negative int dimensions, got {shape!r}")
    if len(dims) < min_ndim:
        raise ValueError(f"traffic.{fn}: argument '{name}' expected at least {min_ndim} dimensions, got {shape!r}")
    return tuple(int(n) for n in dims)


def _count(shape) -> int:
    return math.prod(shape)


def softmax(shape, dtype, *, split_rows: bool = False) -> Traffic:
    """softmax / log_softmax of an array of ``shape`` (over any axes: every element is
    read and written the same number of times). ``split_rows``: the rows span several arrays
    (``cufuse.dask`` with the reduced axis in several chunks): each chunk's partial statistics
    take one read, the output pass a second read and the write, so the fused op moves three
    passes, not two (the partials themselves, a value a row and chunk, are not counted)."""
    elements = _count(_shape("softmax", "shape", shape))
    array_bytes = elements * _itemsize("softmax", dtype)
    return Traffic(
        flops=SOFTMAX_FLOPS_PER_ELEMENT * elements,
        min_bytes=(3 if split_rows else 2) * array_bytes,
        unfused_bytes=6 * array_bytes,
    )


def linear_relu(x_shape, weight_shape, dtype, *, bias: bool = True) -> Traffic:
    """fused_linear_relu of x ``(..., K)`` and weight ``(K, N)``, with or without bias."""
    x_shape = _shape("linear_relu", "x_shape", x_shape, 1)
    weight_shape = _shape("linear_relu", "weight_shape", weight_shape, 2)
    if len(weight_shape) != 2 or weight_shape[0] != x_shape[-1]:
        raise ValueError(f"traffic.linear_relu: argument 'weight_shape' expected ({x_shape[-1]}, N) to match "
                         f"x's last axis, got {weight_shape}")
    k_dim, n_dim = weight_shape
    m_dim = _count(x_shape[:-1])
    size = _itemsize("linear_relu", dtype)
    product_bytes = m_dim * n_dim * size
    min_bytes = (m_dim * k_dim + k_dim * n_dim + (n_dim if bias else 0)) * size + product_bytes
    return Traffic(
        flops=2 * m_dim * n_dim * k_dim,
        min_bytes=min_bytes,
        unfused_bytes=min_bytes + 4 * product_bytes,
    )


def attention(q_shape, k_shape, v_shape, dtype, *, causal: bool = False, return_lse: bool = False) -> Traffic:
    """attention of q ``(..., Nq, D)``, k ``(..., Nk, D)``, v ``(..., Nk, Dv)``.

    Broadcast leading dims are read once (a size-1 head axis on k and v, as in MQA/GQA,
    reads k and v once); the output has the broadcast batch.
    """
    q_shape, k_shape, v_shape = (_shape("attention", name, shape, 2) for name, shape in
                                 (("q_shape", q_shape), ("k_shape", k_shape), ("v_shape", v_shape)))
    n_q, head_dim = q_shape[-2:]
    n_k, head_dim_v = v_shape[-2:]
    if k_shape[-1] != head_dim or k_shape[-2] != n_k:
        raise ValueError(f"traffic.attention: argument 'k_shape' expected (..., {n_k}, {head_dim}) to match q's "
                         f"head dim and v's keys, got {k_shape}")
    try:
        heads = _count(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
    except ValueError:
        raise ValueError(f"traffic.attention: arguments 'q_shape', 'k_shape', 'v_shape' expected leading dims that "
                         f"broadcast, got {q_shape}, {k_shape}, {v_shape}") from None
    size = _itemsize("attention", dtype)
    inputs = (_count(q_shape) + _count(k_shape) + _count(v_shape)) * size
    lse_size = 8 if size == 8 else 4  # lse in the accumulator dtype
    output = heads * n_q * head_dim_v * size + (heads * n_q * lse_size if return_lse else 0)
    flops = 2 * heads * n_q * n_k * (head_dim + head_dim_v)
    return Traffic(
        flops=flops // 2 if causal else flops,
        min_bytes=inputs + output,
        unfused_bytes=inputs + output + 4 * heads * n_q * n_k * size,
    )
