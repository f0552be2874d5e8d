"""The optional peers: FlashAttention-4 (``flash-attn-4``, its SM90 forward) and QuACK
(``quack-kernels``), each in its own native layout, built from the same random data as
cufuse's call (outside the timing).

Never a dependency of cufuse: nothing here imports them until a call or an availability
check, and an implementation whose module cannot be imported is skipped (``Impl.needs``).
"""
from __future__ import annotations

import inspect

from .common import Impl, optional_module, to_torch, torch_module

FA4 = "FA4"
QUACK = "QuACK"
FA4_MODULE = "flash_attn.cute"
QUACK_SOFTMAX_MODULE = "quack.softmax"
QUACK_GEMM_MODULE = "quack.gemm_interface"
PEER_MODULES = {FA4: FA4_MODULE, QUACK: "quack"}  # what the one "skipped" line names per peer
SIXTEEN_BIT = ("float16", "bfloat16")
# fused_linear's activations -> QuACK's epilogue names; exact-erf GELU has none.
QUACK_ACTIVATIONS = {"relu": "relu", "gelu_tanh": "gelu_tanh_approx", "silu": "silu"}
QUACK_GATED = {"silu": "swiglu", "gelu_tanh": "geglu", "relu": "reglu"}
# Autotuning compiles every candidate config per shape (minutes per shape): QuACK runs its default config.
QUACK_TUNED = False


def _module(name):
    return optional_module(name)[0]


def _output(result):
    """FA4 returns ``out`` or ``(out, lse)`` depending on its version."""
    return result[0] if isinstance(result, tuple) else result


def _fa_layout(array):
    """A torch copy of a (B, H, N, D) CuPy array in FlashAttention's (B, N, H, D), contiguous."""
    return to_torch(array).transpose(1, 2).contiguous()


def unsupported(name: str, why: str) -> Impl:
    """A peer that has no call for the case: reported as such, never timed."""
    return Impl(name, _never_called, peer=True, unsupported=why)


def _never_called(*args):
    raise NotImplementedError("an unsupported peer is never called")


def fa4_attention(dtype: str, *, causal=False, window=None, softcap=None) -> Impl:
    """flash_attn_func on (B, N, H, D) copies of q, k, v; causal is bottom-right aligned, as
    cufuse's; grouped-query heads map ``h // (Hq // Hkv)`` as in cufuse and SDPA."""
    if dtype not in SIXTEEN_BIT:
        return unsupported(FA4, "FA4 takes 16-bit inputs")
    options = {"causal": causal}
    if window is not None:
        options["window_size"] = tuple(window)
    if softcap:
        options["softcap"] = softcap

    def prepare(inputs):
        return tuple(_fa_layout(array) for array in inputs[:3])

    def call(q, k, v):
        return _output(_module(FA4_MODULE).flash_attn_func(q, k, v, **options))

    return Impl(FA4, call, prepare=prepare, needs=FA4_MODULE)


def fa4_paged_attention(dtype: str, *, causal=True) -> Impl:
    """flash_attn_varlen_func with its page table over the same pages: cufuse's (P, Hkv, S, D)
    view is a transpose of the (P, S, Hkv, D) storage FA reads, so k and v are not copied;
    ``seqused_k`` carries each sequence's length."""
    if dtype not in SIXTEEN_BIT:
        return unsupported(FA4, "FA4 takes 16-bit inputs")

    def prepare(inputs):
        q, k_pages, v_pages, table, lengths = inputs[:5]
        k, v = (to_torch(pages).permute(0, 2, 1, 3) for pages in (k_pages, v_pages))
        return _fa_layout(q), k.contiguous(), v.contiguous(), to_torch(table), to_torch(lengths)

    def call(q, k, v, table, lengths):
        return _output(_module(FA4_MODULE).flash_attn_varlen_func(q, k, v, seqused_k=lengths, page_table=table,
                                                                  causal=causal))

    return Impl(FA4, call, prepare=prepare, needs=FA4_MODULE)


