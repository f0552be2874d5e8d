"""The benchmark grids of issues 3, 4 and 5, and the implementations compared on them.

A ``Case`` is one op on one shape and dtype: its traffic model, how to make one input
set (output buffer included), cufuse's call and the peers' calls. The command line
(``python -m cufuse.bench``) and the pytest-benchmark suite (``bench/``) both take their
cases from here, so the two measure the same thing.

The unfused compositions work on NumPy and CuPy arrays alike (they pick the array's
module), so they are tested against the float64 oracles on the CPU. PyTorch is a peer
only: imported on first use, and a peer that cannot run is reported, never fatal.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Callable

import numpy as np

import cufuse

from .. import traffic
from .._core.dtypes import BFLOAT16

TORCH = "torch"
UNFUSED = "cupy unfused"  # the unfused CuPy composition: the roofline's unfused points


@dataclasses.dataclass(frozen=True)
class Impl:
    """One implementation of a case: ``call(*prepare(inputs))`` computes the op."""

    name: str
    call: Callable
    prepare: Callable = tuple  # turns one input set into call's arguments (not timed)
    needs: str = ""  # "torch" when the implementation is a PyTorch peer

    def available(self) -> bool:
        return self.needs != TORCH or torch_module() is not None


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


def to_torch(array):
    """A zero-copy torch view of a CuPy array (bfloat16 travels as int16 bits)."""
    torch = torch_module()
    if array.dtype == BFLOAT16:
        return torch.from_dlpack(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def _torch_inputs(inputs):
    """A PyTorch peer's arguments: every input as a torch view, the output buffer dropped."""
    return tuple(to_torch(array) for array in inputs[:-1])


def _xp(array):
    cupy = sys.modules.get("cupy")
    return cupy.get_array_module(array) if cupy is not None else np


