"""``attention_varlen_wgmma_tma`` (kernels/attention/wgmma.cu): ``attention_varlen`` on the
Hopper prefill kernel, float16 / bfloat16, compute capability 9.0: the block body and consumer
loop of ``attention_fwd_wgmma_tma`` on work items found on the device from cu_seqlens (no host
synchronisation), tensor maps over the packed (T, H, D) arrays.

The tile mapping (``first_tile``, ``sequence_of_tile``) is the kernel's ``VarlenSequences`` /
``varlen_item`` in Python, so that the CPU tests check its arithmetic: sequence b owns the
virtual query tiles [f(b), f(b) + ceil(len_q(b) / BM)) with f(b) = floor(cu_q[b] / BM) + b,
all below ``tile_count`` = floor(Tq / BM) + B, the grid's extent per query head."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core import tma as _tma
from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan, TensorMap
from .problem import MMA_CTYPES, UNLIMITED
from .varlen_problem import FN
from .wgmma import TMA_WARPGROUPS, WGMMA_ATOM_COLUMNS, WGMMA_MIN_CC, FlashWgmmaTile, maps_refusal

LANES = 32  # candidates a search round tests (one a lane of the warp)


def tile_count(tokens_q: int, batch: int, block_m: int) -> int:
    """Virtual query tiles a query head (the grid's x extent): floor(Tq / BM) + B."""
    return tokens_q // block_m + batch


def first_tile(cu_q, b: int, block_m: int, tokens_q: int) -> int:
    """f(b): sequence b's first virtual tile (its offset clamped to [0, Tq], as the kernel does)."""
    return min(max(int(cu_q[b]), 0), tokens_q) // block_m + b


def sequence_of_tile(cu_q, tile: int, block_m: int, tokens_q: int):
    """``(b, rank)``: virtual tile ``tile`` is tile ``rank`` of sequence b (before the causal
    reversal), or None where it lies past its sequence's tiles. The kernel's search: rounds of
    LANES candidates lo, lo + step, ... whose f <= tile form a prefix (f strictly increases)."""
    batch = len(cu_q) - 1
    if batch <= 0:
        return None
    lo, n = 0, batch
    while n > 1:
        step = ceil_div(n, LANES)
        below = sum(lane * step < n and first_tile(cu_q, lo + lane * step, block_m, tokens_q) <= tile
                    for lane in range(LANES))
        skip = max(below - 1, 0) * step
        lo, n = lo + skip, min(step, n - skip)
    begin = min(max(int(cu_q[lo]), 0), tokens_q)
    end = max(min(max(int(cu_q[lo + 1]), 0), tokens_q), begin)
    rank = tile - first_tile(cu_q, lo, block_m, tokens_q)
    return (lo, rank) if 0 <= rank < ceil_div(end - begin, block_m) else None


def operand_maps(problem, block_n: int) -> tuple:
    """The (q, k, v) tensor maps over the packed arrays: (columns, tokens, heads), rows the token
    stride apart and slabs the head stride; boxes of 64 columns x 64 query rows (q) or ``block_n``
    keys (k, v), 128-byte swizzled (the wgmma layouts)."""
    maps = []
    for (tokens, heads, cols, box), strides in zip(
            ((problem.tokens_q, problem.heads_q, problem.head_dim, 64),
             (problem.tokens_k, problem.heads_kv, problem.head_dim, block_n),
             (problem.tokens_k, problem.heads_kv, problem.head_dim_v, block_n)), problem.strides):
        g = _tma.geometry(problem.dtype, cols, tokens, strides[0], WGMMA_ATOM_COLUMNS, box)
        maps.append(_tma.batched(g, heads, strides[1]))
    return tuple(maps)


def refusal(problem, dev, block_n: int = 64) -> str | None:
    """Why ``attention_varlen_wgmma_tma`` cannot run ``problem`` on ``dev``, or None; the message
    completes "the wgmma kernel ...". The key box (``block_n``) never fails."""
    p = problem
    if not dev.has_wgmma:
        return f"needs compute capability 9.0, got {dev.cc // 10}.{dev.cc % 10}"
    if p.ctype not in MMA_CTYPES:
        return f"takes float16 or bfloat16, got {p.dtype}"
    if p.batch < 1:
        return "needs at least one sequence (cu_seqlens of B + 1 >= 2 entries), got B = 0"
    if p.scale <= 0 and not p.softcap:
        return f"needs a positive scale or a softcap, got scale {p.scale}"
    if p.tokens_q + p.tokens_k >= UNLIMITED:
        return f"needs Tq + Tk below {UNLIMITED}, got {p.tokens_q} + {p.tokens_k}"
    for name, strides, cols, aligned in zip("qkv", p.strides, (p.head_dim, p.head_dim, p.head_dim_v), p.aligned):
        if strides[2] != 1 or cols % 8 or any(st % 8 for st in strides[:2]) or not aligned:
            return (f"needs '{name}' with unit column stride, a head dim and token and head strides of multiples "
                    f"of 8 elements and a 16-byte aligned base, got head dim {cols}, element strides {strides}, "
                    f"aligned {aligned}")
    return maps_refusal(operand_maps(p, block_n))


@dataclasses.dataclass(frozen=True, kw_only=True)
class VarlenWgmmaTile:
    """One ``attention_varlen_wgmma_tma`` instantiation: the TMA tile of ``attention_fwd_wgmma_tma``
    (``warpgroups`` consumer warpgroups of 64 query rows, ``block_n``-key tiles in a ``stages``
    deep ring, a producer warpgroup) on one (virtual query tile, query head) a block."""

    head_dim: int  # 64, 96, 128 or 256, covering D and Dv
    warpgroups: int
    block_n: int
    stages: int

    @classmethod
    def of(cls, tile: FlashWgmmaTile) -> "VarlenWgmmaTile":
        """The varlen kernel on a dense TMA tile."""
        return cls(head_dim=tile.head_dim, warpgroups=tile.warpgroups, block_n=tile.block_n, stages=tile.stages)

    @property
    def dense(self) -> FlashWgmmaTile:
        """The dense TMA tile whose block body this kernel runs (threads, shared memory)."""
        return FlashWgmmaTile(head_dim=self.head_dim, warpgroups=self.warpgroups, block_n=self.block_n,
                              stages=self.stages, tma=True)

    @property
    def block_m(self) -> int:
        return self.dense.block_m

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warpgroups, self.block_n, self.stages)
        return KernelSpec("attention/wgmma.cu", "attention_varlen_wgmma_tma", args, min_cc=WGMMA_MIN_CC)

    def check(self, problem, dev) -> None:
        if self.warpgroups not in TMA_WARPGROUPS or (self.warpgroups == 3 and self.head_dim > 128):
            raise ValueError(f"{FN}: argument 'config' expected a tile of {TMA_WARPGROUPS} warpgroups (3 up to head "
                             f"dim 128), got {self.warpgroups} warpgroups at head dim {self.head_dim}")
        if self.head_dim < problem.width:
            raise ValueError(f"{FN}: argument 'config' expected a tile head dim >= {problem.width}, "
                             f"got {self.head_dim}")
        why = refusal(problem, dev, self.block_n)
        if why is not None:
            raise ValueError(f"{FN}: argument 'config' asks for the wgmma kernel, which {why}")

    def plan(self, problem, dev) -> Plan:
        """(floor(Tq / BM) + B, Hq) blocks, from the shapes alone."""
        p = problem
        left, right = p.sides
        maps = tuple(TensorMap(name, g) for name, g in zip("qkv", operand_maps(p, self.block_n)))
        args = ("out", p.lse_arg, "cu_seqlens_q", "cu_seqlens_k", np.int32(p.batch), np.int32(p.tokens_q),
                np.int32(p.tokens_k), np.int32(p.heads_q), np.int32(p.group), np.int32(p.head_dim_v), p.scale_log2,
                np.int32(p.flags), p.softcap_log2, np.int32(left), np.int32(right),
                *(np.int64(s) for s in p.cu_strides), *maps, *p.sink_args)
        grid = (tile_count(p.tokens_q, p.batch, self.block_m), p.heads_q)
        launch = Launch(self.spec(p.ctype), grid, (self.dense.threads,), args, smem=self.dense.smem_bytes)
        return Plan((launch,))
