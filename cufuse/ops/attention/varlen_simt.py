"""``attention_varlen_simt`` (kernels/attention/varlen.cu): ``attention_varlen`` on the GPU for
every dtype, one warp a (token, query head) row that finds its sequence by a binary search
over ``cu_seqlens_q`` on the device (no host synchronisation). Exact in the accumulator type;
scalar loads, no tensor cores: correctness first (speed: docs/attention.md)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import accumulator_dtype
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .problem import UNLIMITED

CTYPES = ("__half", "__nv_bfloat16", "float", "double")


@dataclasses.dataclass(frozen=True, kw_only=True)
class VarlenSimtRows:
    """``attention_varlen_simt`` with ``warps`` rows (one a warp) a block."""

    warps: int = 4

    def spec(self, dtype_ctype: str) -> KernelSpec:
        return KernelSpec("attention/varlen.cu", "attention_varlen_simt", (dtype_ctype, self.warps))

    def check(self, problem, dev) -> None:
        """Any problem: every dtype, head dim up to 256 and stride, B = 0 included."""

    def plan(self, problem, dev) -> Plan:
        """The launch of a ``VarlenProblem``: (ceil(Tq / warps), Hq) blocks."""
        p = problem
        scalar = accumulator_dtype(p.dtype).type
        left, right = (-1 if side < 0 else min(side, UNLIMITED) for side in p.window)
        args = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "out", p.lse_arg, np.int32(p.batch),
                np.int32(p.tokens_q), np.int32(p.tokens_k), np.int32(p.heads_q), np.int32(p.group),
                np.int32(p.head_dim), np.int32(p.head_dim_v), scalar(p.scale), scalar(p.softcap or 1.0),
                np.int32(left), np.int32(right), np.int32(p.flags), *(np.int64(s) for strides in p.strides for s in strides),
                *(np.int64(s) for s in p.cu_strides), *p.sink_args)
        launch = Launch(self.spec(p.ctype), (ceil_div(p.tokens_q, self.warps), p.heads_q), (32 * self.warps,), args)
        return Plan((launch,))


def instantiations() -> list:
    """Every kernel ``attention_varlen`` can launch."""
    return [VarlenSimtRows().spec(name) for name in CTYPES]