def _random(rng, shape, dtype, scale=1.0):
    """Standard normal values (times ``scale``) of ``dtype``, from a NumPy or CuPy generator."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(resolve_dtype(dtype))


# ---------------------------------------------------------------- unfused compositions


def softmax_unfused(x, axis=-1):
    """``exp(x - max) / sum``, one array operation at a time."""
    xp = _xp(x)
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def linear_relu_unfused(x, weight, bias):
    xp = _xp(x)
    return xp.maximum(x @ weight + bias, 0)


def activation_unfused(activation, v):
    """The activations of fused_linear one array operation at a time (the oracle's formulas;
    erf from cupyx on CuPy)."""
    if _xp(v) is np:
        return cufuse.reference.apply_activation(activation, v).astype(v.dtype)
    from cupyx.scipy.special import erf

    return cufuse.reference.activation_formula(activation, v, erf)


def gated_unfused(x, w_gate, w_up, activation):
    return activation_unfused(activation, x @ w_gate) * (x @ w_up)


def attention_unfused(q, k, v, *, causal=False, scale=None):
    """Scores and probabilities materialised; causal is bottom-right aligned."""
    xp = _xp(q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2))
    scores *= scale
    if causal:
        n_q, n_k = scores.shape[-2:]
        visible = xp.tri(n_q, n_k, k=n_k - n_q, dtype=bool)
        scores = xp.where(visible, scores, xp.asarray(-np.inf, dtype=scores.dtype))
    return xp.matmul(softmax_unfused(scores, -1), v)


# ---------------------------------------------------------------- softmax (issue 3)

SOFTMAX_ROWS = (
    (1048576, 32),
    (262144, 128),
    (65536, 1024),
    (16384, 4096),
    (4096, 16384),
    (1024, 65536),
    (128, 262144),
    (16, 1048576),
    (4, 4194304),
)
SOFTMAX_DTYPES = ("float16", "float32")


def softmax_case(shape, dtype, axis=-1) -> Case:
    def make_inputs(xp, rng):
        return _random(rng, shape, dtype), xp.empty(shape, dtype=resolve_dtype(dtype))

    def torch_softmax(x):
        torch = torch_module()
        if axis is None:
            return torch.softmax(x.reshape(-1), 0).reshape(x.shape)
        return torch.softmax(x, axis)

    def cupyx_softmax(x, out):
        import cupyx.scipy.special

        return cupyx.scipy.special.softmax(x, axis=axis)

    label = "x".join(map(str, shape)) + ("" if axis == -1 else f" axis={axis}")
    return Case(
        op="softmax",
        label=label,
        dtype=dtype,
        traffic=traffic.softmax(shape, resolve_dtype(dtype)),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda x, out: cufuse.softmax(x, axis, out=out)),
            Impl(UNFUSED, lambda x, out: softmax_unfused(x, axis)),
            Impl("cupyx.scipy", cupyx_softmax),
            Impl("torch.softmax", torch_softmax, prepare=_torch_inputs, needs=TORCH),
        ),
    )


def softmax_cases(quick: bool = False) -> list:
    if quick:
        return [
            softmax_case((65536, 1024), "float16"),
            softmax_case((1024, 65536), "float32"),
            softmax_case((4, 4194304), "float16"),
        ]
    cases = [softmax_case(shape, dtype) for dtype in SOFTMAX_DTYPES for shape in SOFTMAX_ROWS]
    cases += [softmax_case((16384, 4096), dtype, axis=0) for dtype in SOFTMAX_DTYPES]
    cases += [softmax_case((8192, 8192), dtype, axis=None) for dtype in SOFTMAX_DTYPES]
    return cases


# ---------------------------------------------------------------- fused_linear_relu (issue 4)

LINEAR_SHAPES = (  # M, K, N
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (4096, 4096, 16384),
    (512, 4096, 4096),
    (1, 8192, 8192),
    (16, 8192, 8192),
    (64, 8192, 8192),
)
LINEAR_DTYPES = ("bfloat16", "float16")
WIDE_STREAM_ROWS = (16, 64)  # float32 / float64 x 8192^2: M of the streaming cases
SMALL_M = 64  # up to here the op streams the weight: report TB/s against the copy ceiling


LINEAR_LAYOUTS = ("kn", "nk")  # weight (K, N) row-major, or PyTorch Linear's (N, K) viewed as (K, N)


def linear_case(m, k, n, dtype, layout="kn") -> Case:
    def make_inputs(xp, rng):
        x = _random(rng, (m, k), dtype)
        shape = (k, n) if layout == "kn" else (n, k)
        weight = _random(rng, shape, dtype, scale=1 / math.sqrt(k))
        bias = _random(rng, (n,), dtype)
        return x, weight if layout == "kn" else weight.T, bias, xp.empty((m, n), dtype=resolve_dtype(dtype))

    def addmm_relu(x, weight, bias):
        return torch_module()._addmm_activation(bias, x, weight)

    def torch_unfused(x, weight, bias):
        return torch_module().relu(x @ weight + bias)

    return Case(
        op="linear",
        label=f"{m}x{k}x{n}" + ("" if layout == "kn" else " w=(N,K).T"),
        dtype=dtype,
        traffic=traffic.linear_relu((m, k), (k, n), resolve_dtype(dtype)),
        metric="TB/s" if m <= SMALL_M else "TFLOP/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda x, w, b, out: cufuse.fused_linear_relu(x, w, b, out=out)),
            Impl(UNFUSED, lambda x, w, b, out: linear_relu_unfused(x, w, b)),
            Impl("torch addmm_relu", addmm_relu, prepare=_torch_inputs, needs=TORCH),
            Impl("torch unfused", torch_unfused, prepare=_torch_inputs, needs=TORCH),
        ),
    )


# ---------------------------------------------------------------- fused_linear's activations and
# fused_gated_linear (issue 23), on the projection shapes of current models

MODEL_PROJECTIONS = (  # (K, N): Llama-3 8B / Mistral 7B, Llama-3 70B, Qwen2 7B, Gemma 7B, Llama-2 7B
    (4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (3584, 18944), (3072, 24576), (4096, 11008),
)
MODEL_ROWS = (1, 8, 32, 128, 512, 4096, 16384)
MODEL_GATED = ((4096, 14336), (4096, 11008), (8192, 28672))  # (K, N) of each of w_gate, w_up
EPILOGUES = "linear_epilogues"  # the op name of these cases (bench/bench_linear_epilogues.py)


def linear_act_case(m, k, n, dtype, activation, layout="kn") -> Case:
    """fused_linear with ``activation``; peers: cuBLASLt's epilogue (torch._addmm_activation,
    relu or its tanh GELU), the unfused CuPy composition."""
    base = linear_case(m, k, n, dtype, layout)

    def addmm(x, weight, bias):
        return torch_module()._addmm_activation(bias, x, weight, use_gelu=activation != "relu")

    impls = [Impl("cufuse", lambda x, w, b, out: cufuse.fused_linear(x, w, b, activation=activation, out=out)),
             Impl(UNFUSED, lambda x, w, b, out: activation_unfused(activation, x @ w + b))]
    if activation in ("relu", "gelu", "gelu_tanh"):
        impls.append(Impl(f"torch addmm_{'relu' if activation == 'relu' else 'gelu'}", addmm, prepare=_torch_inputs,
                          needs=TORCH))
    return dataclasses.replace(base, op=EPILOGUES, label=f"{base.label} {activation}", impls=tuple(impls))


def gated_case(m, k, n, dtype, activation="silu", layout="kn") -> Case:
    """fused_gated_linear; peers: one cuBLASLt GEMM on the concatenated [w_gate | w_up] then
    torch's activation and multiply, the unfused CuPy composition."""
    size = resolve_dtype(dtype).itemsize

    def make_inputs(xp, rng):
        x = _random(rng, (m, k), dtype)
        weights = [_random(rng, (k, n) if layout == "kn" else (n, k), dtype, scale=1 / math.sqrt(k)) for _ in range(2)]
        w_gate, w_up = weights if layout == "kn" else (w.T for w in weights)
        return x, w_gate, w_up, xp.empty((m, n), dtype=resolve_dtype(dtype))

    def torch_concat(inputs):  # the concatenated weight is built once, outside the timing
        x, w_gate, w_up = _torch_inputs(inputs)
        return x, torch_module().cat((w_gate, w_up), dim=1)

    def torch_gated(x, w_both):
        torch = torch_module()
        h = x @ w_both
        act = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
               "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[activation]
        return act(h[:, :n]) * h[:, n:]

    min_bytes = (m * k + 2 * k * n + m * n) * size
    return Case(
        op=EPILOGUES,
        label=f"gated {m}x{k}x{n}" + ("" if layout == "kn" else " w=(N,K).T") + f" {activation}",
        dtype=dtype,
        traffic=traffic.Traffic(flops=4 * m * n * k, min_bytes=min_bytes, unfused_bytes=min_bytes + 6 * m * n * size),
        metric="TB/s" if m <= SMALL_M else "TFLOP/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda x, wg, wu, out: cufuse.fused_gated_linear(x, wg, wu, activation=activation, out=out)),
            Impl(UNFUSED, lambda x, wg, wu, out: gated_unfused(x, wg, wu, activation)),
            Impl("torch concat gemm + act*mul", torch_gated, prepare=torch_concat, needs=TORCH),
        ),
    )


