"""Dense attention: prefill (full and causal), decode, and grouped-query decode classes."""
from __future__ import annotations

import cufuse

from ... import traffic
from .common import TORCH, UNFUSED, Case, Impl, attention_unfused, random_values, resolve_dtype, torch_inputs, \
    torch_module
from .peers import fa4_attention

ATTENTION_TOKENS = 32768  # B = 32768 / N
ATTENTION_HEADS = 16
ATTENTION_N = (512, 2048, 8192, 16384)
ATTENTION_HEAD_DIMS = (64, 128)
ATTENTION_DTYPES = ("bfloat16", "float16")
UNFUSED_ATTENTION_MAX_SCORES = 1 << 30  # beyond this the materialised scores take tens of GB
DECODE_BATCH, DECODE_HEADS, DECODE_HEAD_DIM = 8, 32, 128
DECODE_KEYS = (8192, 65536)


def bottom_right_mask(n_q, n_k, device):
    """cufuse's causal mask as SDPA's boolean ``attn_mask`` (True: attends): query i sees key
    j iff ``j <= i + Nk - Nq``."""
    torch = torch_module()
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(n_k - n_q)


def sdpa_peers(*, causal=False, n_q=1, n_k=1, prepare=torch_inputs, **options) -> tuple:
    """PyTorch SDPA on its FLASH (FA2) and CUDNN backends, called with ``options`` on
    ``prepare(inputs)`` (q, k, v). Causal is bottom-right, as cufuse's: SDPA's ``is_causal``
    (top-left) is the same mask where Nq == Nk, and one query sees every key; otherwise CUDNN
    gets the mask as ``attn_mask`` (built once, outside the timing) and FLASH, which takes no
    mask, is left out."""
    if causal and n_q == n_k:
        options["is_causal"] = True
    masked = causal and n_q not in (1, n_k)

    def sdpa(backend):
        def call(q, k, v, *mask):
            torch = torch_module()
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, *mask, **options)

        return call

    def masked_inputs(inputs):
        q, k, v = prepare(inputs)
        return q, k, v, bottom_right_mask(n_q, n_k, q.device)

    cudnn = Impl("sdpa cudnn", sdpa("CUDNN_ATTENTION"), prepare=masked_inputs if masked else prepare, needs=TORCH)
    return (cudnn,) if masked else (Impl("sdpa flash", sdpa("FLASH_ATTENTION"), prepare=prepare, needs=TORCH), cudnn)


