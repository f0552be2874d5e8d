"""``paged_kv_append`` (kernels/paged_attention/kv_append.cu): kv_append's one launch, any
dtype, one block per (sequence, KV head, new token), or (new token, KV head) packed."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from ..._core.plans import NULL, Launch, Plan

THREADS = 128


@dataclasses.dataclass(frozen=True, kw_only=True)
class AppendRows:
    """The append of k_new / v_new ``(batch, heads_kv, n_new, D / Dv)``, or packed ``(n_new,
    heads_kv, D / Dv)`` with ``cu_stride`` >= 0 (cu_seqlens_new's stride), into pages of
    ``page_size`` slots through a ``(batch, max_pages)`` table; strides in elements: pages
    (page, head, row) of k and v, k_new and v_new (4 each: batch, head, row, col; packed 0,
    head, token, col), table (2), seq_lens (1)."""

    batch: int
    heads_kv: int
    n_new: int
    head_dim: int
    head_dim_v: int
    page_size: int
    max_pages: int
    dtype: np.dtype
    strides: tuple
    cu_stride: int = -1

    def plan(self) -> Plan:
        shape = (self.batch, self.heads_kv, self.n_new, self.head_dim, self.head_dim_v, self.page_size,
                 self.max_pages * self.page_size)
        packed = self.cu_stride >= 0
        rows = ("cu_seqlens_new", np.int64(self.cu_stride)) if packed else (NULL, np.int64(0))
        tokens = self.n_new if packed else self.batch * self.n_new
        launch = Launch(append_spec(ctype(self.dtype)), (tokens * self.heads_kv,), (THREADS,),
                        ("k_pages", "v_pages", "k_new", "v_new", "block_table", "seq_lens",
                         *(np.int32(x) for x in shape), *rows, *(np.int64(st) for st in self.strides)))
        return Plan((launch,))


def append_spec(dtype_ctype: str) -> KernelSpec:
    return KernelSpec("paged_attention/kv_append.cu", "paged_kv_append", (dtype_ctype,))
