"""``attention_fwd_mma`` (kernels/attention/mma.cu): FlashAttention-2 on mma.sync for
float16 / bfloat16, the prefill of every head dim and device the wgmma kernel does not
take, and the decode (Nq <= 16) that attention_decode does not take: grouped-query heads packed
into the rows (``key_warps`` tiles), 5-16 query rows, k / v without 16-byte rows."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .merge import block_positions, check_split_covers, partial_pointers, split_plan, split_scalars

SMEM_PITCH_PAD = 8  # elements added to every shared-memory row (bank-conflict-free ldmatrix)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlashMmaTile:
    """One ``attention_fwd_mma`` instantiation and its key split: ``warps`` x ``m_tiles``
    16-row MMA slices of query rows a block, K/V tiles of ``block_n`` keys in a ``stages``
    deep cp.async ring, the keys split over ``splits`` blocks of ``keys_per_split`` keys (a
    multiple of ``stage_keys``; unused with one split) and merged by attention_merge.
    ``key_warps``: the warps share 16 x ``m_tiles`` rows and split each stage of ``warps *
    block_n`` keys (decode); such a tile runs the problem packed (``AttentionProblem.packed``)."""

    head_dim: int  # padded head dim (a head-dim bucket) covering D and Dv
    warps: int
    m_tiles: int  # 16-row MMA slices per warp
    block_n: int  # keys per K/V tile
    stages: int  # K/V tiles in flight (cp.async ring)
    min_blocks: int = 1  # __launch_bounds__ minimum blocks per SM (caps registers)
    q_in_regs: bool | None = None  # Q fragments held in registers; None: when m_tiles * head_dim <= 64
    skip_pad_cols: bool = True  # run-time skip of MMA steps beyond d / dv (else branch-free loops)
    splits: int = 1
    keys_per_split: int = 0
    key_warps: bool = False

    def __post_init__(self):
        if self.q_in_regs is None:
            object.__setattr__(self, "q_in_regs", self.m_tiles * self.head_dim <= 64)

    @property
    def block_m(self) -> int:
        return 16 * self.m_tiles * (1 if self.key_warps else self.warps)

    @property
    def stage_keys(self) -> int:
        """Keys of one K/V stage (the unit of a key split)."""
        return self.block_n * (self.warps if self.key_warps else 1)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def smem_bytes(self) -> int:
        rows = self.block_m + 2 * self.stages * self.stage_keys
        return rows * (self.head_dim + SMEM_PITCH_PAD) * 2

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warps, self.m_tiles, self.block_n, self.stages, self.min_blocks,
                self.q_in_regs, self.skip_pad_cols, self.key_warps)
        return KernelSpec("attention/mma.cu", "attention_fwd_mma", args)

    def check(self, problem, dev) -> None:
        problem.check_tile_head_dim(self.head_dim)
        problem.check_dtype("attention_fwd_mma")
        check_split_covers(problem, self.splits, self.keys_per_split,
                           block_positions(problem, self.block_m, self.key_warps))

    def plan(self, problem, dev) -> Plan:
        if self.key_warps:
            problem = problem.packed()
        q_tiles = ceil_div(problem.n_q, self.block_m)
        forward = Launch(self.spec(problem.ctype), (q_tiles * self.splits * problem.batch_count,), (self.threads,),
                         (*problem.pointers, *partial_pointers(problem, self.splits), *problem.shape_args,
                          np.int32(q_tiles), *problem.group_args,
                          *split_scalars(problem, self.splits, self.keys_per_split), *problem.sink_args),
                         smem=self.smem_bytes, pdl=dev.has_pdl)
        return split_plan(forward, problem, self.splits, dev)
