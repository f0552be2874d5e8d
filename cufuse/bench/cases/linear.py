"""fused_linear_relu's grid, and fused_linear's activations and fused_gated_linear on the
projection shapes of current models."""
from __future__ import annotations

import dataclasses
import math

import cufuse

from ... import traffic
from .common import TORCH, UNFUSED, Case, Impl, activation_unfused, gated_unfused, linear_relu_unfused, random_values, \
    resolve_dtype, torch_inputs, torch_module
from .peers import quack_gated, quack_linear

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
        x = random_values(rng, (m, k), dtype)
        shape = (k, n) if layout == "kn" else (n, k)
        weight = random_values(rng, shape, dtype, scale=1 / math.sqrt(k))
        bias = random_values(rng, (n,), dtype)
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
            Impl("torch addmm_relu", addmm_relu, prepare=torch_inputs, needs=TORCH),
            Impl("torch unfused", torch_unfused, prepare=torch_inputs, needs=TORCH),
            quack_linear(dtype, "relu"),
        ),
        klass=f"{'weight stream' if m <= SMALL_M else 'GEMM'} {layout}",
    )


# ---------------------------------------------------------------- fused_linear's activations and
# fused_gated_linear, on the projection shapes of current models

MODEL_PROJECTIONS = (  # (K, N): Llama-3 8B / Mistral 7B, Llama-3 70B, Qwen2 7B, Gemma 7B, Llama-2 7B
    (4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (3584, 18944), (3072, 24576), (4096, 11008),
)
MODEL_ROWS = (1, 8, 32, 128, 512, 4096, 16384)
MODEL_GATED = ((4096, 14336), (4096, 11008), (8192, 28672))  # (K, N) of each of w_gate, w_up
EPILOGUES = "linear_epilogues"  # the op name of these cases (bench/bench_linear_epilogues.py)


def linear_act_case(m, k, n, dtype, activation, layout="kn") -> Case:
    """fused_linear with ``activation``; peers: cuBLASLt's epilogue (torch._addmm_activation,
    relu or its tanh GELU), QuACK's gemm_act, the unfused CuPy composition; its class is the
    activation, layout and M (the minimum is over the (K, N) shapes)."""
    base = linear_case(m, k, n, dtype, layout)

    def addmm(x, weight, bias):
        return torch_module()._addmm_activation(bias, x, weight, use_gelu=activation != "relu")

    impls = [Impl("cufuse", lambda x, w, b, out: cufuse.fused_linear(x, w, b, activation=activation, out=out)),
             Impl(UNFUSED, lambda x, w, b, out: activation_unfused(activation, x @ w + b))]
    if activation in ("relu", "gelu", "gelu_tanh"):
        impls.append(Impl(f"torch addmm_{'relu' if activation == 'relu' else 'gelu'}", addmm, prepare=torch_inputs,
                          needs=TORCH))
    impls.append(quack_linear(dtype, activation))
    return dataclasses.replace(base, op=EPILOGUES, label=f"{base.label} {activation}", impls=tuple(impls),
                               klass=f"{activation} {layout} M{m}")


def gated_case(m, k, n, dtype, activation="silu", layout="kn") -> Case:
    """fused_gated_linear; peers: one cuBLASLt GEMM on the concatenated [w_gate | w_up] then
    torch's activation and multiply, QuACK's gated gemm_act on the interleaved weight, the
    unfused CuPy composition."""
    size = resolve_dtype(dtype).itemsize

    def make_inputs(xp, rng):
        x = random_values(rng, (m, k), dtype)
        weights = [random_values(rng, (k, n) if layout == "kn" else (n, k), dtype, scale=1 / math.sqrt(k)) for _ in range(2)]
        w_gate, w_up = weights if layout == "kn" else (w.T for w in weights)
        return x, w_gate, w_up, xp.empty((m, n), dtype=resolve_dtype(dtype))

    def torch_concat(inputs):  # the concatenated weight is built once, outside the timing
        x, w_gate, w_up = torch_inputs(inputs)
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
            quack_gated(dtype, activation, layout),
        ),
        klass=f"gated {activation} {layout} M{m}",
    )


def epilogue_cases(quick: bool = False) -> list:
    """Every activation on one streaming and one GEMM shape (within 3 % of
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
    # The wide dtypes: float32 and float64 must be no slower than CuPy unfused, at
    # 4096^3 and where the weight streams (the few-row tiles and their split K).
    cases += [linear_case(4096, 4096, 4096, "float32"), linear_case(4096, 4096, 4096, "float64")]
    cases += [linear_case(m, 8192, 8192, dtype, layout)
              for dtype in ("float32", "float64") for m in WIDE_STREAM_ROWS for layout in LINEAR_LAYOUTS]
    return cases
