"""attention: ``softmax(q @ k^T * scale) @ v`` without materialising the score matrix
(FlashAttention). ``api`` holds the public function; ``select`` the default choice among
the kernel families of kernels/attention/ (``mma``, ``wgmma``, ``decode``, ``simt``, and
``merge`` for split keys; ``varlen`` for ``attention_varlen``); docs/attention.md says why each is chosen where."""
from .api import attention
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen"]