def attention_case(batch, heads, n_q, n_k, head_dim, dtype, *, causal=False) -> Case:
    q_shape = (batch, heads, n_q, head_dim)
    kv_shape = (batch, heads, n_k, head_dim)

    def make_inputs(xp, rng):
        q, k, v = (random_values(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        return q, k, v, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    impls = [
        Impl("cufuse", lambda q, k, v, out: cufuse.attention(q, k, v, causal=causal, out=out)),
        *sdpa_peers(causal=causal, n_q=n_q, n_k=n_k),
        fa4_attention(dtype, causal=causal),
    ]
    if batch * heads * n_q * n_k <= UNFUSED_ATTENTION_MAX_SCORES:
        impls.insert(1, Impl(UNFUSED, lambda q, k, v, out: attention_unfused(q, k, v, causal=causal)))
    decode = n_q == 1
    label = (f"decode B{batch} H{heads} Nk{n_k} D{head_dim}" if decode
             else f"B{batch} H{heads} N{n_q} D{head_dim} {'causal' if causal else 'full'}")
    return Case(
        op="attention",
        label=label,
        dtype=dtype,
        traffic=traffic.attention(q_shape, kv_shape, kv_shape, resolve_dtype(dtype), causal=causal),
        metric="TB/s" if decode else "TFLOP/s",
        make_inputs=make_inputs,
        impls=tuple(impls),
        klass="decode" if decode else f"prefill D{head_dim} {'causal' if causal else 'full'}",
    )


def prefill_case(n, head_dim, dtype, causal) -> Case:
    return attention_case(ATTENTION_TOKENS // n, ATTENTION_HEADS, n, n, head_dim, dtype, causal=causal)


def decode_case(n_k) -> Case:
    return attention_case(DECODE_BATCH, DECODE_HEADS, 1, n_k, DECODE_HEAD_DIM, "bfloat16")


# Grouped-query decode: (G, Nq, D, B x Hkv, Nk), each with K + V >= 64 MiB. Every
# class value of G (1, 4, 8, 16) meets the four (B x Hkv, cache) shapes at Nq 1, D128; Nq 2-8
# and D 64 / 256 vary around G 8.
GQA_DECODE_SHAPES = (
    *[(group, 1, 128, batch_heads, n_k) for group in (1, 4, 8, 16)
      for batch_heads, n_k in ((1, 1 << 20), (8, 32768), (64, 4096), (1024, 1024))],
    *[(8, n_q, 128, 8, 32768) for n_q in (2, 4, 8)],
    (8, 1, 64, 8, 65536), (8, 1, 256, 8, 16384), (4, 4, 64, 64, 8192), (16, 2, 256, 16, 8192),
    (16, 8, 128, 32, 4096),
)
GQA_MAX_KV_HEADS = 8  # B x Hkv splits into B and at most 8 KV heads


def gqa_decode_class(case) -> str:
    """The class of a gqa_decode_case ("G8 Nq1 D128"), the unit the minima are over."""
    return " ".join(case.label.split()[1:4])


def gqa_decode_case(group, n_q, head_dim, batch_heads, n_k, dtype="bfloat16") -> Case:
    """q (B, Hkv x G, Nq, D) over k / v (B, Hkv, Nk, D) with ``enable_gqa=True``, full
    attention (SDPA's causal is top-left aligned, cufuse's bottom-right); traffic counts K and
    V once."""
    heads_kv = min(batch_heads, GQA_MAX_KV_HEADS)
    batch = batch_heads // heads_kv
    q_shape = (batch, heads_kv * group, n_q, head_dim)
    kv_shape = (batch, heads_kv, n_k, head_dim)

    def make_inputs(xp, rng):
        q, k, v = (random_values(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        return q, k, v, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    return Case(
        op="attention",
        label=f"gqa G{group} Nq{n_q} D{head_dim} B{batch} Hkv{heads_kv} Nk{n_k}",
        dtype=dtype,
        traffic=traffic.attention((batch, heads_kv, group, n_q, head_dim), (batch, heads_kv, 1, n_k, head_dim),
                                  (batch, heads_kv, 1, n_k, head_dim), resolve_dtype(dtype)),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=(
            Impl("cufuse", lambda q, k, v, out: cufuse.attention(q, k, v, enable_gqa=True, out=out)),
            *sdpa_peers(enable_gqa=True),
            fa4_attention(dtype),
        ),
        klass=f"gqa G{group} Nq{n_q} D{head_dim}",
    )


def gqa_decode_cases(quick: bool = False) -> list:
    shapes = GQA_DECODE_SHAPES[4:8] if quick else GQA_DECODE_SHAPES
    return [gqa_decode_case(*shape) for shape in shapes]


# Sinks' cost: (B, Hq, Hkv, Nq, Nk, D, causal), the prefill and decode shapes of the peer tables
SINK_SHAPES = ((2, 16, 16, 8192, 8192, 128, True), (16, 16, 16, 1024, 1024, 64, False), (16, 32, 8, 1, 4096, 128, False))


def sinks_case(batch, heads_q, heads_kv, n_q, n_k, head_dim, causal, dtype="bfloat16") -> Case:
    """attention with one sink logit a query head against the same call without: the rate's
    cost of folding the sink into each row's normaliser."""
    q_shape = (batch, heads_q, n_q, head_dim)
    kv_shape = (batch, heads_kv, n_k, head_dim)
    gqa = heads_q != heads_kv

    def make_inputs(xp, rng):
        q, k, v = (random_values(rng, shape, dtype) for shape in (q_shape, kv_shape, kv_shape))
        sinks = xp.asarray(rng.standard_normal(heads_q).astype("float32"))
        return q, k, v, sinks, xp.empty(q_shape, dtype=resolve_dtype(dtype))

    def call(q, k, v, sinks, out, with_sinks=True):
        return cufuse.attention(q, k, v, causal=causal, enable_gqa=gqa, sinks=sinks if with_sinks else None, out=out)

    decode = n_q == 1
    return Case(
        op="attention",
        label=(f"sinks B{batch} H{heads_q}/{heads_kv} Nq{n_q} Nk{n_k} D{head_dim} {'causal' if causal else 'full'}"),
        dtype=dtype,
        traffic=traffic.attention((batch, heads_kv, heads_q // heads_kv, n_q, head_dim), (batch, heads_kv, 1, n_k, head_dim),
                                  (batch, heads_kv, 1, n_k, head_dim), resolve_dtype(dtype), causal=causal),
        metric="TB/s" if decode else "TFLOP/s",
        make_inputs=make_inputs,
        impls=(Impl("cufuse", call), Impl("cufuse without sinks", lambda *a: call(*a, with_sinks=False), peer=False)),
        klass="sinks",
    )


def attention_cases(quick: bool = False) -> list:
    if quick:
        return [prefill_case(2048, 128, "bfloat16", False), prefill_case(2048, 128, "bfloat16", True),
                decode_case(8192), gqa_decode_cases(quick=True)[1]]
    cases = [
        prefill_case(n, head_dim, dtype, causal)
        for dtype in ATTENTION_DTYPES
        for head_dim in ATTENTION_HEAD_DIMS
        for n in ATTENTION_N
        for causal in (False, True)
    ]
    return (cases + [decode_case(n_k) for n_k in DECODE_KEYS] + gqa_decode_cases()
            + [sinks_case(*shape) for shape in SINK_SHAPES])
