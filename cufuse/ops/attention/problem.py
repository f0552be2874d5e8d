"""One attention call as the variants see it (pure): shapes, the collapsed batch layout,
dtype and flags, and the kernel arguments every forward kernel shares."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core.attention_call import AttentionCall
from .layout import batch_layout, rows_16b

FN = "attention"
MMA_CTYPES = ("__half", "__nv_bfloat16")  # the tensor-core kernels' dtypes
# Run-time flag bits of the forward kernels (kernels/common/attention_layout.cuh: enum Flags).
FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_VEC_Q, FLAG_VEC_K, FLAG_VEC_V, FLAG_SOFTCAP = 1, 2, 4, 8, 16, 32
# layout.cuh kUnlimited: the band of an unlimited window side; Nk + Nq must stay below it, so
# that no sum of a query, a key and a band overflows 32 bits.
UNLIMITED = 1 << 30
NO_WINDOW = (-1, -1)


def key_span(positions: int, n_k: int, causal: bool, window: tuple) -> int:
    """The most keys a block whose rows hold ``positions`` consecutive query positions visits:
    from its first row's window start to its last row's window end (``window`` (left, right),
    -1 unlimited; causal caps right at 0), within [0, n_k). Key splits divide this span."""
    left, right = window
    right = 0 if causal else right
    if left < 0 or right < 0:
        return n_k
    return min(n_k, positions + left + right)


@dataclasses.dataclass(frozen=True)
class AttentionProblem(AttentionCall):
    """q ``(batch, n_q, head_dim)``, k ``(batch, n_k, head_dim)``, v ``(batch, n_k,
    head_dim_v)`` with element strides ``operand_strides`` (q, k, v), the broadcast batch
    collapsed into ``batch_sizes`` and per-operand ``batch_strides``; ``vec16`` (q, k, v):
    16-byte loads apply. ``window`` (left, right), -1 for unlimited on a side (causal caps the
    right at 0 in the kernels); ``softcap`` 0 for none; ``sink_heads`` the length H of the call's
    sinks (0: none), the kernels' batch item b (row r of a packed one: item ``b * G + r //
    queries``) taking ``sinks[item % H]``.

    A packed problem (``packed()``: k and v broadcast over q's innermost batch dim, G query
    heads of one KV head) has ``n_q = G * queries`` rows: row r is query ``r % queries`` of
    group ``r // queries``, q's address ``(r // queries) * q_group_stride + (r % queries) *
    q row stride``; out and lse rows stay contiguous (that dim is next to Nq in them)."""

    FLAG_BITS = (FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_SOFTCAP)

    n_q: int
    n_k: int
    head_dim: int
    head_dim_v: int
    batch: tuple
    dtype: np.dtype
    causal: bool
    scale: float
    return_lse: bool
    operand_strides: tuple
    batch_sizes: tuple
    batch_strides: tuple
    vec16: tuple
    window: tuple = NO_WINDOW
    softcap: float = 0.0
    queries: int = 0  # query rows of one group (0: n_q, not packed)
    q_group_stride: int = 0
    sink_heads: int = 0

    @property
    def queries_per_group(self) -> int:
        return self.queries or self.n_q

    @property
    def group(self) -> int:
        """Query heads packed into the rows (1: not packed)."""
        return self.n_q // self.queries_per_group if self.n_q else 1

    def packed(self) -> "AttentionProblem":
        """The problem with q's innermost batch dim folded into the rows where k and v
        broadcast over it (stride 0) and q does not, so one tile of rows reads each K/V tile
        once for the whole group; else ``self``. Only kernels taking ``group_args`` run it."""
        size = self.batch_sizes[-1]
        q_stride, k_stride, v_stride = (strides[-1] for strides in self.batch_strides)
        if self.queries or size == 1 or k_stride or v_stride or not q_stride:
            return self
        batch_sizes = (1,) + self.batch_sizes[:-1]
        batch_strides = tuple((0,) + strides[:-1] for strides in self.batch_strides)
        return dataclasses.replace(self, n_q=self.n_q * size, batch=(self.batch_count // size,),
                                   batch_sizes=batch_sizes, batch_strides=batch_strides, queries=self.n_q,
                                   q_group_stride=q_stride)

    @property
    def group_args(self) -> tuple:
        """(queries a group, q's group stride) of the kernels that take packed rows."""
        return (np.int32(self.queries_per_group), np.int64(self.q_group_stride))

    @property
    def batch_count(self) -> int:
        return math.prod(self.batch)

    def key_span(self, positions: int) -> int:
        return key_span(positions, self.n_k, self.causal, self.window)

    @property
    def kv_rows_16b(self) -> bool:
        return self.vec16[1] and self.vec16[2]

    @property
    def wgmma_operands(self) -> bool:
        """attention_fwd_wgmma's preconditions: 16-byte rows everywhere, a positive scale (the
        kernel scales the row max once) or a softcap (tanh first, then the positive c)."""
        return all(self.vec16) and (self.scale > 0 or self.softcap > 0)

    @property
    def pointers(self) -> tuple:
        """The forward kernels' leading pointer arguments."""
        return ("q", "k", "v", "out", self.lse_arg)

    @property
    def vec_flags(self) -> int:
        """``flags`` with the 16-byte load bits (the tensor-core kernels)."""
        bits = (FLAG_VEC_Q, FLAG_VEC_K, FLAG_VEC_V)
        return self.flags | sum(bit for bit, ok in zip(bits, self.vec16) if ok)

    @property
    def mask_args(self) -> tuple:
        """The tensor-core kernels' (softcap_log2 = c log2 e, band_lo, band_hi) after their flags."""
        return (self.softcap_log2, *self.band_args)

    @property
    def band_args(self) -> tuple:
        """(lo, hi): query i (of a group's queries) sees keys [i + lo, i + hi] (layout.cuh
        KeyBand): the bottom-right shift Nk - queries, the window, causal capping the right at 0,
        +-UNLIMITED for an unlimited side."""
        shift = self.n_k - self.queries_per_group
        left, right = self.window
        right = 0 if self.causal else right
        return (np.int32(-UNLIMITED if left < 0 else shift - left), np.int32(UNLIMITED if right < 0 else shift + right))

    @property
    def shape_args(self) -> tuple:
        return (np.int32(self.n_q), np.int32(self.n_k), np.int32(self.head_dim), np.int32(self.head_dim_v))

    @property
    def stride_args(self) -> tuple:
        """(row, column) strides of q, k, v."""
        return tuple(np.int64(st) for strides in self.operand_strides for st in strides[-2:])

    @property
    def row_stride_args(self) -> tuple:
        return tuple(np.int64(strides[-2]) for strides in self.operand_strides)

    @property
    def layout_args(self) -> tuple:
        """BATCH_LAYOUT_PARAMS: the sizes of dims 1..3, then the q, k, v batch strides."""
        return tuple(np.int64(st) for st in self.batch_sizes[1:]) + tuple(
            np.int64(st) for strides in self.batch_strides for st in strides)

    def check_tile_head_dim(self, head_dim: int) -> None:
        """A config's tile must hold D and Dv."""
        if head_dim < self.width:
            raise ValueError(f"{FN}: argument 'config' expected a tile head dim >= {self.width}, got {head_dim}")

    def check_dtype(self, kernel: str, ctypes=MMA_CTYPES) -> None:
        if self.ctype not in ctypes:
            raise ValueError(f"{FN}: argument 'config' asks for {kernel}, which takes float16 or bfloat16, "
                             f"got {self.dtype}")


def describe(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, dtype, causal, scale, return_lse,
             aligned, window=None, softcap=None, sink_heads=0) -> AttentionProblem:
    """The problem of a call: strides in elements, ``aligned`` (q, k, v) 16-byte base pointers,
    ``window`` None or (left, right) of None / non-negative ints, ``softcap`` None or c > 0,
    ``sink_heads`` the sinks' length (0: none). Raises the batch layout's ValueError for leading dims the kernels cannot index, and a
    ValueError where Nk + Nq reaches UNLIMITED."""
    shapes = {"q": tuple(q_shape), "k": tuple(k_shape), "v": tuple(v_shape)}
    strides = {"q": tuple(q_strides), "k": tuple(k_strides), "v": tuple(v_strides)}
    batch = tuple(np.broadcast_shapes(shapes["q"][:-2], shapes["k"][:-2], shapes["v"][:-2]))
    n_q, head_dim = shapes["q"][-2:]
    n_k, head_dim_v = shapes["v"][-2:]
    if n_k + n_q >= UNLIMITED:
        raise ValueError(f"{FN}: arguments 'q', 'k' expected fewer than {UNLIMITED} queries and keys together, "
                         f"got {n_q} + {n_k}")
    # a side past Nk + Nq reaches every key: clamped there, so that the band stays in 32 bits
    sides = NO_WINDOW if window is None else tuple(-1 if side is None else min(side, n_k + n_q) for side in window)
    sizes, batch_strides = batch_layout(batch, {n: (shapes[n], strides[n]) for n in shapes})
    vec16 = tuple(rows_16b(strides[n], head_dim_v if n == "v" else head_dim, batch_strides[n], aligned[i])
                  for i, n in enumerate(shapes))
    return AttentionProblem(n_q, n_k, head_dim, head_dim_v, batch, np.dtype(dtype), bool(causal), float(scale),
                            bool(return_lse), tuple(strides.values()), sizes,
                            tuple(batch_strides[n] for n in shapes), vec16, sides, float(softcap or 0.0),
                            sink_heads=int(sink_heads))
