"""attention_varlen, CPU: the NumPy path and the tiled oracle against a naive float64
computation per sequence (lengths 0 included, GQA, causal, window, softcap, sinks, lse), the
validation errors, and the SIMT plan's launch (grid from the shapes only, its arguments); the
wgmma kernel's host side and the driver chain: test_varlen_wgmma_host.py."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse import reference
from cufuse._core.plans import NULL
from cufuse.ops.attention import select
from cufuse.ops.attention.varlen_problem import describe_varlen
from cufuse.ops.attention.varlen_simt import VarlenSimtRows, instantiations

from .test_sinks_host import naive


def packed(rng, lens_q, lens_k, heads_q, heads_kv, d, dv, dtype=np.float64):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rng.standard_normal((int(cu_q[-1]), heads_q, d)).astype(dtype)
    k = rng.standard_normal((int(cu_k[-1]), heads_kv, d)).astype(dtype)
    v = rng.standard_normal((int(cu_k[-1]), heads_kv, dv)).astype(dtype)
    return q, k, v, cu_q, cu_k


def naive_varlen(q, k, v, cu_q, cu_k, sinks=None, **options):
    """Each sequence on its own through the naive dense softmax; without sinks a sink of -1e300, whose
    weight is 0 (a row without keys: out 0, lse -1e300, read as -inf)."""
    heads_q, heads_kv = q.shape[1], k.shape[1]
    none = sinks is None
    sinks = np.full(heads_q, -1e300) if none else sinks
    out = np.zeros(q.shape[:2] + v.shape[-1:])
    lse = np.full(q.shape[:2], -np.inf)
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b + 1] == cu_q[b]:
            continue
        kv_head = np.arange(heads_q) // (heads_q // heads_kv)
        o, s = naive(q[rows].transpose(1, 0, 2), k[keys][:, kv_head].transpose(1, 0, 2),
                     v[keys][:, kv_head].transpose(1, 0, 2), sinks, **options)
        out[rows], lse[rows] = o.transpose(1, 0, 2), s.T
    if none:
        lse[lse <= -1e299] = -np.inf
    return out, lse


CASES = [
    dict(),
    dict(causal=True),
    dict(causal=True, window=(5, None)),
    dict(window=(3, 2)),
    dict(softcap=2.0, scale=0.7),
]


@pytest.mark.parametrize("options", CASES)
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_numpy_path_and_oracle_match_naive(rng, options, group, with_sinks):
    lens_q, lens_k = [0, 1, 7, 3, 0, 65, 12], [4, 0, 7, 9, 2, 64, 30]
    q, k, v, cu_q, cu_k = packed(rng, lens_q, lens_k, 2 * group, 2, 8, 5)
    sinks = rng.standard_normal(2 * group).astype(np.float32) if with_sinks else None
    want, want_lse = naive_varlen(q, k, v, cu_q, cu_k, sinks=sinks, **options)
    out, lse = cufuse.attention_varlen(q, k, v, cu_q, cu_k, sinks=sinks, return_lse=True, **options)
    oracle, oracle_lse = reference.attention_varlen(q, k, v, cu_q, cu_k, sinks=sinks, return_lse=True, tile=16,
                                                    **options)
    for got, got_lse in ((out, lse), (oracle, oracle_lse)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_lse, want_lse, rtol=1e-12, atol=1e-12)
    assert out.shape == (q.shape[0], 2 * group, 5) and lse.dtype == np.float64
    keyless = np.repeat(np.array(lens_k) == 0, lens_q)
    assert np.all(out[keyless] == 0)
    assert np.all(lse[keyless] == (sinks if with_sinks else -np.inf))


def test_dtypes_out_and_array_likes(rng):
    q, k, v, cu_q, cu_k = packed(rng, [3, 2], [2, 5], 2, 1, 4, 4, dtype=np.float16)
    out = np.full((5, 2, 4), np.nan, dtype=np.float16)
    result, lse = cufuse.attention_varlen(q, k, v, cu_q.tolist(), tuple(cu_k), out=out, return_lse=True)
    assert result is out and lse.dtype == np.float32 and not np.isnan(out).any()
    want = reference.attention_varlen(q, k, v, cu_q, cu_k)
    np.testing.assert_allclose(out, want, rtol=2e-3, atol=2e-3)
    assert cufuse.attention_varlen(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), cu_q,
                                   cu_k).dtype == np.float32


def test_empty_batch_and_no_tokens(rng):
    q, k, v, cu_q, cu_k = packed(rng, [], [], 2, 2, 4, 3)
    out, lse = cufuse.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True)
    assert out.shape == (0, 2, 3) and lse.shape == (0, 2)


def _errors_inputs():
    rng = np.random.default_rng(0)
    return packed(rng, [2, 3], [4, 1], 4, 2, 8, 8)


@pytest.mark.parametrize("change, error, match", [
    (dict(q=np.zeros((5, 4))), ValueError, "argument 'q' expected a 3-D array"),
    (dict(k=np.zeros((5, 2, 6))), ValueError, "argument 'k' expected last axis 8"),
    (dict(v=np.zeros((4, 2, 8))), ValueError, r"argument 'v' expected \(Tk, Hkv\)"),
    (dict(k=np.zeros((5, 3, 8)), v=np.zeros((5, 3, 8))), ValueError, "divides q's 4"),
    (dict(v=np.zeros((5, 2, 300))), ValueError, "head dim from 1 to 256"),
    (dict(k=np.zeros((5, 2, 8), dtype=np.float32)), TypeError, "argument 'k'"),
    (dict(cu_seqlens_q=np.array([0, 2, 5], dtype=np.int64)), TypeError, "'cu_seqlens_q' expected dtype int32"),
    (dict(cu_seqlens_k=np.array([0, 5], dtype=np.int32)), ValueError, "'cu_seqlens_k' expected shape"),
    (dict(cu_seqlens_q=np.zeros((1, 3), dtype=np.int32)), ValueError, "'cu_seqlens_q' expected a 1-D array"),
    (dict(cu_seqlens_q=np.zeros(0, dtype=np.int32), cu_seqlens_k=np.zeros(0, dtype=np.int32)), ValueError,
     "B \\+ 1 >= 1"),
    (dict(cu_seqlens_q=[1, 2, 5]), ValueError, "'cu_seqlens_q' expected 0 first"),
    (dict(cu_seqlens_k=[0, 4, 3]), ValueError, "'cu_seqlens_k' expected non-decreasing"),
    (dict(cu_seqlens_k=[0, 4, 4]), ValueError, "'cu_seqlens_k' expected 5 last"),
    (dict(cu_seqlens_q=[0, 2, 2**40]), ValueError, "'cu_seqlens_q' expected int32 values"),
    (dict(sinks=np.zeros(3, dtype=np.float32)), ValueError, "'sinks' expected a length"),
    (dict(sinks=np.zeros(4)), TypeError, "'sinks' expected dtype float32"),
    (dict(window=(1, -1)), ValueError, "'window'"),
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(out=np.zeros((5, 4, 7))), ValueError, "'out' expected shape"),
])
def test_validation(change, error, match):
    q, k, v, cu_q, cu_k = _errors_inputs()
    args = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k) | change
    with pytest.raises(error, match=match) as info:
        cufuse.attention_varlen(**args)
    assert str(info.value).startswith("attention_varlen: ")


def test_plan_grid_comes_from_shapes_only():
    shapes = {"q": (1000, 8, 128), "k": (3000, 2, 128), "v": (3000, 2, 64), "cu_seqlens_q": (6,), "cu_seqlens_k": (6,)}
    strides = {"q": (1024, 128, 1), "k": (256, 128, 1), "v": (128, 64, 1), "cu_seqlens_q": (1,), "cu_seqlens_k": (2,)}
    aligned = (True,) * 3
    problem = describe_varlen(shapes, strides, np.float16, aligned, True, 0.5, (-1, 3), None, True, 8)
    (launch,) = VarlenSimtRows().plan(problem, None).launches
    assert launch.grid == (250, 8) and launch.block == (128,)
    assert launch.args[:7] == ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "out", "lse")
    assert launch.args[7:13] == (5, 1000, 3000, 8, 4, 128) and launch.args[-4:] == (1, 2, "sinks", 8)
    assert launch.args[16:19] == (-1, 3, 3)  # window sides, flags causal | lse
    problem = describe_varlen(shapes, strides, np.float32, aligned, False, 0.5, (-1, -1), 2.0, False, 0)
    no_sinks = VarlenSimtRows().plan(problem, None)
    assert no_sinks.launches[0].args[6] == "out" and no_sinks.launches[0].args[-2:] == (NULL, 0)


def test_check_compile_lists_the_kernels():
    listed = select.instantiations(cufuse._core.device.H200)
    assert all(spec in listed for spec in instantiations()) and len(instantiations()) == 4


