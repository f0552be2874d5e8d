"""``attention_fwd_simt`` (kernels/attention/simt.cu): float32 / float64 without tensor
cores, exact, one warp a query row."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan

SIMT_CTYPES = ("float", "double")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimtRows:
    """``attention_fwd_simt`` with ``warps`` query rows (one a warp) a block."""

    warps: int = 4

    def spec(self, dtype_ctype: str) -> KernelSpec:
        return KernelSpec("attention/simt.cu", "attention_fwd_simt", (dtype_ctype, self.warps))

    def check(self, problem, dev) -> None:
        """Any problem: the kernel takes any head dim up to 256 and any strides."""

    def plan(self, problem, dev) -> Plan:
        q_tiles = ceil_div(problem.n_q, self.warps)
        launch = Launch(self.spec(problem.ctype), (q_tiles * problem.batch_count,), (32 * self.warps,),
                        (*problem.pointers, *problem.shape_args, np.int32(q_tiles), problem.dtype.type(problem.scale),
                         np.int32(problem.flags), problem.dtype.type(problem.softcap or 1.0), *problem.band_args,
                         *problem.stride_args, *problem.layout_args, *problem.sink_args))
        return Plan((launch,))
