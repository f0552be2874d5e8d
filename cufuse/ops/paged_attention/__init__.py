"""PagedAttention: ``attention_paged`` over a shared pool of K/V pages, and ``kv_append``,
which writes new keys and values into their pages (``api``). The pure chain of the GPU path
is ``plan``; the default selection ``select``; one module per kernel family of
kernels/paged_attention/: ``mma`` (16-bit, with its ``merge``), ``simt`` (float32 / float64),
``append`` (kv_append). docs/paged_attention.md says why each is chosen where."""
from .api import attention_paged, kv_append

__all__ = ["attention_paged", "kv_append"]
