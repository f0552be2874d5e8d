"""``paged_attention_mma`` (kernels/paged_attention/mma.cu) and its merge
``paged_attention_merge`` (merge.cu): float16 / bfloat16 PagedAttention on mma.sync, one
block per (work unit, KV head, row block) with the KV head's G x (the unit's queries) query
rows packed into its MMA rows."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import SMEM_RESERVED_PER_BLOCK, ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan, Temporary
from ..._core.lse_merge import merge_grid, merge_threads
from .problem import FN

MMA_CTYPES = ("__half", "__nv_bfloat16")
THREADS = 128  # the kernels' __launch_bounds__ (4 warps)
SMEM_PITCH_PAD = 8  # elements added to every shared-memory row (mma.cu kPitch)
OFFSET_BYTES = 16  # a key's {k, v} offsets in the page pools (mma.cu offsets_s)
STATIC_SMEM = 256  # find_unit's arrays (paged.cuh)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PagedMmaTile:
    """One ``paged_attention_mma`` instantiation: ``row_warps`` warps of 16 query rows (the
    other 4 / row_warps warps a row warp's key warps), K/V tiles of ``block_n`` keys in a
    ``stages`` deep cp.async ring; the schedule aims at ``target_units`` blocks and cuts no
    sequence into chunks under ``min_chunk`` keys."""

    head_dim: int  # padded head dim (64, 128 or 256) covering D and Dv
    row_warps: int  # 1, 2 or 4
    block_n: int
    stages: int
    target_units: int
    min_chunk: int

    @property
    def block_rows(self) -> int:
        return 16 * self.row_warps

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the Q rows, the K/V ring and two tiles of row offsets (two
        int64 a key)."""
        ring = (self.block_rows + 2 * self.stages * self.block_n) * (self.head_dim + SMEM_PITCH_PAD) * 2
        return ring + 2 * self.block_n * OFFSET_BYTES

    @property
    def chunk_floor(self) -> int:
        """The smallest chunk the schedule cuts (min_chunk rounded up to block_n)."""
        return ceil_div(self.min_chunk, self.block_n) * self.block_n

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.row_warps, self.block_n, self.stages)
        return KernelSpec("paged_attention/mma.cu", "paged_attention_mma", args)

    def check(self, problem, dev) -> None:
        if self.head_dim < problem.width:
            raise ValueError(f"{FN}: argument 'config' expected a tile head dim >= {problem.width}, got {self.head_dim}")
        if problem.ctype not in MMA_CTYPES:
            raise ValueError(f"{FN}: argument 'config' asks for paged_attention_mma, which takes float16 or bfloat16, "
                             f"got {problem.dtype}")
        if self.smem_bytes > dev.max_smem_per_block:
            raise ValueError(f"{FN}: argument 'config' needs {self.smem_bytes} B of shared memory, the device has "
                             f"{dev.max_smem_per_block}")

    def plan(self, problem, dev) -> Plan:
        row_blocks = ceil_div(problem.rows, self.block_rows)
        heads = problem.heads_kv * row_blocks
        may_split = problem.max_visible_keys > self.chunk_floor
        # the schedule makes at most target_units / heads + (the query tiles) units (paged.cuh find_unit)
        units = ceil_div(self.target_units, heads) + problem.query_tiles if may_split else problem.query_tiles
        partials = (Temporary(0), Temporary(1)) if may_split else ("out", problem.lse_arg)
        meta = Temporary(2) if may_split else Temporary(0)
        forward = Launch(self.spec(problem.ctype), (units, heads), (THREADS,),
                         (*problem.pointers, *partials, meta, *problem.shape_args, *problem.query_args,
                          np.int32(problem.q_tile), np.int32(row_blocks),
                          np.int32(self.target_units), np.int32(self.min_chunk), problem.scale_log2,
                          problem.softcap_log2, *problem.mask_args, *problem.stride_args, *problem.sink_args),
                         smem=self.smem_bytes, pdl=dev.has_pdl)
        meta_buffer = (np.int32, (problem.batch, 2))
        if not may_split:
            return Plan((forward,), temporaries=(meta_buffer,))
        unit_rows = problem.heads_kv * problem.rows
        out_rows = (problem.n_q if problem.packed else problem.batch * problem.n_q) * problem.heads_q
        merge = Launch(merge_spec(problem.ctype), merge_grid(out_rows, problem.head_dim_v),
                       (merge_threads(self.most_units_a_tile(problem, heads)),),
                       (Temporary(0), Temporary(1), Temporary(2), "out", problem.lse_arg, np.int32(problem.batch),
                        np.int32(problem.heads_q), np.int32(problem.group), np.int32(problem.n_q),
                        *problem.query_args, np.int32(problem.q_tile), np.int32(problem.head_dim_v),
                        np.int32(problem.return_lse), np.int32(units)), pdl=dev.has_pdl)
        return Plan((forward, merge), temporaries=((np.float32, (units, unit_rows, problem.head_dim_v)),
                                                   (np.float32, (units, unit_rows)), meta_buffer))

    def most_units_a_tile(self, problem, heads) -> int:
        """The host's bound on the units of one query tile: chunks are at least chunk_floor, and
        find_unit gives a tile at most ceil(target_units / heads) (its keys never outweigh the
        batch's); the merge's warps. Sized by the whole grid's units instead, 16K merge blocks of
        800 threads that mostly return at once cost ~30 us at B128 x 1024 keys."""
        return max(1, min(ceil_div(self.target_units, heads), ceil_div(problem.max_visible_keys, self.chunk_floor)))

    def resident_blocks(self, dev) -> int:
        """Blocks an SM holds by shared memory (the schedule's target counts on them), at most 4."""
        return max(1, min(4, dev.smem_per_sm // (self.smem_bytes + STATIC_SMEM + SMEM_RESERVED_PER_BLOCK)))


def merge_spec(dtype_ctype: str) -> KernelSpec:
    return KernelSpec("paged_attention/merge.cu", "paged_attention_merge", (dtype_ctype,))
