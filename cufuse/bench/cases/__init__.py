"""The benchmark grids, one module per op, and the implementations compared on them.

A ``Case`` is one op on one shape and dtype: its traffic model, how to make one input
set (output buffer included), cufuse's call and the peers' calls. The command line
(``python -m cufuse.bench``) and the pytest-benchmark suite (``bench/``) both take their
cases from here, so the two measure the same thing.
"""
from __future__ import annotations

from .attention import (ATTENTION_DTYPES, ATTENTION_HEAD_DIMS, ATTENTION_HEADS, ATTENTION_N, ATTENTION_TOKENS,
                        DECODE_BATCH, DECODE_HEAD_DIM, DECODE_HEADS, DECODE_KEYS, GQA_DECODE_SHAPES, GQA_MAX_KV_HEADS,
                        SINK_SHAPES, UNFUSED_ATTENTION_MAX_SCORES, attention_case, attention_cases, decode_case,
                        gqa_decode_case, gqa_decode_cases, gqa_decode_class, prefill_case, sdpa_peers, sinks_case)
from .attention_varlen import (RAGGED_CLASS, RAGGED_HEAD_DIMS, RAGGED_HEADS, RAGGED_LENGTHS, RAGGED_SEQUENCES,
                               attention_varlen_cases, dense_length, ragged_case, ragged_lengths)
from .common import (TORCH, UNFUSED, Case, Impl, activation_unfused, array_module, attention_unfused, gated_unfused,
                     linear_relu_unfused, log_softmax_unfused, random_values, resolve_dtype, softmax_unfused, to_torch,
                     torch_inputs, torch_module)
from .linear import (EPILOGUES, LINEAR_DTYPES, LINEAR_LAYOUTS, LINEAR_SHAPES, MODEL_GATED, MODEL_PROJECTIONS, MODEL_ROWS,
                     SMALL_M, WIDE_STREAM_ROWS, epilogue_cases, gated_case, linear_act_case, linear_case, linear_cases)
from .logsumexp import LOGSUMEXP_DTYPES, LOGSUMEXP_SHAPES, logsumexp_case, logsumexp_cases
from .paged_attention import (MIXED_STEP, MIXED_STEP_BASE, MIXED_STEP_CLASSES, PAGED_BASE, PAGED_CLASSES, PAGED_MIXED,
                              PAGED_QUICK, mixed_step_case, mixed_step_cases, paged_case, paged_cases, paged_class)
from .softmax import (COPY_OF_VIEW, SOFTMAX_CLASS_DTYPES, SOFTMAX_CLASSES, SOFTMAX_DTYPES, SOFTMAX_ROWS,
                      softmax_case, softmax_cases, softmax_class_cases)

OPS = {"softmax": softmax_cases, "logsumexp": logsumexp_cases, "linear": linear_cases, EPILOGUES: epilogue_cases,
       "attention": attention_cases, "paged_attention": paged_cases, "attention_varlen": attention_varlen_cases,
       MIXED_STEP: mixed_step_cases}


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
