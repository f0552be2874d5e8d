"""``attention_fwd_wgmma`` (kernels/attention/wgmma.cu): the Hopper prefill on warpgroup
MMA, float16 / bfloat16, tile head dims 64, 96, 128 and 256, one key split; the default prefill on
compute capability 9.0 where its preconditions hold (select.WGMMA_PREFILL)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan

WGMMA_MIN_CC = 90  # sm_90a: warpgroup MMA exists on compute capability 9.0 only
WGMMA_SMEM_ALIGN = 1024  # the kernel aligns its tiles to the 128-byte swizzle's 1024-byte period
WGMMA_ATOM_COLUMNS = 64  # 16-bit columns of a 128-byte swizzle atom row (common/wgmma.cuh WGMMA_ATOM_N)


@dataclasses.dataclass(frozen=True)
class FlashWgmmaTile:
    """One ``attention_fwd_wgmma`` instantiation: ``warpgroups`` x 64 query rows a block, one
    (query tile, batch) item a block, K/V tiles of ``block_n`` keys in a ``stages`` deep
    cp.async ring; ``wg_ranges`` lets each warpgroup stop at its own key range (causal
    diagonal, rows past Nq) instead of the block's."""

    head_dim: int  # 64, 96, 128 or 256, covering D and Dv
    warpgroups: int
    block_n: int  # keys per K/V tile: 64 or 128
    stages: int
    min_blocks: int = 1  # __launch_bounds__ minimum blocks per SM (caps registers)
    wg_ranges: bool = True

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    @property
    def stage_keys(self) -> int:
        """Keys of one K/V stage (the unit of a key split)."""
        return self.block_n

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

    @property
    def smem_bytes(self) -> int:
        """Q and the K/V ring, rows of whole 64-column swizzle atoms (HD 96 takes 128)."""
        rows = self.block_m + 2 * self.stages * self.block_n
        return rows * ceil_div(self.head_dim, WGMMA_ATOM_COLUMNS) * WGMMA_ATOM_COLUMNS * 2 + WGMMA_SMEM_ALIGN

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warpgroups, self.block_n, self.stages, self.min_blocks, self.wg_ranges)
        return KernelSpec("attention/wgmma.cu", "attention_fwd_wgmma", args, min_cc=WGMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        problem.check_tile_head_dim(self.head_dim)
        if not dev.has_wgmma:
            raise ValueError(f"attention: argument 'config' asks for the wgmma kernel, which needs compute capability "
                             f"9.0, got {dev.cc // 10}.{dev.cc % 10}")
        problem.check_dtype("the wgmma kernel")
        if not problem.wgmma_operands:
            q_strides, k_strides, v_strides = problem.operand_strides
            raise ValueError(
                f"attention: argument 'config' expected q, k and v with unit last-axis stride and 16-byte aligned rows "
                f"and a positive scale for a wgmma tile, got element strides q {q_strides}, k {k_strides}, "
                f"v {v_strides}, scale {problem.scale}"
            )

    def plan(self, problem, dev) -> Plan:
        q_tiles = ceil_div(problem.n_q, self.block_m)
        items = q_tiles * problem.batch_count
        launch = Launch(self.spec(problem.ctype), (items,), (self.threads,),
                        (*problem.pointers, *problem.shape_args, np.int32(q_tiles), np.int32(items), problem.scale_log2,
                         np.int32(problem.vec_flags), *problem.mask_args, *problem.row_stride_args,
                         *problem.layout_args),
                        smem=self.smem_bytes)
        return Plan((launch,))
