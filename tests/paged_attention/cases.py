"""Inputs and the oracle comparison of the paged-attention tests and of ``sanitize.py``:
page pools with shuffled tables (optionally a prefix shared by every sequence) in either
layout, packed serving steps, and the check against the float64 oracle (pages gathered, then
dense attention), and a call with decreasing prefix sums."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from cufuse import attention_paged, reference

from ..conftest import poisoned

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
# Max error against the float64 oracle, relative to max(1, max |oracle|): the 16-bit kernels
# round P and the output to the dtype (2^-8 bf16, 2^-11 f16) and sum a few such terms.
TOLERANCE = {BF16: 2.5e-2, F16: 4e-3, F32: 2e-5, F64: 1e-10}
UNUSED_PAGE = -1  # table entries no sequence uses: a kernel reading one would fault
# A decode step of 64 sequences (q_tile 1), every 16th split over several units by its keys.
DECREASING_LENGTHS = [4000 if b % 16 == 0 else 40 + 37 * b for b in range(64)]


def make_pool(rng, lengths, page_size, heads_kv, head_dim, head_dim_v, dtype, *, layout="phsd", shared_prefix=0,
              spare_tokens=0, spare_pages=3):
    """``(k_pages, v_pages, block_table, seq_lens)`` as NumPy arrays: each sequence's pages
    drawn from a shuffled pool, the first ``shared_prefix`` pages shared by all sequences,
    room for ``spare_tokens`` more tokens a sequence; ``layout`` "phsd" stores (P, Hkv, S, D),
    "pshd" vLLM's (P, S, Hkv, D) passed as a transposed view."""
    pages_needed = [max(shared_prefix, -(-(n + spare_tokens) // page_size)) for n in lengths]
    max_pages = max(pages_needed + [1])
    own = sum(n - shared_prefix for n in pages_needed)
    n_pages = shared_prefix + own + spare_pages
    pool = rng.permutation(n_pages)
    table = np.full((len(lengths), max_pages + 1), UNUSED_PAGE, dtype=np.int32)
    prefix, cursor = pool[:shared_prefix], shared_prefix
    for b, needed in enumerate(pages_needed):
        table[b, :shared_prefix] = prefix
        table[b, shared_prefix:needed] = pool[cursor:cursor + needed - shared_prefix]
        cursor += needed - shared_prefix

    def pages(dim):
        if layout == "phsd":
            return rng.standard_normal((n_pages, heads_kv, page_size, dim)).astype(dtype)
        return rng.standard_normal((n_pages, page_size, heads_kv, dim)).astype(dtype).transpose(0, 2, 1, 3)

    return pages(head_dim), pages(head_dim_v), table, np.asarray(lengths, dtype=np.int32)


def make_step(rng, queries, lengths, page_size, heads_q, heads_kv, head_dim, head_dim_v, dtype, *, layout="pshd",
              shared_prefix=0):
    """One packed serving step as NumPy arrays ``(q, k_pages, v_pages, block_table, seq_lens,
    cu_seqlens_q)``: sequence b's ``queries[b]`` newest queries (0 allowed) over its
    ``lengths[b]`` keys, q ``(Tq, Hq, D)``; pages as ``make_pool`` makes them."""
    k, v, table, lens = make_pool(rng, lengths, page_size, heads_kv, head_dim, head_dim_v, dtype, layout=layout,
                                  shared_prefix=shared_prefix)
    cu = np.concatenate([[0], np.cumsum(queries, dtype=np.int64)]).astype(np.int32)
    q = rng.standard_normal((int(cu[-1]), heads_q, head_dim)).astype(dtype)
    return q, k, v, table, lens, cu


def to_device(cp, arr):
    """A device copy with the same strides (a transposed view stays a transposed view)."""
    if arr.flags.c_contiguous:
        return cp.asarray(arr)
    base = arr.transpose(0, 2, 1, 3)
    return cp.asarray(np.ascontiguousarray(base)).transpose(0, 2, 1, 3)


def compare(cp, q, k_pages, v_pages, table, lens, *, use_out=True, config=None, **kwargs):
    """Run the GPU path, compare out and lse with the float64 oracle; a list of failures."""
    dtype = q.dtype
    ref, ref_lse = reference.attention_paged(q, k_pages, v_pages, table, lens, return_lse=True, **kwargs)
    out = poisoned(cp, ref.shape, dtype) if use_out else None
    gpu_kwargs = dict(kwargs)
    for name in ("sinks", "cu_seqlens_q"):
        if kwargs.get(name) is not None:
            gpu_kwargs[name] = cp.asarray(kwargs[name])
    got, lse = attention_paged(cp.asarray(q), to_device(cp, k_pages), to_device(cp, v_pages), cp.asarray(table),
                               cp.asarray(lens), return_lse=True, out=out, config=config, **gpu_kwargs)
    failures = []
    if use_out and got is not out:
        failures.append("out was not returned")
    if lse.dtype != (np.float64 if dtype == np.float64 else np.float32):  # the accumulator's dtype
        failures.append(f"lse dtype {lse.dtype}")
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse).astype(np.float64)
    tol = TOLERANCE[dtype] * max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=0.0)) if np.isfinite(got).all() else math.inf
    if not err <= tol:
        failures.append(f"out error {err:.3g} > {tol:.3g}")
    finite = np.isfinite(ref_lse)
    if not (np.array_equal(np.isfinite(lse), finite) and np.all(lse[~finite] == -np.inf)):
        failures.append("lse -inf pattern differs")
    elif finite.any():
        lse_err = float(np.abs(lse[finite] - ref_lse[finite]).max())
        # lse float32 (float64 for float64): its rounding floor is at most 2^-24 of its magnitude
        if lse_err > max(10 * TOLERANCE[dtype], 1e-6 * max(1.0, float(np.abs(ref_lse[finite]).max()))):
            failures.append(f"lse error {lse_err:.3g}")
    return failures


def decreasing_prefix_sums(batch, tq):
    """cu_seqlens_q outside the contract: 0, Tq, 0, Tq, ..., Tq, so that every other sequence's
    clamped rows are all of q (they overlap, and their query tiles outnumber the grid's)."""
    return np.int32([tq * (b % 2) for b in range(batch)] + [tq])


def run_decreasing(cp, rng, dtype=BF16):
    """The decode step of DECREASING_LENGTHS on the GPU with ``decreasing_prefix_sums``, after
    small blocks of the memory pool were filled with 0x7F bytes (unit ranges no block writes read
    as huge), synchronised so that a fault surfaces here. Returns the step (NumPy, valid
    cu_seqlens_q) for a valid call after it."""
    step = make_step(rng, [1] * len(DECREASING_LENGTHS), DECREASING_LENGTHS, 16, 8, 2, 64, 64, dtype)
    q, k, v, table, lens, _ = step
    args = (cp.asarray(q), to_device(cp, k), to_device(cp, v), cp.asarray(table), cp.asarray(lens))
    bad = cp.asarray(decreasing_prefix_sums(len(lens), len(q)))
    stale = [cp.full(128, 0x7F7F7F7F, dtype=cp.int32) for _ in range(32)]
    del stale  # back to the pool, where the call's B x 2 unit range ints (512 bytes) find one
    attention_paged(*args, cu_seqlens_q=bad, return_lse=True)
    cp.cuda.get_current_stream().synchronize()
    return step