def epilogue_cases(quick: bool = False) -> list:
    """Issue 23's grid: every activation on one streaming and one GEMM shape (within 3 % of
    relu's time); the class grid, bf16 fused_linear (relu, gelu) on the model projections at
    every M of MODEL_ROWS, both layouts; the gated form on the MLP shapes."""
    if quick:
        return [linear_act_case(512, 4096, 11008, "bfloat16", "gelu", "nk"),
                linear_act_case(16, 4096, 11008, "bfloat16", "silu", "nk"),
                gated_case(16, 4096, 11008, "bfloat16"), gated_case(512, 4096, 11008, "bfloat16")]
    cases = [linear_act_case(m, 4096, 11008, "bfloat16", activation, "nk") for m in (16, 4096)
             for activation in ("gelu_tanh", "silu")]
    cases += [linear_act_case(m, k, n, "bfloat16", activation, layout) for k, n in MODEL_PROJECTIONS
              for m in MODEL_ROWS for layout in LINEAR_LAYOUTS for activation in ("relu", "gelu")]
    cases += [gated_case(m, k, n, "bfloat16", "silu", layout) for k, n in MODEL_GATED for m in MODEL_ROWS
              for layout in LINEAR_LAYOUTS]
    return cases


def linear_cases(quick: bool = False) -> list:
    if quick:
        return [linear_case(8192, 8192, 8192, "bfloat16"), linear_case(8192, 8192, 8192, "bfloat16", "nk"),
                linear_case(512, 4096, 4096, "float16"), linear_case(16, 8192, 8192, "bfloat16")]
    cases = [linear_case(*shape, dtype, layout)
             for dtype in LINEAR_DTYPES for shape in LINEAR_SHAPES for layout in LINEAR_LAYOUTS]
    # The wide dtypes: issue 4 asks float32 and float64 to be no slower than CuPy unfused, at
    # 4096^3 and where the weight streams (the few-row tiles and their split K).
    cases += [linear_case(4096, 4096, 4096, "float32"), linear_case(4096, 4096, 4096, "float64")]
    cases += [linear_case(m, 8192, 8192, dtype, layout)
              for dtype in ("float32", "float64") for m in WIDE_STREAM_ROWS for layout in LINEAR_LAYOUTS]
    return cases


