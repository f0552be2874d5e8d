"""What every op's grid is made of: ``Impl`` and ``Case``, the PyTorch bridge, random
inputs, and the unfused compositions.

The unfused compositions work on NumPy and CuPy arrays alike (they pick the array's
module), so they are tested against the float64 oracles on the CPU. PyTorch and the
optional peers (``peers.py``) are imported on first use, never at import time: a peer that
cannot be imported is skipped, one that cannot run a case is reported, neither is fatal.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import sys
from typing import Callable

import numpy as np

import cufuse

from ... import traffic
from ..._core.dtypes import BFLOAT16

TORCH = "torch"
UNFUSED = "cupy unfused"  # the unfused CuPy composition: the roofline's unfused points


@dataclasses.dataclass(frozen=True)
class Impl:
    """One implementation of a case: ``call(*prepare(inputs))`` computes the op."""

    name: str
    call: Callable
    prepare: Callable = tuple  # turns one input set into call's arguments (not timed)
    needs: str = ""  # "torch", or the module an optional peer is imported from ("flash_attn.cute")
    peer: bool = True  # False for cufuse's own calls and for ceilings: never a case's best peer
    unsupported: str = ""  # why this peer has no call for the case (then it is never timed)

    def unavailable(self) -> str | None:
        """Why the implementation cannot be imported here, or None when it can."""
        if not self.needs:
            return None
        if torch_module() is None:
            return "PyTorch with CUDA is not importable"
        return None if self.needs == TORCH else optional_module(self.needs)[1]

    def available(self) -> bool:
        """Whether the implementation can be called here (importable, and the case supported)."""
        return not self.unsupported and self.unavailable() is None


@dataclasses.dataclass(frozen=True)
class Case:
    """One op on one shape and dtype, with everything needed to time and judge it."""

    op: str  # "softmax", "linear" or "attention"
    label: str  # shape and options, e.g. "16384x4096 axis=0"
    dtype: str
    traffic: traffic.Traffic
    metric: str  # "TB/s" (memory-bound: min bytes over time) or "TFLOP/s"
    make_inputs: Callable  # make_inputs(xp, rng) -> one input set, output buffer last
    impls: tuple  # of Impl; the first is cufuse
    klass: str = ""  # the class of shapes the case stands for, over which minima are reported

    @property
    def key(self) -> str:
        return f"{self.op} {self.label} {self.dtype}"

    @property
    def ceiling(self) -> str:
        """Which measured ceiling the metric is a fraction of: "copy" or "gemm"."""
        return "copy" if self.metric == "TB/s" else "gemm"

    @property
    def fused(self) -> Impl:
        return self.impls[0]

    def impl(self, name: str):
        return next((impl for impl in self.impls if impl.name == name), None)

    def rate(self, ms: float) -> float:
        """The case's metric for a call of ``ms`` milliseconds."""
        work = self.traffic.min_bytes if self.metric == "TB/s" else self.traffic.flops
        return work / (ms * 1e-3) / 1e12


def resolve_dtype(name: str) -> np.dtype:
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


@functools.lru_cache(maxsize=None)
def torch_module():
    """PyTorch with CUDA, or None. Never a dependency: imported only for the peers."""
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def optional_module(name: str):
    """``(module, None)``, or ``(None, why)`` where ``name`` cannot be imported (an optional
    peer: imported on first use only, once)."""
    try:
        return importlib.import_module(name), None
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
        return None, f"{name} is not importable ({text})"


def to_torch(array):
    """A zero-copy torch view of a CuPy array (bfloat16 travels as int16 bits)."""
    torch = torch_module()
    if array.dtype == BFLOAT16:
        return torch.from_dlpack(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def torch_inputs(inputs):
    """A PyTorch peer's arguments: every input as a torch view, the output buffer dropped."""
    return tuple(to_torch(array) for array in inputs[:-1])


def array_module(array):
    cupy = sys.modules.get("cupy")
    return cupy.get_array_module(array) if cupy is not None else np


def random_values(rng, shape, dtype, scale=1.0):
    """Standard normal values (times ``scale``) of ``dtype``, from a NumPy or CuPy generator."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(resolve_dtype(dtype))


# ---------------------------------------------------------------- unfused compositions


def softmax_unfused(x, axis=-1):
    """``exp(x - max) / sum``, one array operation at a time."""
    xp = array_module(x)
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_unfused(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))``, one array operation at a time."""
    xp = array_module(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


def linear_relu_unfused(x, weight, bias):
    xp = array_module(x)
    return xp.maximum(x @ weight + bias, 0)


def activation_unfused(activation, v):
    """The activations of fused_linear one array operation at a time (the oracle's formulas;
    erf from cupyx on CuPy)."""
    if array_module(v) is np:
        return cufuse.reference.apply_activation(activation, v).astype(v.dtype)
    from cupyx.scipy.special import erf

    return cufuse.reference.activation_formula(activation, v, erf)


def gated_unfused(x, w_gate, w_up, activation):
    return activation_unfused(activation, x @ w_gate) * (x @ w_up)


def attention_unfused(q, k, v, *, causal=False, scale=None):
    """Scores and probabilities materialised; causal is bottom-right aligned."""
    xp = array_module(q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2))
    scores *= scale
    if causal:
        n_q, n_k = scores.shape[-2:]
        visible = xp.tri(n_q, n_k, k=n_k - n_q, dtype=bool)
        scores = xp.where(visible, scores, xp.asarray(-np.inf, dtype=scores.dtype))
    return xp.matmul(softmax_unfused(scores, -1), v)
