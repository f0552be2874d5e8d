"""``paged_attention_simt`` (kernels/paged_attention/simt.cu): float32 / float64 without
tensor cores, exact, one warp a query row (unpacked or packed)."""
from __future__ import annotations

import dataclasses

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .problem import FN

SIMT_CTYPES = ("float", "double")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PagedSimtRows:
    """``paged_attention_simt`` with ``warps`` query rows (one a warp) a block."""

    warps: int = 4

    def spec(self, dtype_ctype: str) -> KernelSpec:
        return KernelSpec("paged_attention/simt.cu", "paged_attention_simt", (dtype_ctype, self.warps))

    def check(self, problem, dev) -> None:
        if problem.ctype not in SIMT_CTYPES:
            raise ValueError(f"{FN}: argument 'config' asks for paged_attention_simt, which takes float32 or "
                             f"float64, got {problem.dtype}")

    def plan(self, problem, dev) -> Plan:
        rows = (1 if problem.packed else problem.batch) * problem.heads_q * problem.n_q
        scalar = problem.dtype.type
        launch = Launch(self.spec(problem.ctype), (ceil_div(rows, self.warps),), (32 * self.warps,),
                        (*problem.pointers, *problem.shape_args, *problem.query_args, scalar(problem.scale),
                         scalar(problem.softcap),
                         *problem.mask_args, *problem.stride_args, *problem.sink_args))
        return Plan((launch,))
