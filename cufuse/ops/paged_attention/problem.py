"""One attention_paged call as the variants see it (pure): shapes, strides, dtype, masks and
the kernel arguments the forward kernels share."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.attention_call import AttentionCall
from ..._core.plans import NULL

FN = "attention_paged"
# Run-time flag bits (kernels/paged_attention/paged.cuh: enum Flags).
FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_VEC_KV, FLAG_SOFTCAP = 1, 2, 4, 8
UNLIMITED = 1 << 30  # paged.cuh kUnlimited: windows are clamped to it, max_pages * S must stay below it
TILE_ROWS = 64  # packed query rows (G x queries) a work unit aims at: the widest tile's rows


@dataclasses.dataclass(frozen=True)
class PagedAttentionProblem(AttentionCall):
    """q ``(batch, heads_q, n_q, head_dim)``, or packed ``(n_q, heads_q, head_dim)`` (n_q = Tq)
    with ``cu_stride`` >= 0, cu_seqlens_q's stride (-1: not packed); k / v pages ``(n_pages,
    heads_kv, page_size, head_dim[_v])``; block_table ``(batch, max_pages)``. Strides in
    elements: q (4: batch, head, query, col; packed 0, head, token, col), k (4), v (4), table
    (2), seq_lens (1). ``window`` (left, right), -1 for unlimited; ``softcap`` 0 for none.
    ``kv_rows_16b``: 16-byte copies of K/V rows apply. ``sink_heads``: the sinks' length H
    (0: none), query head h taking ``sinks[h % H]``."""

    FLAG_BITS = (FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_SOFTCAP)

    batch: int
    heads_q: int
    heads_kv: int
    n_q: int
    head_dim: int
    head_dim_v: int
    n_pages: int
    page_size: int
    max_pages: int
    dtype: np.dtype
    causal: bool
    scale: float
    window: tuple
    softcap: float
    return_lse: bool
    q_strides: tuple
    k_strides: tuple
    v_strides: tuple
    table_strides: tuple
    lens_stride: int
    kv_rows_16b: bool
    sink_heads: int = 0
    cu_stride: int = -1

    @property
    def packed(self) -> bool:
        return self.cu_stride >= 0

    @property
    def group(self) -> int:
        return self.heads_q // self.heads_kv

    @property
    def q_tile(self) -> int:
        """Queries of one sequence a work unit takes: all Nq unpacked; packed, the batch's mean
        queries a sequence rounded up to a power of two, at most TILE_ROWS / G (a power of two),
        so decode-only steps keep the decode tile and prefill chunks fill the widest one."""
        if not self.packed:
            return self.n_q
        widest = 1 << (max(1, TILE_ROWS // self.group).bit_length() - 1)
        mean = -(-self.n_q // max(1, self.batch))
        return min(widest, 1 << max(0, mean - 1).bit_length())

    @property
    def query_tiles(self) -> int:
        """A bound on the query tiles of the batch: one a sequence unpacked, floor(Tq / q_tile)
        + B packed (sum of ceil(n_b / tile) over sequences)."""
        return self.batch + (self.n_q // self.q_tile if self.packed else 0)

    @property
    def rows(self) -> int:
        """Query rows of one KV head in a work unit: its G query heads x the tile's queries."""
        return self.group * self.q_tile

    @property
    def max_keys(self) -> int:
        return self.max_pages * self.page_size

    @property
    def max_visible_keys(self) -> int:
        """A bound on the keys one sequence's rows see: the table, or Nq + the left window."""
        left = self.window[0]
        return self.max_keys if left < 0 else min(self.max_keys, self.n_q + left)

    @property
    def flags(self) -> int:
        return super().flags | (FLAG_VEC_KV if self.kv_rows_16b else 0)

    @property
    def pointers(self) -> tuple:
        return ("q", "k_pages", "v_pages", "block_table", "seq_lens", "out", self.lse_arg)

    @property
    def shape_args(self) -> tuple:
        return tuple(np.int32(x) for x in (self.batch, self.heads_kv, self.group, self.n_q, self.head_dim,
                                           self.head_dim_v, self.page_size, self.max_keys))

    @property
    def mask_args(self) -> tuple:
        return (np.int32(self.window[0]), np.int32(self.window[1]), np.int32(self.flags))

    @property
    def query_args(self) -> tuple:
        """The forward kernels' (cu_seqlens_q pointer, its stride): a null pointer unpacked."""
        return ("cu_seqlens_q", np.int64(self.cu_stride)) if self.packed else (NULL, np.int64(0))

    @property
    def stride_args(self) -> tuple:
        """q (batch, head, row, col), k and v (page, head, row), table (row, col), seq_lens."""
        strides = (*self.q_strides, *self.k_strides[:3], *self.v_strides[:3], *self.table_strides, self.lens_stride)
        return tuple(np.int64(st) for st in strides)


def describe(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, table_shape, table_strides, lens_stride,
             dtype, causal, scale, window, softcap, return_lse, aligned, sink_heads=0,
             cu_stride=-1) -> PagedAttentionProblem:
    """The problem of a call: strides in elements; ``window`` (left, right) with -1 for
    unlimited; ``softcap`` 0 for none; ``aligned`` (k_pages, v_pages) 16-byte base pointers;
    ``sink_heads`` the sinks' length (0: none); ``cu_stride`` cu_seqlens_q's stride, q then
    packed ``(Tq, Hq, D)`` (-1: q ``(B, Hq, Nq, D)``)."""
    if cu_stride >= 0:
        n_q, heads_q, head_dim = q_shape
        token, head, col = q_strides
        q_strides, batch = (0, head, token, col), table_shape[0]
    else:
        batch, heads_q, n_q, head_dim = q_shape
    n_pages, heads_kv, page_size, _ = k_shape
    head_dim_v = v_shape[-1]
    kv_rows_16b = all(
        dims % 8 == 0 and all(st % 8 == 0 for st in strides[:3]) and ok
        for dims, strides, ok in ((head_dim, k_strides, aligned[0]), (head_dim_v, v_strides, aligned[1])))
    return PagedAttentionProblem(batch, heads_q, heads_kv, n_q, head_dim, head_dim_v, n_pages, page_size, table_shape[1],
                        np.dtype(dtype), bool(causal), float(scale), tuple(window), float(softcap), bool(return_lse),
                        tuple(q_strides), tuple(k_strides), tuple(v_strides), tuple(table_strides), int(lens_stride),
                        kv_rows_16b, int(sink_heads), int(cu_stride))
