"""attention_paged with ``sinks``, GPU: the sink folded into each sequence's first work unit
(the merge then counts it once), against the float64 oracle: split and unsplit sequences, an
empty sequence and rows without keys (out 0, lse the sink), grouped heads, both kernels."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import attention_paged
from cufuse.ops.paged_attention.simt import PagedSimtRows

from .cases import BF16, F16, F32, F64, compare, make_pool

# (dtype, D, Hq, Hkv, Nq, page size, lengths, sinks length, extras)
CASES = [
    (BF16, 128, 8, 2, 1, 16, [5000, 0, 33], 8, {}),  # split + merge, a length-0 sequence
    (F16, 64, 16, 1, 2, 8, [3000, 1], 4, {"window": (200, None)}),  # 32 packed rows, H 4 < Hq
    (F16, 256, 8, 2, 5, 7, [600, 4], 8, {"softcap": 20.0}),  # Nq 5 > length 4: rows without keys
    (BF16, 64, 4, 4, 8, 16, [1100, 130], 4, {"causal": False}),
    (F32, 40, 6, 3, 2, 5, [130, 0, 1], 6, {}),  # simt
    (F64, 72, 4, 1, 3, 16, [90, 2], 2, {"window": (10, None)}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-D{c[1]}-Hq{c[2]}-Nq{c[4]}")
def test_sinks_match_oracle(cp, rng, case):
    dtype, d, heads_q, heads_kv, n_q, page_size, lengths, heads, extras = case
    k, v, table, lens = make_pool(rng, lengths, page_size, heads_kv, d, d, dtype)
    q = rng.standard_normal((len(lengths), heads_q, n_q, d)).astype(dtype)
    sinks = (2 * rng.standard_normal(heads)).astype(np.float32)
    assert compare(cp, q, k, v, table, lens, sinks=sinks, **extras) == []


def test_empty_sequence_and_forced_simt(cp, rng):
    k, v, table, lens = make_pool(rng, [0, 700], 16, 2, 64, 64, F32)
    q = rng.standard_normal((2, 4, 3, 64)).astype(F32)
    sinks = np.float32([0.5, -1.0, 2.0, 3.0])
    assert compare(cp, q, k, v, table, lens, sinks=sinks, config=PagedSimtRows(warps=2)) == []
    out, lse = attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens),
                               sinks=cp.asarray(sinks), return_lse=True)
    assert cp.all(out[0] == 0) and cp.all(lse[0] == cp.asarray(sinks)[:, None])
    # the prepared call with and without sinks
    again = attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens),
                            sinks=cp.asarray(sinks))
    assert cp.array_equal(again, out)
    plain = attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens))
    assert not cp.array_equal(plain, out)


def test_16bit_empty_sequence_lse_is_the_sink(cp, rng):
    k, v, table, lens = make_pool(rng, [0, 4000], 16, 1, 128, 128, BF16)
    q = rng.standard_normal((2, 4, 1, 128)).astype(BF16)
    sinks = cp.asarray(np.float32([0.5, -1.0, 2.0, 3.0]))
    out, lse = attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens),
                               sinks=sinks, return_lse=True)
    assert cp.all(out[0] == 0)
    assert cp.allclose(lse[0], cp.broadcast_to(sinks[:, None], lse[0].shape), rtol=1e-6, atol=0)
