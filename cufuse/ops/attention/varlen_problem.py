"""One ``attention_varlen`` call as its variants see it (pure): the packed shapes and strides,
dtype, alignment and options; the variants (``varlen_simt``, ``varlen_wgmma``) check and plan
from it, never from cu_seqlens' values (the host never reads them)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.attention_call import AttentionCall
from .problem import FLAG_CAUSAL, FLAG_SOFTCAP, FLAG_WRITE_LSE, NO_WINDOW, UNLIMITED

FN = "attention_varlen"


@dataclasses.dataclass(frozen=True)
class VarlenProblem(AttentionCall):
    """q ``(tokens_q, heads_q, head_dim)``, k ``(tokens_k, heads_kv, head_dim)``, v ``(tokens_k,
    heads_kv, head_dim_v)`` with element ``strides`` (q, k, v: token, head, column) and 16-byte
    ``aligned`` bases; ``batch`` sequences (cu_seqlens of B + 1 entries, element strides
    ``cu_strides``). ``window`` (left, right), -1 for an unlimited side; ``softcap`` 0 for none;
    ``sink_heads`` the sinks' length (0: none)."""

    FLAG_BITS = (FLAG_CAUSAL, FLAG_WRITE_LSE, FLAG_SOFTCAP)

    tokens_q: int
    heads_q: int
    head_dim: int
    tokens_k: int
    heads_kv: int
    head_dim_v: int
    batch: int
    dtype: np.dtype
    strides: tuple
    cu_strides: tuple
    aligned: tuple
    causal: bool
    scale: float
    window: tuple = NO_WINDOW
    softcap: float = 0.0
    return_lse: bool = False
    sink_heads: int = 0

    @property
    def group(self) -> int:
        """Query heads a KV head serves."""
        return self.heads_q // self.heads_kv

    @property
    def sides(self) -> tuple:
        """(left, right) as the kernels take them: -1 unlimited, causal capping the right at 0, a
        side clamped to Tq + Tk (a longer one reaches every key), so the bands stay in 32 bits."""
        left, right = self.window
        right = 0 if self.causal else right
        reach = min(self.tokens_q + self.tokens_k, UNLIMITED)
        return tuple(side if side < 0 else min(side, reach) for side in (left, right))


def describe_varlen(shapes: dict, strides: dict, dtype, aligned: tuple, causal: bool, scale: float, window: tuple,
                    softcap, return_lse: bool, sink_heads: int) -> VarlenProblem:
    """The problem of a call: ``shapes`` / ``strides`` (in elements) of q, k, v, cu_seqlens_q and
    cu_seqlens_k by name, ``aligned`` (q, k, v) 16-byte base pointers, ``window`` (left, right) with
    -1 for an unlimited side, ``softcap`` None or a positive float."""
    tokens_q, heads_q, head_dim = shapes["q"]
    tokens_k, heads_kv, _ = shapes["k"]
    return VarlenProblem(int(tokens_q), int(heads_q), int(head_dim), int(tokens_k), int(heads_kv),
                         int(shapes["v"][2]), int(shapes["cu_seqlens_q"][0]) - 1, np.dtype(dtype),
                         tuple(tuple(int(st) for st in strides[name]) for name in "qkv"),
                         (int(strides["cu_seqlens_q"][0]), int(strides["cu_seqlens_k"][0])),
                         tuple(bool(a) for a in aligned), bool(causal), float(scale), tuple(window),
                         float(softcap or 0.0), bool(return_lse), int(sink_heads))
