"""Paged attention: classes over page size, group, queries, head dim and batch x heads, and
mixed sequence lengths; and the mixed serving step (op ``paged_mixed_step``): prefill chunks
and decodes in one packed call against the same work as two calls."""
from __future__ import annotations

import math

import numpy as np

import cufuse

from ... import traffic
from .attention import sdpa_peers
from .common import Case, Impl, random_values, resolve_dtype, to_torch
from .peers import fa4_paged_attention

# Classes of the paged grid (bf16, vLLM's (P, S, Hkv, D) page storage, shuffled page tables);
# each reports its minimum. Equal-length cases also run cufuse's dense attention (enable_gqa)
# and SDPA on the dense (B, Hkv, L, D) cache of the same lengths.
PAGED_BASE = dict(batch=8, heads_q=32, heads_kv=8, length=8192, n_q=1, head_dim=128, page_size=16)
PAGED_CLASSES = {
    "page size": [dict(page_size=s) for s in (1, 8, 16, 32, 64, 128, 256)],
    "group": [dict(heads_q=8 * g) for g in (1, 4, 8, 16)],
    "queries": [dict(n_q=n) for n in (1, 2, 4, 8)],
    "head dim": [dict(head_dim=d) for d in (64, 128, 256)],
    "batch x heads": [dict(batch=1, heads_kv=1, heads_q=4, length=1 << 20), dict(batch=1, length=131072),
                      dict(batch=64, length=2048), dict(batch=128, length=1024)],
}
PAGED_MIXED = (100, 100_000, 3000, 250, 40_000, 1000, 12_000, 500, 70_000, 2000, 150, 8000, 30_000, 600, 5000, 20_000)
PAGED_QUICK = {"page size": [dict(page_size=1), dict(page_size=16), dict(page_size=256)]}

MIXED_STEP = "paged_mixed_step"  # the op name of the mixed-step cases (bench/bench_paged_mixed_step.py)
# A serving step: `chunks` prefill chunks of `chunk` queries, each after `context` cached keys, and
# `decodes` decodes of `decode_q` queries over the PAGED_MIXED lengths (100 to 100K keys), cycled.
MIXED_STEP_BASE = dict(chunks=3, chunk=1024, context=4096, decodes=32, decode_q=1, heads_q=32, heads_kv=8,
                       head_dim=128, page_size=16)
MIXED_STEP_CLASSES = {
    "mixed step chunk": [dict(chunk=n) for n in (256, 1024, 2048)],
    "mixed step decodes": [dict(decodes=n) for n in (8, 32, 64)],
    "mixed step page size": [dict(page_size=s) for s in (1, 16, 256)],
    "mixed step decode queries": [dict(decode_q=n) for n in (1, 4)],
}
MIXED_STEP_QUICK = {"mixed step chunk": [dict(chunk=1024)], "mixed step decode queries": [dict(decode_q=4)]}


def paged_case(batch, heads_q, heads_kv, length, n_q, head_dim, page_size, lengths=None, cls="",
               dtype="bfloat16") -> Case:
    """attention_paged of ``batch`` sequences of ``length`` keys (or ``lengths``), Nq new
    queries each, over shuffled pages of ``page_size`` tokens, causal (bottom-right) for every
    implementation; FA4 reads the same pages through its page table."""
    lengths = tuple(lengths or (length,) * batch)
    batch = len(lengths)
    equal = len(set(lengths)) == 1
    q_shape = (batch, heads_q, n_q, head_dim)
    group = heads_q // heads_kv

    def make_inputs(xp, rng):
        k_pages, v_pages, table = _shuffled_pages(rng, lengths, page_size, heads_kv, head_dim, dtype)
        dense = (batch, heads_kv, lengths[0], head_dim) if equal else (0, heads_kv, 0, head_dim)
        k_dense, v_dense = (random_values(rng, dense, dtype) for _ in range(2))
        return (random_values(rng, q_shape, dtype), k_pages, v_pages, xp.asarray(table), xp.asarray(np.int32(lengths)),
                k_dense, v_dense, xp.empty(q_shape, dtype=resolve_dtype(dtype)))

    def dense_inputs(inputs):
        return tuple(to_torch(a) for a in (inputs[0], inputs[5], inputs[6]))

    impls = [Impl("cufuse", lambda q, kp, vp, bt, sl, kd, vd, out: cufuse.attention_paged(q, kp, vp, bt, sl,
                                                                                               out=out))]
    if equal:
        impls += [
            Impl("cufuse dense", lambda q, kp, vp, bt, sl, kd, vd, out: cufuse.attention(q, kd, vd, causal=True,
                                                                                        enable_gqa=True, out=out),
                 peer=False),
            *sdpa_peers(causal=True, n_q=n_q, n_k=lengths[0], prepare=dense_inputs, enable_gqa=group > 1),
        ]
    impls.append(fa4_paged_attention(dtype))
    itemsize = resolve_dtype(dtype).itemsize
    keys = sum(lengths)
    read = keys * heads_kv * 2 * head_dim * itemsize + 2 * math.prod(q_shape) * itemsize
    shape = f"L{lengths[0]}" if equal else f"mixed {min(lengths)}-{max(lengths)}"
    return Case(
        op="paged_attention",
        label=f"[{cls}] B{batch} G{group} Hkv{heads_kv} {shape} Nq{n_q} D{head_dim} S{page_size}",
        dtype=dtype,
        traffic=traffic.Traffic(flops=2 * keys * heads_q * n_q * 2 * head_dim, min_bytes=read, unfused_bytes=read),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=tuple(impls),
        klass=cls,
    )


