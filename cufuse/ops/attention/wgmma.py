"""``attention_fwd_wgmma`` / ``attention_fwd_wgmma_tma`` (kernels/attention/wgmma.cu): the
Hopper prefill on warpgroup MMA, float16 / bfloat16, tile head dims 64, 96, 128 and 256, its K/V
fed by every thread's cp.async ring or by a TMA producer warpgroup (``tma``); the default
prefill on compute capability 9.0 where its preconditions hold (select.WGMMA_PREFILL). The TMA
kernel also splits keys (+ ``attention_merge``) and takes packed grouped-query rows (G x Nq rows
of one KV head): the decode calls with many packed rows (select.WGMMA_PACKED_MIN_ROWS)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core import tma as _tma
from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan, TensorMap
from .merge import block_positions, check_split_covers, partial_pointers, split_plan
from .problem import UNLIMITED

WGMMA_MIN_CC = 90  # sm_90a: warpgroup MMA exists on compute capability 9.0 only
WGMMA_SMEM_ALIGN = 1024  # the kernel aligns its tiles to the 128-byte swizzle's 1024-byte period
WGMMA_ATOM_COLUMNS = 64  # 16-bit columns of a 128-byte swizzle atom row (common/wgmma.cuh WGMMA_ATOM_N)
TMA_WARPGROUPS = (2, 3)  # consumer warpgroups the TMA kernel's register split is written for (TmaRegisters)
MBARRIER_BYTES = 8


def batch_unit(sizes, strides) -> tuple:
    """(unit, count): every batch offset of an operand with batch ``sizes`` / element ``strides``
    is a multiple of ``unit`` elements (the gcd of the non-zero strides), and the largest is
    ``(count - 1) * unit``: the third dim of its tensor map. (1, 1) where every stride is 0.
    Strides must be non-negative (FlashWgmmaTile.check refuses others)."""
    unit = math.gcd(*(int(st) for st in strides if st))
    if not unit:
        return 1, 1
    return unit, sum((size - 1) * int(st) for size, st in zip(sizes, strides)) // unit + 1


def operand_maps(problem, block_n: int) -> tuple:
    """The TMA kernel's (q, k, v) tensor maps: (columns, rows, batch unit), boxes of 64 columns x
    64 query rows (q) or ``block_n`` keys (k, v), 128-byte swizzled (the wgmma layouts)."""
    maps = []
    for (n, cols, box), strides, batch_strides in zip(
            ((problem.n_q, problem.head_dim, 64), (problem.n_k, problem.head_dim, block_n),
             (problem.n_k, problem.head_dim_v, block_n)),
            problem.operand_strides, problem.batch_strides):
        unit, count = batch_unit(problem.batch_sizes, batch_strides)
        g = _tma.geometry(problem.dtype, cols, n, strides[-2], WGMMA_ATOM_COLUMNS, box)
        maps.append(_tma.batched(g, count, unit))
    return tuple(maps)


def packs_uniformly(problem) -> bool:
    """q's rows stay one row stride apart once its query heads are packed (``AttentionProblem.packed``:
    k and v broadcast over q's innermost batch dim), so that one tensor map row covers G x Nq rows."""
    packed = problem.packed()
    return packed.group > 1 and packed.q_group_stride == packed.queries * packed.operand_strides[0][-2]


def tma_refusal(problem, block_n: int = 64) -> str | None:
    """Why tensor maps cannot describe q, k and v of ``problem`` (whose bases are 16-byte aligned
    with 16-byte rows: ``wgmma_operands``), or None; the message completes "the TMA kernel ...".
    The key box (``block_n``) never fails: the driver takes boxes of up to 256 rows."""
    for name, strides in zip("qkv", problem.batch_strides):
        # the kernel's batch coordinate is offset / unit (int32) from the array's own base: a negative
        # batch stride puts items before it (zero-filled by the TMA, silently wrong results)
        if any(st < 0 for st in strides):
            return f"needs non-negative batch strides, got '{name}' batch strides {strides}"
    return maps_refusal(operand_maps(problem, block_n))


