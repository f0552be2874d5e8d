"""``attention_varlen_simt`` (kernels/attention/varlen.cu): ``attention_varlen`` on the GPU for
every dtype, one warp a (token, query head) row that finds its sequence by a binary search
over ``cu_seqlens_q`` on the device (no host synchronisation). Exact in the accumulator type;
scalar loads, no tensor cores: correctness first (speed: docs/attention.md)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import accumulator_dtype, ctype
from ..._core.loader import KernelSpec
from ..._core.plans import NULL, Launch, Plan
from .problem import FLAG_CAUSAL, FLAG_SOFTCAP, FLAG_WRITE_LSE, UNLIMITED

FN = "attention_varlen"
CTYPES = ("__half", "__nv_bfloat16", "float", "double")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VarlenSimtRows:
    """``attention_varlen_simt`` with ``warps`` rows (one a warp) a block."""

    warps: int = 4

    def spec(self, dtype_ctype: str) -> KernelSpec:
        return KernelSpec("attention/varlen.cu", "attention_varlen_simt", (dtype_ctype, self.warps))

    def plan(self, shapes: dict, strides: dict, dtype, causal: bool, scale: float, window: tuple, softcap,
             return_lse: bool, sink_heads: int) -> Plan:
        """``shapes`` / ``strides`` (in elements) of q, k, v, cu_seqlens_q and cu_seqlens_k by name; ``window``
        (left, right) with -1 for an unlimited side; ``softcap`` None or a positive float."""
        n_tokens_q, heads_q, head_dim = shapes["q"]
        n_tokens_k, heads_kv, _ = shapes["k"]
        scalar = accumulator_dtype(dtype).type
        flags = (FLAG_CAUSAL if causal else 0) | (FLAG_WRITE_LSE if return_lse else 0) | (
            FLAG_SOFTCAP if softcap else 0)
        left, right = (-1 if side < 0 else min(side, UNLIMITED) for side in window)
        sink_args = ("sinks", np.int32(sink_heads)) if sink_heads else (NULL, np.int32(0))
        lse = "lse" if return_lse else "out"  # not written without the flag
        args = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "out", lse,
                np.int32(shapes["cu_seqlens_q"][0] - 1), np.int32(n_tokens_q), np.int32(n_tokens_k),
                np.int32(heads_q), np.int32(heads_q // heads_kv), np.int32(head_dim), np.int32(shapes["v"][2]),
                scalar(scale), scalar(softcap or 1.0), np.int32(left), np.int32(right), np.int32(flags),
                *(np.int64(s) for name in ("q", "k", "v") for s in strides[name]),
                np.int64(strides["cu_seqlens_q"][0]), np.int64(strides["cu_seqlens_k"][0]), *sink_args)
        launch = Launch(self.spec(ctype(dtype)), (ceil_div(n_tokens_q, self.warps), heads_q), (32 * self.warps,),
                        args)
        return Plan((launch,))


def instantiations() -> list:
    """Every kernel ``attention_varlen`` can launch."""
    return [VarlenSimtRows().spec(name) for name in CTYPES]
