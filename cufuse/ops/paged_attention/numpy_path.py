"""The fast NumPy path of attention_paged: each sequence's keys and values gathered from its pages
(``reference.per_paged_sequence``), then the fast attention with the query heads grouped over the KV
heads. The same results as ``cufuse.reference.attention_paged`` within float64 rounding."""
from __future__ import annotations

from ...reference import per_paged_sequence
from ..._core.numpy_attention import attention


def attention_paged(q, k_pages, v_pages, block_table, seq_lens, *, causal: bool = True, scale=None, window=None,
                    softcap=None, sinks=None, cu_seqlens_q=None, return_lse: bool = False):
    """float64 PagedAttention of q ``(B, Hq, Nq, D)``, or packed ``(Tq, Hq, D)`` with
    ``cu_seqlens_q``, over pages ``(P, Hkv, S, D)`` / ``(P, Hkv, S, Dv)``; query head h uses KV
    head ``h // (Hq // Hkv)`` and sink ``sinks[h % H]``. Page indices are not checked here (the
    public function does that). Returns ``out`` or ``(out, lse)``, both float64."""
    out, lse = per_paged_sequence(attention, q, k_pages, v_pages, block_table, seq_lens, cu_seqlens_q, causal=causal,
                                  scale=scale, window=window, softcap=softcap, sinks=sinks)
    return (out, lse) if return_lse else out