def maps_refusal(maps) -> str | None:
    """Why the TMA kernels cannot take the (q, k, v) tensor ``maps`` (their slab coordinate is an
    int32; the driver's rules), or None; the message completes "the TMA kernel ..."."""
    for name, g in zip("qkv", maps):
        if g.batch >= 1 << 31:
            return f"has an int32 batch coordinate, which '{name}' ({g.batch} units) overflows"
        why = _tma.map_problem(g, 0)
        if why is not None:
            return f"cannot map '{name}': {why}"
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlashWgmmaTile:
    """One ``attention_fwd_wgmma`` / ``attention_fwd_wgmma_tma`` instantiation: ``warpgroups``
    x 64 query rows a block, one (query tile, key split, batch) item a block, K/V tiles of
    ``block_n`` keys in a ``stages`` deep ring, filled by cp.async or (``tma``) by a producer
    warpgroup whose consumers take turns issuing their wgmmas (ping-pong); ``wg_ranges`` lets
    each warpgroup stop at its own key range (causal diagonal, rows past Nq) instead of the
    block's (always, with ``tma``). The TMA kernel only: keys split over ``splits`` blocks of ``keys_per_split``
    keys (a multiple of ``block_n``, from the block's first window start), and ``packed``: the G
    query heads sharing a KV head as the G x Nq rows of one item (``AttentionProblem.packed``)."""

    head_dim: int  # 64, 96, 128 or 256, covering D and Dv
    warpgroups: int
    block_n: int  # keys per K/V tile: 64 or 128
    stages: int
    min_blocks: int = 1  # __launch_bounds__ minimum blocks per SM (caps registers)
    wg_ranges: bool = True
    tma: bool = False  # a producer warpgroup loads Q, K and V through tensor maps (attention_fwd_wgmma_tma)
    splits: int = 1
    keys_per_split: int = 0
    packed: bool = False

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    @property
    def stage_keys(self) -> int:
        """Keys of one K/V stage (the unit of a key split)."""
        return self.block_n

    @property
    def threads(self) -> int:
        return 128 * (self.warpgroups + self.tma)

    @property
    def smem_bytes(self) -> int:
        """Q and the K/V ring, rows of whole 64-column swizzle atoms (HD 96 takes 128); the TMA
        kernel's mbarriers after them (Q's full, then full and empty of K and V per stage)."""
        rows = self.block_m + 2 * self.stages * self.block_n
        barriers = (1 + 4 * self.stages) * MBARRIER_BYTES if self.tma else 0
        return rows * ceil_div(self.head_dim, WGMMA_ATOM_COLUMNS) * WGMMA_ATOM_COLUMNS * 2 + barriers + WGMMA_SMEM_ALIGN

    def spec(self, dtype_ctype: str) -> KernelSpec:
        if self.tma:
            args = (dtype_ctype, self.head_dim, self.warpgroups, self.block_n, self.stages)
            return KernelSpec("attention/wgmma.cu", "attention_fwd_wgmma_tma", args, min_cc=WGMMA_MIN_CC)
        args = (dtype_ctype, self.head_dim, self.warpgroups, self.block_n, self.stages, self.min_blocks, self.wg_ranges)
        return KernelSpec("attention/wgmma.cu", "attention_fwd_wgmma", args, min_cc=WGMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        if not self.tma and (self.splits > 1 or self.packed):
            raise ValueError(f"attention: argument 'config' expected a TMA tile (tma=True) for key splits or packed "
                             f"rows, got splits {self.splits}, packed {self.packed}")
        if self.packed and not packs_uniformly(problem):
            raise ValueError("attention: argument 'config' asks for packed rows, which need k and v broadcast over q's "
                             "innermost batch dim and q's query heads a row stride apart (its group stride = Nq x row "
                             f"stride), got q strides {problem.operand_strides[0]}")
        check_split_covers(problem, self.splits, self.keys_per_split, block_positions(problem, self.block_m, self.packed))
        if self.tma and (self.warpgroups not in TMA_WARPGROUPS or self.min_blocks != 1):
            raise ValueError(f"attention: argument 'config' expected a TMA tile of {TMA_WARPGROUPS} warpgroups and "
                             f"min_blocks 1, got {self.warpgroups} warpgroups, min_blocks {self.min_blocks}")
        if self.tma and not self.wg_ranges:
            raise ValueError("attention: argument 'config' expected a TMA tile with per-warpgroup key ranges "
                             "(wg_ranges=True), got wg_ranges=False")
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
        if self.tma:  # the bases are 16-byte aligned (wgmma_operands): only the geometry can fail
            if self.warpgroups == 3 and self.head_dim > 128:  # 160 registers a consumer: no m64n256 accumulator
                raise ValueError(f"attention: argument 'config' expected a TMA tile of head dim at most 128 with 3 "
                                 f"warpgroups, got head dim {self.head_dim}")
            why = tma_refusal(problem.packed() if self.packed else problem, self.block_n)
            if why is not None:
                raise ValueError(f"attention: argument 'config' asks for the TMA kernel, which {why}")

    def plan(self, problem, dev) -> Plan:
        if self.packed:
            problem = problem.packed()
        q_tiles = ceil_div(problem.n_q, self.block_m)
        items = q_tiles * problem.batch_count
        if self.tma:
            units = tuple(np.int64(batch_unit(problem.batch_sizes, strides)[0]) for strides in problem.batch_strides)
            maps = tuple(TensorMap(name, g) for name, g in zip("qkv", operand_maps(problem, self.block_n)))
            keys = self.keys_per_split if self.splits > 1 else problem.n_k
            period = problem.queries_per_group if self.packed else UNLIMITED  # kernels' kUnpacked
            launch = Launch(self.spec(problem.ctype), (items * self.splits,), (self.threads,),
                            ("out", problem.lse_arg, *partial_pointers(problem, self.splits),
                             *problem.shape_args[:2], problem.shape_args[3], np.int32(q_tiles), np.int32(self.splits),
                             np.int32(keys), np.int32(period), problem.scale_log2, np.int32(problem.flags),
                             *problem.mask_args, *units, *problem.layout_args, *maps, *problem.sink_args),
                            smem=self.smem_bytes, pdl=self.packed and dev.has_pdl)  # decode: launch gaps weigh
            return split_plan(launch, problem, self.splits, dev)
        launch = Launch(self.spec(problem.ctype), (items,), (self.threads,),
                        (*problem.pointers, *problem.shape_args, np.int32(q_tiles), np.int32(items), problem.scale_log2,
                         np.int32(problem.vec_flags), *problem.mask_args, *problem.row_stride_args,
                         *problem.layout_args, *problem.sink_args),
                        smem=self.smem_bytes)
        return Plan((launch,))