# ---------------------------------------------------------------- attention (issue 5)

ATTENTION_TOKENS = 32768  # B = 32768 / N
ATTENTION_HEADS = 16
ATTENTION_N = (512, 2048, 8192, 16384)
ATTENTION_HEAD_DIMS = (64, 128)
ATTENTION_DTYPES = ("bfloat16", "float16")
UNFUSED_ATTENTION_MAX_SCORES = 1 << 30  # beyond this the materialised scores take tens of GB
DECODE_BATCH, DECODE_HEADS, DECODE_HEAD_DIM = 8, 32, 128
DECODE_KEYS = (8192, 65536)


def attention_case(batch, heads, n_q, n_k, head_dim, dtype, *, causal=False) -> Case:
    q_shape = (batch, heads, n_q, head_dim)
    kv_shape = (batch, heads, n_k, head_dim)

    def make_inputs(xp, rng):
        q, k, v = (_random(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        return q, k, v, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    def sdpa(backend):
        def call(q, k, v):
            torch = torch_module()
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return call

    impls = [
        Impl("cufuse", lambda q, k, v, out: cufuse.attention(q, k, v, causal=causal, out=out)),
        Impl("sdpa flash", sdpa("FLASH_ATTENTION"), prepare=_torch_inputs, needs=TORCH),
        Impl("sdpa cudnn", sdpa("CUDNN_ATTENTION"), prepare=_torch_inputs, needs=TORCH),
    ]
    if batch * heads * n_q * n_k <= UNFUSED_ATTENTION_MAX_SCORES:
        impls.insert(1, Impl(UNFUSED, lambda q, k, v, out: attention_unfused(q, k, v, causal=causal)))
    decode = n_q == 1
    label = (f"decode B{batch} H{heads} Nk{n_k} D{head_dim}" if decode
             else f"B{batch} H{heads} N{n_q} D{head_dim} {'causal' if causal else 'full'}")
    return Case(
        op="attention",
        label=label,
        dtype=dtype,
        traffic=traffic.attention(q_shape, kv_shape, kv_shape, resolve_dtype(dtype), causal=causal),
        metric="TB/s" if decode else "TFLOP/s",
        make_inputs=make_inputs,
        impls=tuple(impls),
    )


def prefill_case(n, head_dim, dtype, causal) -> Case:
    return attention_case(ATTENTION_TOKENS // n, ATTENTION_HEADS, n, n, head_dim, dtype, causal=causal)


def decode_case(n_k) -> Case:
    return attention_case(DECODE_BATCH, DECODE_HEADS, 1, n_k, DECODE_HEAD_DIM, "bfloat16")


def attention_cases(quick: bool = False) -> list:
    if quick:
        return [prefill_case(2048, 128, "bfloat16", False), prefill_case(2048, 128, "bfloat16", True),
                decode_case(8192)]
    cases = [
        prefill_case(n, head_dim, dtype, causal)
        for dtype in ATTENTION_DTYPES
        for head_dim in ATTENTION_HEAD_DIMS
        for n in ATTENTION_N
        for causal in (False, True)
    ]
    return cases + [decode_case(n_k) for n_k in DECODE_KEYS]


OPS = {"softmax": softmax_cases, "linear": linear_cases, EPILOGUES: epilogue_cases, "attention": attention_cases}


def cases_for(op: str = "all", quick: bool = False) -> list:
    names = OPS if op == "all" else (op,)
    return [case for name in names for case in OPS[name](quick)]


def cpu_cases() -> list:
    """One small float32 case per op, for the NumPy reference path (no GPU)."""
    return [
        softmax_case((256, 1000), "float32"),
        linear_case(64, 256, 256, "float32"),
        attention_case(1, 4, 128, 128, 64, "float32", causal=True),
    ]
