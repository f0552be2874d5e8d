"""What every attention problem (attention, attention_varlen, attention_paged) derives alike from
its fields head_dim, head_dim_v, dtype, causal, scale, softcap (0: none), return_lse and
sink_heads: the kernel arguments their forward kernels share."""
from __future__ import annotations

import math

import numpy as np

from .dtypes import ctype
from .plans import NULL

LOG2E = math.log2(math.e)


class AttentionCall:
    """Mixed into an op's frozen problem dataclass. ``FLAG_BITS``: the (causal, write lse,
    softcap) bits of that op's kernels' run-time flags."""

    FLAG_BITS: tuple = ()

    @property
    def width(self) -> int:
        """The head dim a tile must hold: D and Dv."""
        return max(self.head_dim, self.head_dim_v)

    @property
    def ctype(self) -> str:
        return ctype(self.dtype)

    @property
    def lse_arg(self) -> str:
        """The lse pointer: "out" without return_lse (the kernels do not write it then)."""
        return "lse" if self.return_lse else "out"

    @property
    def flags(self) -> int:
        causal, write_lse, softcap = self.FLAG_BITS
        return ((causal if self.causal else 0) | (write_lse if self.return_lse else 0)
                | (softcap if self.softcap else 0))

    @property
    def scale_log2(self) -> np.float32:
        """The tensor-core kernels' score scale: scale log2 e, or scale / c with a softcap c
        (the kernels take tanh of the scaled score, then multiply by ``softcap_log2``)."""
        return np.float32(self.scale / self.softcap if self.softcap else self.scale * LOG2E)

    @property
    def softcap_log2(self) -> np.float32:
        """c log2 e with a softcap c (1 without)."""
        return np.float32(self.softcap * LOG2E if self.softcap else 1.0)

    @property
    def sink_args(self) -> tuple:
        """The forward kernels' trailing (sinks pointer, H): a null pointer without sinks."""
        return ("sinks", np.int32(self.sink_heads)) if self.sink_heads else (NULL, np.int32(0))