def fa4_varlen_attention(dtype: str, max_length: int, *, causal=False) -> Impl:
    """flash_attn_varlen_func on the packed (T, H, D) q, k, v and the offsets of an
    attention_varlen case (its native layout: no copy); causal is bottom-right as cufuse's. The
    longest sequence goes as max_seqlen_q / max_seqlen_k where the installed version takes them."""
    if dtype not in SIXTEEN_BIT:
        return unsupported(FA4, "FA4 takes 16-bit inputs")

    def prepare(inputs):
        function = _module(FA4_MODULE).flash_attn_varlen_func
        accepted = inspect.signature(function).parameters
        longest = {name: max_length for name in ("max_seqlen_q", "max_seqlen_k") if name in accepted}
        return (*(to_torch(array) for array in inputs[:4]), longest)

    def call(q, k, v, offsets, longest):
        return _output(_module(FA4_MODULE).flash_attn_varlen_func(q, k, v, cu_seqlens_q=offsets,
                                                                  cu_seqlens_k=offsets, causal=causal, **longest))

    return Impl(FA4, call, prepare=prepare, needs=FA4_MODULE)


def quack_softmax(shape, axis, view) -> Impl:
    """QuACK's softmax: rows of a contiguous 2-D array, reduced over the last axis."""
    if view is not None or len(shape) != 2 or axis not in (-1, 1):
        return unsupported(QUACK, "QuACK's softmax reduces the last axis of a contiguous 2-D array")

    def call(x):  # softmax_fwd skips the autograd wrapper where this version has it
        module = _module(QUACK_SOFTMAX_MODULE)
        return (getattr(module, "softmax_fwd", None) or module.softmax)(x)

    return Impl(QUACK, call, prepare=lambda inputs: (to_torch(inputs[0]),), needs=QUACK_SOFTMAX_MODULE)


def _gemm_act(x, weight, out, **options):
    """postact = act(x @ weight + bias) written to ``out``, the pre-activation not stored."""
    return _module(QUACK_GEMM_MODULE).gemm_act(x, weight, postact_out=out, store_preact=False, tuned=QUACK_TUNED,
                                               **options)[1]


def quack_linear(dtype: str, activation: str) -> Impl:
    """gemm_act with bias and ``activation`` on fused_linear's operands (x, weight, bias, out)."""
    name = QUACK_ACTIVATIONS.get(activation)
    if name is None:
        return unsupported(QUACK, f"QuACK has no {activation} epilogue")
    if dtype not in SIXTEEN_BIT:
        return unsupported(QUACK, "QuACK's GEMM is benchmarked on 16-bit inputs")

    def call(x, weight, bias, out):
        return _gemm_act(x, weight, out, bias=bias, activation=name)

    return Impl(QUACK, call, prepare=lambda inputs: tuple(to_torch(array) for array in inputs), needs=QUACK_GEMM_MODULE)


def quack_gated(dtype: str, activation: str, layout: str) -> Impl:
    """gemm_act with a gated activation over one weight holding the gate and up columns
    interleaved (g0, u0, g1, u1, ...), built once per input set in the operands' layout."""
    name = QUACK_GATED.get(activation)
    if name is None:
        return unsupported(QUACK, f"QuACK has no gated {activation}")
    if dtype not in SIXTEEN_BIT:
        return unsupported(QUACK, "QuACK's GEMM is benchmarked on 16-bit inputs")

    def prepare(inputs):
        torch = torch_module()
        x, w_gate, w_up, out = (to_torch(array) for array in inputs)
        k, n = w_gate.shape
        if layout == "kn":  # (K, 2N) row-major
            weight = torch.stack((w_gate, w_up), dim=2).reshape(k, 2 * n)
        else:  # (2N, K) row-major viewed as (K, 2N), as the (N, K) weights are stored
            weight = torch.stack((w_gate.T, w_up.T), dim=1).reshape(2 * n, k).T
        return x, weight, out

    def call(x, weight, out):
        return _gemm_act(x, weight, out, activation=name)

    return Impl(QUACK, call, prepare=prepare, needs=QUACK_GEMM_MODULE)


def peer_versions() -> dict:
    """The installed distribution of each optional peer that imports (for the run's record)."""
    from importlib import metadata

    found = {}
    for peer, distribution in ((FA4, "flash-attn-4"), (QUACK, "quack-kernels")):
        if torch_module() is not None and optional_module(PEER_MODULES[peer])[0] is not None:
            try:
                found[distribution] = metadata.version(distribution)
            except metadata.PackageNotFoundError:
                found[distribution] = "importable, version unknown"
    return found
