"""The fast NumPy path of attention_paged: each sequence's keys and values gathered from its pages
(``reference.gather_pages``), then the fast attention with the query heads grouped over the KV
heads. The same results as ``cufuse.reference.attention_paged`` within float64 rounding."""
from __future__ import annotations

import numpy as np

from ...reference import gather_pages
from ..._core.numpy_attention import attention


def attention_paged(q, k_pages, v_pages, block_table, seq_lens, *, causal: bool = True, scale=None, window=None,
                    softcap=None, sinks=None, return_lse: bool = False):
    """float64 PagedAttention of q ``(B, Hq, Nq, D)`` over pages ``(P, Hkv, S, D)`` / ``(P, Hkv,
    S, Dv)``; query head h uses KV head ``h // (Hq // Hkv)`` and sink ``sinks[h % H]``. Page indices
    are not checked here (the public function does that). Returns ``out`` or ``(out, lse)``, both
    float64."""
    q = np.asarray(q, dtype=np.float64)
    n_seq, heads_q, n_q, head_dim = q.shape
    heads_kv = k_pages.shape[1]
    grouped = q.reshape(n_seq, heads_kv, heads_q // heads_kv, n_q, head_dim)
    results = [attention(grouped[i], *(gather_pages(pages, block_table[i], int(seq_lens[i]))[:, None]
                                        for pages in (k_pages, v_pages)),
                         causal=causal, scale=scale, window=window, softcap=softcap, sinks=sinks, return_lse=True)
               for i in range(n_seq)]
    out = np.stack([o for o, _ in results]).reshape(n_seq, heads_q, n_q, -1) if results else \
        np.zeros((0, heads_q, n_q, v_pages.shape[-1]))
    lse = np.stack([l for _, l in results]).reshape(n_seq, heads_q, n_q) if results else np.zeros((0, heads_q, n_q))
    return (out, lse) if return_lse else out