def _shuffled_pages(rng, lengths, page_size, heads_kv, head_dim, dtype):
    """``(k_pages, v_pages, block_table)``: each sequence's pages drawn from a shuffled pool, in
    vLLM / FlashAttention's (P, S, Hkv, D) storage viewed as (P, Hkv, S, D)."""
    pages = [-(-n // page_size) for n in lengths]
    order = np.random.default_rng(len(lengths)).permutation(sum(pages))
    table = np.zeros((len(lengths), max(pages)), dtype=np.int32)
    starts = np.cumsum([0] + pages)
    for b, count in enumerate(pages):
        table[b, :count] = order[starts[b]:starts[b] + count]
    store = (sum(pages), page_size, heads_kv, head_dim)
    k_pages, v_pages = (random_values(rng, store, dtype).transpose(0, 2, 1, 3) for _ in range(2))
    return k_pages, v_pages, table


def mixed_step_case(chunks, chunk, context, decodes, decode_q, heads_q, heads_kv, head_dim, page_size, cls="",
                    dtype="bfloat16") -> Case:
    """One serving step over a shuffled paged cache: ``chunks`` prefill chunks of ``chunk``
    queries (each the newest of ``context + chunk`` keys) and ``decodes`` decodes of
    ``decode_q`` queries over the PAGED_MIXED lengths, causal. "cufuse" runs it as one packed call
    (cu_seqlens_q); "cufuse two calls" as a paged prefill of the chunks then a paged decode, on
    the same pages and q (strided views). The rate is over the bytes read (each sequence's K and V
    once per KV head, q, out), so decode-dominated steps read as a fraction of the copy."""
    decode_lengths = [PAGED_MIXED[i % len(PAGED_MIXED)] for i in range(decodes)]
    lengths = [context + chunk] * chunks + decode_lengths
    queries = [chunk] * chunks + [decode_q] * decodes
    cu = np.concatenate([[0], np.cumsum(queries)]).astype(np.int32)
    n_prefill, tokens = chunks * chunk, int(cu[-1])

    def make_inputs(xp, rng):
        k_pages, v_pages, table = _shuffled_pages(rng, lengths, page_size, heads_kv, head_dim, dtype)
        q = random_values(rng, (tokens, heads_q, head_dim), dtype)
        # the two calls' 4-D views of the packed q: (B, Hq, Nq, D) over the same rows
        q_prefill = q[:n_prefill].reshape(chunks, chunk, heads_q, head_dim).transpose(0, 2, 1, 3)
        q_decode = q[n_prefill:].reshape(decodes, decode_q, heads_q, head_dim).transpose(0, 2, 1, 3)
        out_dtype = resolve_dtype(dtype)
        return (q, k_pages, v_pages, xp.asarray(table), xp.asarray(np.int32(lengths)), xp.asarray(cu), q_prefill,
                q_decode, xp.empty((chunks, heads_q, chunk, head_dim), dtype=out_dtype),
                xp.empty((decodes, heads_q, decode_q, head_dim), dtype=out_dtype),
                xp.empty((tokens, heads_q, head_dim), dtype=out_dtype))

    def one_call(q, kp, vp, bt, sl, cu_q, qp, qd, out_p, out_d, out):
        return cufuse.attention_paged(q, kp, vp, bt, sl, cu_seqlens_q=cu_q, out=out)

    def two_calls(q, kp, vp, bt, sl, cu_q, qp, qd, out_p, out_d, out):
        cufuse.attention_paged(qp, kp, vp, bt[:chunks], sl[:chunks], out=out_p)
        return cufuse.attention_paged(qd, kp, vp, bt[chunks:], sl[chunks:], out=out_d)

    itemsize = resolve_dtype(dtype).itemsize
    read = sum(lengths) * heads_kv * 2 * head_dim * itemsize + 2 * tokens * heads_q * head_dim * itemsize
    # QK^T and PV over each query's visible keys (causal within the chunk)
    visible = chunks * (chunk * context + chunk * (chunk + 1) // 2) + decode_q * sum(decode_lengths)
    return Case(
        op=MIXED_STEP,
        label=f"[{cls}] {chunks}x{chunk}+{context} prefill, {decodes}x{decode_q} decode G{heads_q // heads_kv} "
              f"Hkv{heads_kv} D{head_dim} S{page_size}",
        dtype=dtype,
        traffic=traffic.Traffic(flops=4 * visible * heads_q * head_dim, min_bytes=read, unfused_bytes=read),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=(Impl("cufuse", one_call), Impl("cufuse two calls", two_calls)),
        klass=cls,
    )


def mixed_step_cases(quick: bool = False) -> list:
    classes = MIXED_STEP_QUICK if quick else MIXED_STEP_CLASSES
    return [mixed_step_case(**{**MIXED_STEP_BASE, **change}, cls=name) for name, changes in classes.items()
            for change in changes]


def paged_class(case: Case) -> str:
    """The class a paged case reports its minimum in (the label's bracket)."""
    return case.label[1:case.label.index("]")]


def paged_cases(quick: bool = False) -> list:
    classes = PAGED_QUICK if quick else PAGED_CLASSES
    cases = [paged_case(**{**PAGED_BASE, **change}, cls=name) for name, changes in classes.items()
             for change in changes]
    page_sizes = (16,) if quick else (1, 16, 256)
    return cases + [paged_case(**{**PAGED_BASE, "page_size": s}, lengths=PAGED_MIXED, cls="mixed")
                    for s in page_sizes]
