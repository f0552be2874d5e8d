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


def log_softmax_unfused(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))``, one array operation at a time."""
    xp = _xp(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


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


# ---------------------------------------------------------------- softmax (issues 3 and 24)

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
# Issue 24's classes of shapes, each with lengths that are not powers of two: (shape, axis,
# view). A view is taken of an input of ``shape``: "T" its transpose, "::2" every other
# element of its last axis. The reduced length of each class: narrow 1-256, medium 257-64K,
# long 64K-1M, very long 1M-16M elements; misaligned: lengths that are not a multiple of the
# 16-byte vector; leading and middle axes; short columns: reduced axes of 2-16 elements strided
# over millions of columns (the last one's rows off the 16-byte vector); whole array (axis=None).
SOFTMAX_CLASSES = {
    "narrow": (((671088, 100), -1, None), ((2097152, 7), -1, None), ((1048576, 32), -1, None), ((262144, 255), -1, None)),
    "medium": (((65536, 1000), -1, None), ((86369, 777), -1, None), ((16384, 3000), -1, None), ((5461, 12288), -1, None),
               ((1342, 50000), -1, None)),
    "long": (((671, 100000), -1, None), ((335, 200000), -1, None), ((134, 500000), -1, None)),
    "very long": (((22, 3000000), -1, None), ((4, 4194304), -1, None), ((1, 12000000), -1, None)),
    "misaligned": (((262144, 129), -1, None), ((261123, 257), -1, None), ((32768, 4097), -1, None), ((4000, 33331), -1, None),
                   ((97, 300007), -1, None)),
    "strided views": (((8192, 8192), -1, "::2"), ((16384, 4096), -1, "T"), ((4096, 8192), 0, "T")),
    "leading and middle axes": (((4096, 8192), 0, None), ((64, 4096, 256), 1, None), ((6, 3000000), 0, None),
                                ((12, 1000, 2000), 1, None)),
    "short columns": (((6, 3000000), 0, None), ((2, 4194304), 0, None), ((16, 1000000), 0, None),
                      ((6, 3000001), 0, None), ((16, 1000001), 0, None)),
    "whole array": (((8192, 8192), None, None), ((3000, 3001), None, None)),
}
SOFTMAX_CLASS_DTYPES = ("float16", "bfloat16", "float32")
COPY_OF_VIEW = "copy of the view"  # a CuPy elementwise copy of the same view: the strided ceiling


def _view(array, view):
    if view == "T":
        return array.T
    if view == "::2":
        return array[..., ::2]
    return array


def softmax_case(shape, dtype, axis=-1, view=None, klass="", log=False) -> Case:
    """softmax (``log``: log_softmax) of an input of ``shape`` (or its ``view``, see
    SOFTMAX_CLASSES) over ``axis``; ``klass``: the issue-24 class it stands for (in the
    label). Where the input is a view, cufuse and the copy of the view allocate their out (a
    new out takes the view's layout)."""
    fn = cufuse.log_softmax if log else cufuse.softmax
    viewed_shape = np.empty(shape, dtype=np.bool_)
    viewed_shape = _view(viewed_shape, view).shape

    def make_inputs(xp, rng):
        x = _view(_random(rng, shape, dtype), view)
        return x, (None if view else xp.empty(shape, dtype=resolve_dtype(dtype)))

    def torch_softmax(x):
        torch = torch_module()
        torch_fn = torch.log_softmax if log else torch.softmax
        if axis is None:
            return torch_fn(x.reshape(-1), 0).reshape(x.shape)
        return torch_fn(x, axis)

    def cupyx_softmax(x, out):
        import cupyx.scipy.special

        return (cupyx.scipy.special.log_softmax if log else cupyx.scipy.special.softmax)(x, axis=axis)

    def copy_of_view(x, out):
        return x.copy(order="K")

    label = (("log " if log else "") + "x".join(map(str, shape)) + ("" if view is None else f"[{view}]")
             + ("" if axis == -1 else f" axis={axis}"))
    impls = (
        Impl("cufuse", lambda x, out: fn(x, axis, out=out)),
        Impl(UNFUSED, lambda x, out: (log_softmax_unfused if log else softmax_unfused)(x, axis)),
        Impl("cupyx.scipy", cupyx_softmax),
        Impl("torch.softmax", torch_softmax, prepare=_torch_inputs, needs=TORCH),
    )
    if view is not None:
        impls += (Impl(COPY_OF_VIEW, copy_of_view),)
    return Case(
        op="softmax",
        label=(f"{klass}: " if klass else "") + label,
        dtype=dtype,
        traffic=traffic.softmax(viewed_shape, resolve_dtype(dtype)),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=impls,
    )


def softmax_class_cases(classes=None, dtypes=SOFTMAX_CLASS_DTYPES, log=False) -> list:
    """Issue 24's classes (all, or those named in ``classes``), every dtype of ``dtypes``."""
    return [softmax_case(shape, dtype, axis, view, klass, log)
            for klass, members in SOFTMAX_CLASSES.items() if classes is None or klass in classes
            for shape, axis, view in members for dtype in dtypes]


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
    return cases + softmax_class_cases()


# ---------------------------------------------------------------- logsumexp (issue 24)

# Classes of reductions (rows x length, the reduced axis; lengths not powers of two in each):
# narrow, medium, long and very long last-axis rows, leading and middle axes, short columns
# (the last one's rows off the 16-byte vector), a transposed view.
LOGSUMEXP_SHAPES = (
    ((1048576, 32), -1), ((671088, 100), -1), ((262144, 250), -1),
    ((65536, 1000), -1), ((5461, 12288), -1), ((1342, 50000), -1),
    ((335, 200000), -1), ((128, 262144), -1), ((22, 3000000), -1), ((4, 4194304), -1),
    ((4096, 8192), 0), ((64, 4096, 256), 1),
    ((2, 4194304), 0), ((6, 3000000), 0), ((16, 1000000), 0), ((6, 3000001), 0),
    ((8192, 3000), None),
)
LOGSUMEXP_DTYPES = ("float16", "float32")


def logsumexp_case(shape, dtype, axis=-1) -> Case:
    """A read-only stream: its ceiling is the read rate, so the case carries the read-only
    peer ``read (cupy sum)`` (x.sum over the same axis in x's dtype) beside torch and cupyx."""
    dt = resolve_dtype(dtype)
    n = int(np.prod(shape))
    reduced = n if axis is None else shape[axis]
    nbytes = n * dt.itemsize + (n // reduced) * dt.itemsize

    def make_inputs(xp, rng):  # no out argument: an empty last entry for the peers' convention
        return _random(rng, shape, dtype, scale=3.0), None

    def torch_lse(x):
        torch = torch_module()
        return torch.logsumexp(x.reshape(-1), 0) if axis is None else torch.logsumexp(x, axis)

    def cupyx_lse(x, _):
        import cupyx.scipy.special

        return cupyx.scipy.special.logsumexp(x, axis=axis)

    label = "x".join(map(str, shape)) + ("" if axis == -1 else f" axis={axis}")
    return Case(
        op="logsumexp",
        label=label,
        dtype=dtype,
        traffic=traffic.Traffic(flops=3 * n, min_bytes=nbytes, unfused_bytes=4 * n * dt.itemsize),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda x, _: cufuse.logsumexp(x, axis)),
            Impl("read (cupy sum)", lambda x, _: x.sum(axis=axis)),
            Impl("cupyx.scipy", cupyx_lse),
            Impl("torch.logsumexp", torch_lse, prepare=_torch_inputs, needs=TORCH),
        ),
    )


