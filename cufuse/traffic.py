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

import ml_dtypes  # noqa: F401  (registers the dtype name "bfloat16" with NumPy)
import numpy as np

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


def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize  # the name "bfloat16" resolves once ml_dtypes is imported


def _count(shape) -> int:
    return math.prod(int(n) for n in shape)


def softmax(shape, dtype) -> Traffic:
    """softmax / log_softmax of an array of ``shape`` (over any axes: every element is
    read and written the same number of times)."""
    elements = _count(shape)
    array_bytes = elements * _itemsize(dtype)
    return Traffic(
        flops=SOFTMAX_FLOPS_PER_ELEMENT * elements,
        min_bytes=2 * array_bytes,
        unfused_bytes=6 * array_bytes,
    )


def linear_relu(x_shape, weight_shape, dtype, *, bias: bool = True) -> Traffic:
    """fused_linear_relu of x ``(..., K)`` and weight ``(K, N)``, with or without bias."""
    k_dim, n_dim = (int(n) for n in weight_shape)
    m_dim = _count(x_shape[:-1])
    size = _itemsize(dtype)
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
    n_q, head_dim = (int(n) for n in q_shape[-2:])
    n_k, head_dim_v = (int(n) for n in v_shape[-2:])
    heads = _count(np.broadcast_shapes(tuple(q_shape[:-2]), tuple(k_shape[:-2]), tuple(v_shape[:-2])))
    size = _itemsize(dtype)
    inputs = (_count(q_shape) + _count(k_shape) + _count(v_shape)) * size
    output = heads * n_q * head_dim_v * size + (heads * n_q * 4 if return_lse else 0)
    flops = 2 * heads * n_q * n_k * (head_dim + head_dim_v)
    return Traffic(
        flops=flops // 2 if causal else flops,
        min_bytes=inputs + output,
        unfused_bytes=inputs + output + 4 * heads * n_q * n_k * size,
    )
