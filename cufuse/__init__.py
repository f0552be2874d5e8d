"""cufuse: fused GPU kernels for NumPy-style Python.

Every op takes GPU arrays (runs the CUDA kernels of ``kernels/``) or NumPy arrays (runs the
float64 oracles of ``cufuse.reference``). The ops live in ``cufuse.ops.<op>``; their public
functions are loaded on first use.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "softmax": "cufuse.ops.softmax",
    "log_softmax": "cufuse.ops.softmax",
    "logsumexp": "cufuse.ops.logsumexp",
    "fused_linear_relu": "cufuse.ops.linear",
    "fused_linear": "cufuse.ops.linear",
    "fused_gated_linear": "cufuse.ops.linear",
    "attention": "cufuse.ops.attention",
    "attention_varlen": "cufuse.ops.attention",
    "attention_paged": "cufuse.ops.paged_attention",
    "kv_append": "cufuse.ops.paged_attention",
    "trace": "cufuse.tracing",
}
__all__ = sorted(_PUBLIC) + ["reference", "traffic", "__version__"]


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        if name in ("reference", "traffic"):
            return importlib.import_module(f"cufuse.{name}")
        raise AttributeError(f"module 'cufuse' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