def logsumexp_cases(quick: bool = False) -> list:
    if quick:
        return [logsumexp_case((65536, 1000), "float16"), logsumexp_case((4096, 8192), "float32", axis=0)]
    return [logsumexp_case(shape, dtype, axis) for dtype in LOGSUMEXP_DTYPES for shape, axis in LOGSUMEXP_SHAPES]


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


def sdpa_peers(**options) -> tuple:
    """PyTorch SDPA on its FLASH (FA2) and CUDNN backends, called with ``options``."""
    def sdpa(backend):
        def call(q, k, v):
            torch = torch_module()
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, **options)

        return call

    return (Impl("sdpa flash", sdpa("FLASH_ATTENTION"), prepare=_torch_inputs, needs=TORCH),
            Impl("sdpa cudnn", sdpa("CUDNN_ATTENTION"), prepare=_torch_inputs, needs=TORCH))


def attention_case(batch, heads, n_q, n_k, head_dim, dtype, *, causal=False) -> Case:
    q_shape = (batch, heads, n_q, head_dim)
    kv_shape = (batch, heads, n_k, head_dim)

    def make_inputs(xp, rng):
        q, k, v = (_random(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        return q, k, v, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    impls = [
        Impl("cufuse", lambda q, k, v, out: cufuse.attention(q, k, v, causal=causal, out=out)),
        *sdpa_peers(is_causal=causal),
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


# Grouped-query decode (issue 18): (G, Nq, D, B x Hkv, Nk), each with K + V >= 64 MiB. Every
# class value of G (1, 4, 8, 16) meets the four (B x Hkv, cache) shapes at Nq 1, D128; Nq 2-8
# and D 64 / 256 vary around G 8.
GQA_DECODE_SHAPES = (
    *[(group, 1, 128, batch_heads, n_k) for group in (1, 4, 8, 16)
      for batch_heads, n_k in ((1, 1 << 20), (8, 32768), (64, 4096), (1024, 1024))],
    *[(8, n_q, 128, 8, 32768) for n_q in (2, 4, 8)],
    (8, 1, 64, 8, 65536), (8, 1, 256, 8, 16384), (4, 4, 64, 64, 8192), (16, 2, 256, 16, 8192),
    (16, 8, 128, 32, 4096),
)
GQA_MAX_KV_HEADS = 8  # B x Hkv splits into B and at most 8 KV heads


def gqa_decode_class(case) -> str:
    """The class of a gqa_decode_case ("G8 Nq1 D128"), the unit the issue's minima are over."""
    return " ".join(case.label.split()[1:4])


def gqa_decode_case(group, n_q, head_dim, batch_heads, n_k, dtype="bfloat16") -> Case:
    """q (B, Hkv x G, Nq, D) over k / v (B, Hkv, Nk, D) with ``enable_gqa=True``, full
    attention (SDPA's causal is top-left aligned, cufuse's bottom-right); traffic counts K and
    V once."""
    heads_kv = min(batch_heads, GQA_MAX_KV_HEADS)
    batch = batch_heads // heads_kv
    q_shape = (batch, heads_kv * group, n_q, head_dim)
    kv_shape = (batch, heads_kv, n_k, head_dim)

    def make_inputs(xp, rng):
        q, k, v = (_random(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        return q, k, v, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    return Case(
        op="attention",
        label=f"gqa G{group} Nq{n_q} D{head_dim} B{batch} Hkv{heads_kv} Nk{n_k}",
        dtype=dtype,
        traffic=traffic.attention((batch, heads_kv, group, n_q, head_dim), (batch, heads_kv, 1, n_k, head_dim),
                                  (batch, heads_kv, 1, n_k, head_dim), resolve_dtype(dtype)),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda q, k, v, out: cufuse.attention(q, k, v, enable_gqa=True, out=out)),
            *sdpa_peers(enable_gqa=True),
        ),
    )


def gqa_decode_cases(quick: bool = False) -> list:
    shapes = GQA_DECODE_SHAPES[4:8] if quick else GQA_DECODE_SHAPES
    return [gqa_decode_case(*shape) for shape in shapes]


def attention_cases(quick: bool = False) -> list:
    if quick:
        return [prefill_case(2048, 128, "bfloat16", False), prefill_case(2048, 128, "bfloat16", True),
                decode_case(8192), gqa_decode_cases(quick=True)[1]]
    cases = [
        prefill_case(n, head_dim, dtype, causal)
        for dtype in ATTENTION_DTYPES
        for head_dim in ATTENTION_HEAD_DIMS
        for n in ATTENTION_N
        for causal in (False, True)
    ]
    return cases + [decode_case(n_k) for n_k in DECODE_KEYS] + gqa_decode_cases()


# ---------------------------------------------------------------- paged attention (issue 18)

# Classes of the paged grid (bf16, vLLM's (P, S, Hkv, D) page storage, shuffled page tables);
# each reports its minimum. Equal-length cases also run cufuse's dense attention (enable_gqa)
# and SDPA on the dense (B, Hkv, L, D) cache of the same lengths.
PAGED_BASE = dict(batch=8, heads_q=32, heads_kv=8, length=8192, n_q=1, head_dim=128, page_size=16)
PAGED_CLASSES = {
    "page size": [dict(page_size=s) for s in (1, 8, 16, 32, 64, 128, 256)],
    "group": [dict(heads_q=8 * g) for g in (1, 4, 8, 16)],
    "queries": [dict(n_q=n) for n in (1, 2, 4, 8)],
    "head dim": [dict(head_dim=d) for d in (64, 128, 256)],
    "batch x heads": [dict(batch=1, heads_kv=1, heads_q=4, length=1 << 20), dict(batch=1, length=131072),
                      dict(batch=64, length=2048), dict(batch=128, length=1024)],
}
PAGED_MIXED = (100, 100_000, 3000, 250, 40_000, 1000, 12_000, 500, 70_000, 2000, 150, 8000, 30_000, 600, 5000, 20_000)
PAGED_QUICK = {"page size": [dict(page_size=1), dict(page_size=16), dict(page_size=256)]}


def paged_case(batch, heads_q, heads_kv, length, n_q, head_dim, page_size, lengths=None, cls="",
               dtype="bfloat16") -> Case:
    """attention_paged of ``batch`` sequences of ``length`` keys (or ``lengths``), Nq new
    queries each, over shuffled pages of ``page_size`` tokens."""
    lengths = tuple(lengths or (length,) * batch)
    batch = len(lengths)
    equal = len(set(lengths)) == 1
    q_shape = (batch, heads_q, n_q, head_dim)
    group = heads_q // heads_kv

    def make_inputs(xp, rng):
        pages = [-(-n // page_size) for n in lengths]
        order = np.random.default_rng(len(lengths)).permutation(sum(pages))
        table = np.zeros((batch, max(pages)), dtype=np.int32)
        starts = np.cumsum([0] + pages)
        for b, count in enumerate(pages):
            table[b, :count] = order[starts[b]:starts[b] + count]
        store = (sum(pages), page_size, heads_kv, head_dim)  # vLLM / FlashAttention page storage
        k_pages, v_pages = (_random(rng, store, dtype).transpose(0, 2, 1, 3) for _ in range(2))
        dense = (batch, heads_kv, lengths[0], head_dim) if equal else (0, heads_kv, 0, head_dim)
        k_dense, v_dense = (_random(rng, dense, dtype) for _ in range(2))
        return (_random(rng, q_shape, dtype), k_pages, v_pages, xp.asarray(table), xp.asarray(np.int32(lengths)),
                k_dense, v_dense, xp.empty(q_shape, dtype=resolve_dtype(dtype)))

    def sdpa(backend):
        def call(q, k, v):
            torch = torch_module()
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, backend)):  # Nq = 1: no mask; else full (a bound)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=group > 1)

        return call

    def dense_inputs(inputs):
        return tuple(to_torch(a) for a in (inputs[0], inputs[5], inputs[6]))

    impls = [Impl("cufuse", lambda q, kp, vp, bt, sl, kd, vd, out: cufuse.attention_paged(q, kp, vp, bt, sl,
                                                                                               out=out))]
    if equal:
        impls += [
            Impl("cufuse dense", lambda q, kp, vp, bt, sl, kd, vd, out: cufuse.attention(q, kd, vd, causal=True,
                                                                                        enable_gqa=True, out=out)),
            Impl("sdpa flash", sdpa("FLASH_ATTENTION"), prepare=dense_inputs, needs=TORCH),
            Impl("sdpa cudnn", sdpa("CUDNN_ATTENTION"), prepare=dense_inputs, needs=TORCH),
        ]
    itemsize = resolve_dtype(dtype).itemsize
    keys = sum(lengths)
    read = keys * heads_kv * 2 * head_dim * itemsize + 2 * math.prod(q_shape) * itemsize
    shape = f"L{lengths[0]}" if equal else f"mixed {min(lengths)}-{max(lengths)}"
    return Case(
        op="paged_attention",
        label=f"[{cls}] B{batch} G{group} Hkv{heads_kv} {shape} Nq{n_q} D{head_dim} S{page_size}",
        dtype=dtype,
        traffic=traffic.Traffic(flops=2 * keys * heads_q * n_q * 2 * head_dim, min_bytes=read, unfused_bytes=read),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=tuple(impls),
    )


def paged_class(case: Case) -> str:
    """The class a paged case reports its minimum in (the label's bracket)."""
    return case.label[1:case.label.index("]")]


def paged_cases(quick: bool = False) -> list:
    classes = PAGED_QUICK if quick else PAGED_CLASSES
    cases = [paged_case(**{**PAGED_BASE, **change}, cls=name) for name, changes in classes.items()
             for change in changes]
    page_sizes = (16,) if quick else (1, 16, 256)
    return cases + [paged_case(**{**PAGED_BASE, "page_size": s}, lengths=PAGED_MIXED, cls="mixed")
                    for s in page_sizes]


OPS = {"softmax": softmax_cases, "logsumexp": logsumexp_cases, "linear": linear_cases, EPILOGUES: epilogue_cases,
       "attention": attention_cases, "paged_attention": paged_cases}


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
