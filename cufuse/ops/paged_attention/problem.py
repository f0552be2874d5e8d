"""One attention_paged call as the variants see it (pure): shapes, strides, dtype, masks and
the kernel arguments the forward kernels share."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core.dtypes import ctype
from ..._core.plans import NULL

FN = "attention_paged"
# Run-time flag bits (kernels/paged_attention/paged.cuh: enum Flags).
FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_VEC_KV, FLAG_SOFTCAP = 1, 2, 4, 8
UNLIMITED = 1 << 30  # paged.cuh kUnlimited: windows are clamped to it, max_pages * S must stay below it
LOG2E = math.log2(math.e)


@dataclasses.dataclass(frozen=True)
class PagedAttentionProblem:
    """q ``(batch, heads_q, n_q, head_dim)``; k / v pages ``(n_pages, heads_kv, page_size,
    head_dim[_v])``; block_table ``(batch, max_pages)``. Strides in elements: q (4), k (4),
    v (4), table (2), seq_lens (1). ``window`` (left, right), -1 for unlimited; ``softcap``
    0 for none. ``kv_rows_16b``: 16-byte copies of K/V rows apply. ``sink_heads``: the sinks'
    length H (0: none), query head h taking ``sinks[h % H]``."""

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

    @property
    def group(self) -> int:
        return self.heads_q // self.heads_kv

    @property
    def rows(self) -> int:
        """Query rows of one KV head: its G query heads x Nq queries."""
        return self.group * self.n_q

    @property
    def width(self) -> int:
        return max(self.head_dim, self.head_dim_v)

    @property
    def max_keys(self) -> int:
        return self.max_pages * self.page_size

    @property
    def max_visible_keys(self) -> int:
        """A bound on the keys one sequence's rows see: the table, or Nq + the left window."""
        left = self.window[0]
        return self.max_keys if left < 0 else min(self.max_keys, self.n_q + left)

    @property
    def ctype(self) -> str:
        return ctype(self.dtype)

    @property
    def lse_arg(self) -> str:
        return "lse" if self.return_lse else "out"

    @property
    def flags(self) -> int:
        return ((FLAG_CAUSAL if self.causal else 0) | (FLAG_WRITE_LSE if self.return_lse else 0)
                | (FLAG_VEC_KV if self.kv_rows_16b else 0) | (FLAG_SOFTCAP if self.softcap else 0))

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
    def sink_args(self) -> tuple:
        """The forward kernels' trailing (sinks pointer, H): a null pointer without sinks."""
        return ("sinks", np.int32(self.sink_heads)) if self.sink_heads else (NULL, np.int32(0))

    @property
    def stride_args(self) -> tuple:
        """q (batch, head, row, col), k and v (page, head, row), table (row, col), seq_lens."""
        strides = (*self.q_strides, *self.k_strides[:3], *self.v_strides[:3], *self.table_strides, self.lens_stride)
        return tuple(np.int64(st) for st in strides)


def describe(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, table_shape, table_strides, lens_stride,
             dtype, causal, scale, window, softcap, return_lse, aligned, sink_heads=0) -> PagedAttentionProblem:
    """The problem of a call: strides in elements; ``window`` (left, right) with -1 for
    unlimited; ``softcap`` 0 for none; ``aligned`` (k_pages, v_pages) 16-byte base pointers;
    ``sink_heads`` the sinks' length (0: none)."""
    batch, heads_q, n_q, head_dim = q_shape
    n_pages, heads_kv, page_size, _ = k_shape
    head_dim_v = v_shape[-1]
    kv_rows_16b = all(
        dims % 8 == 0 and all(st % 8 == 0 for st in strides[:3]) and ok
        for dims, strides, ok in ((head_dim, k_strides, aligned[0]), (head_dim_v, v_strides, aligned[1])))
    return PagedAttentionProblem(batch, heads_q, heads_kv, n_q, head_dim, head_dim_v, n_pages, page_size, table_shape[1],
                        np.dtype(dtype), bool(causal), float(scale), tuple(window), float(softcap), bool(return_lse),
                        tuple(q_strides), tuple(k_strides), tuple(v_strides), tuple(table_strides), int(lens_stride),
                        kv_rows_16b, int(sink_heads))
