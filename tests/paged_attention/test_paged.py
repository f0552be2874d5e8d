"""attention_paged and kv_append: the NumPy path against a direct computation, argument
checks, the default selection and plans (CPU), and the kernels against the float64 oracle
(GPU) on shapes that hit every dispatch branch."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cufuse import attention_paged, kv_append, reference
from cufuse._core.device import A100, H200
from cufuse.ops.paged_attention.mma import PagedMmaTile
from cufuse.ops.paged_attention.plan import plan_attention_paged
from cufuse.ops.paged_attention.select import UNITS_PER_SLOT, instantiations, mma_tile
from cufuse.ops.paged_attention.simt import PagedSimtRows

from .cases import BF16, F16, F32, F64, compare, make_pool, to_device


def direct(q, k_pages, v_pages, table, lens, causal=True, scale=None, window=None, softcap=None):
    """The formula element by element (tiny shapes): for each row its visible keys' softmax."""
    batch, heads_q, n_q, head_dim = q.shape
    heads_kv, page_size = k_pages.shape[1], k_pages.shape[2]
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    left, right = window or (None, None)
    out = np.zeros((batch, heads_q, n_q, v_pages.shape[-1]))
    for b in range(batch):
        length = int(lens[b])
        for h in range(heads_q):
            kv = h // (heads_q // heads_kv)
            keys = [(table[b, j // page_size], j % page_size) for j in range(length)]
            for i in range(n_q):
                p = i + length - n_q
                seen = [j for j in range(length) if (not causal or j <= p) and (left is None or j >= p - left)
                        and (right is None or j <= p + right)]
                if not seen:
                    continue
                s = np.array([q[b, h, i].astype(np.float64) @ k_pages[keys[j][0], kv, keys[j][1]].astype(np.float64)
                              for j in seen]) * scale
                if softcap is not None:
                    s = softcap * np.tanh(s / softcap)
                w = np.exp(s - s.max())
                w /= w.sum()
                out[b, h, i] = sum(wj * v_pages[keys[j][0], kv, keys[j][1]].astype(np.float64)
                                   for wj, j in zip(w, seen))
    return out


@pytest.mark.parametrize("causal,window,softcap", [(True, None, None), (False, None, None), (True, (3, None), None),
                                                   (False, (2, 1), 5.0), (True, (None, 4), 2.0)])
@pytest.mark.parametrize("layout", ["phsd", "pshd"])
def test_numpy_path_matches_direct(rng, causal, window, softcap, layout):
    lengths = [0, 2, 9, 13]
    k, v, table, lens = make_pool(rng, lengths, 4, 2, 8, 5, F64, layout=layout, shared_prefix=1)
    q = rng.standard_normal((4, 6, 3, 8))
    out, lse = attention_paged(q, k, v, table, lens, causal=causal, window=window, softcap=softcap, return_lse=True)
    np.testing.assert_allclose(out, direct(q, k, v, table, lens, causal, None, window, softcap), atol=1e-12)
    assert out.dtype == np.float64 and lse.dtype == np.float64
    assert np.all(lse[0] == -np.inf) and np.all(out[0] == 0)  # length 0
    if causal and window is None:
        assert np.all(lse[1, :, 0] == -np.inf)  # Nq = 3 > length 2: the first query sees no key


def test_reference_window_tiles_agree(rng):
    q, k, v = (rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 40, 16)), rng.standard_normal((2, 40, 8)))
    full = reference.attention(q, k, v, causal=True, window=(7, None), softcap=3.0, tile=64)
    np.testing.assert_allclose(reference.attention(q, k, v, causal=True, window=(7, None), softcap=3.0, tile=3),
                               full, atol=1e-13)


def test_kv_append_numpy_then_attention(rng):
    lengths, n_new = [5, 0, 17], 3
    k, v, table, lens = make_pool(rng, lengths, 4, 2, 16, 16, F32, spare_tokens=n_new)
    k_new, v_new = (rng.standard_normal((3, 2, n_new, 16)).astype(F32) for _ in range(2))
    kv_append(k, v, k_new, v_new, table, lens)
    new_lens = lens + n_new
    for b, length in enumerate(new_lens):
        got = reference.gather_pages(k, table[b], int(length))
        np.testing.assert_array_equal(got[:, -n_new:], k_new[b])
    q = rng.standard_normal((3, 4, n_new, 16)).astype(F32)
    out = attention_paged(q, k, v, table, new_lens)
    np.testing.assert_allclose(out, direct(q, k, v, table, new_lens), atol=2e-6)


def _bad_inputs(rng):
    k, v, table, lens = make_pool(rng, [5, 9], 4, 2, 8, 8, F32)
    q = rng.standard_normal((2, 4, 1, 8)).astype(F32)
    return q, k, v, table, lens


@pytest.mark.parametrize("change,error,argument", [
    (lambda a: {**a, "block_table": a["block_table"].astype(np.int64)}, TypeError, "block_table"),
    (lambda a: {**a, "seq_lens": a["seq_lens"].astype(np.int64)}, TypeError, "seq_lens"),
    (lambda a: {**a, "seq_lens": a["seq_lens"][:1]}, ValueError, "seq_lens"),
    (lambda a: {**a, "block_table": a["block_table"][0]}, ValueError, "block_table"),
    (lambda a: {**a, "q": a["q"][:, :3]}, ValueError, "k_pages"),  # Hq % Hkv
    (lambda a: {**a, "q": a["q"][:, :, :0]}, ValueError, "q"),  # Nq = 0
    (lambda a: {**a, "q": a["q"][..., :4]}, ValueError, "k_pages"),  # head dim
    (lambda a: {**a, "v_pages": a["v_pages"][:, :1]}, ValueError, "v_pages"),
    (lambda a: {**a, "k_pages": a["k_pages"][..., ::2]}, ValueError, "k_pages"),  # last stride not 1
    (lambda a: {**a, "q": a["q"].astype(np.float16)}, TypeError, "k_pages"),
    (lambda a: {**a, "window": (1, -2)}, ValueError, "window"),
    (lambda a: {**a, "window": 3}, TypeError, "window"),
    (lambda a: {**a, "softcap": 0.0}, ValueError, "softcap"),
    (lambda a: {**a, "scale": float("nan")}, ValueError, "scale"),
    (lambda a: {**a, "causal": "yes"}, TypeError, "causal"),
    (lambda a: {**a, "seq_lens": a["seq_lens"] + 100}, ValueError, "seq_lens"),
    (lambda a: {**a, "block_table": np.where(a["block_table"] >= 0, 99, -1).astype(np.int32)}, ValueError,
     "block_table"),
])
def test_bad_inputs_name_the_argument(rng, change, error, argument):
    q, k, v, table, lens = _bad_inputs(rng)
    args = change({"q": q, "k_pages": k, "v_pages": v, "block_table": table, "seq_lens": lens})
    with pytest.raises(error, match=rf"attention_paged: argument '{argument}'"):
        attention_paged(**args)


def test_kv_append_bad_inputs(rng):
    k, v, table, lens = make_pool(rng, [5, 9], 4, 2, 8, 8, F32, spare_tokens=1)
    k_new = rng.standard_normal((2, 2, 1, 8)).astype(F32)
    with pytest.raises(ValueError, match="kv_append: argument 'v_new'"):
        kv_append(k, v, k_new, k_new[:, :1], table, lens)
    with pytest.raises(ValueError, match="kv_append: argument 'seq_lens'"):
        kv_append(k, v, k_new, k_new, table, lens + 100)
    with pytest.raises(TypeError, match="kv_append: argument 'k_new'"):
        kv_append(k, v, k_new.astype(np.float16), k_new, table, lens)


# (dtype, D, Dv, Hq, Hkv, Nq, page size, lengths, layout, extras): every branch of the default
# selection (row warps 1 / 2 / 4, head-dim buckets, split and unsplit sequences, 16-byte and
# element loads, the simt kernel) and the grouped-query decode shapes of the bench.
GPU_CASES = [
    (BF16, 128, 128, 8, 8, 1, 16, [700, 0, 33, 2000], "phsd", {}),  # G 1, a length-0 sequence
    (F16, 128, 128, 32, 8, 1, 1, [1500, 3, 257], "pshd", {}),  # G 4, page size 1, vLLM layout
    (BF16, 64, 64, 16, 1, 2, 256, [3000, 40, 1], "phsd", {}),  # G 16 x Nq 2 = 32 rows: 2 row warps
    (F16, 256, 256, 8, 2, 5, 7, [600, 4, 90], "pshd", {}),  # odd page size, Nq 5 > length 4, 20 rows
    (BF16, 128, 96, 16, 2, 8, 16, [1100, 130], "phsd", {}),  # 64 rows: 4 row warps, Dv < D
    (F16, 64, 64, 64, 4, 8, 32, [900, 2], "phsd", {}),  # 128 rows: 2 row blocks
    (BF16, 59, 59, 4, 2, 3, 16, [800, 21], "phsd", {}),  # odd head dim: element loads
    (F16, 128, 128, 8, 2, 1, 16, [5000, 100, 7], "pshd", {"shared_prefix": 4}),  # common prefix, split
    (BF16, 128, 128, 8, 2, 4, 16, [1200, 77], "phsd", {"window": (100, None)}),  # sliding window
    (F16, 64, 64, 4, 4, 2, 16, [700, 50], "phsd", {"softcap": 30.0, "causal": False}),
    (F16, 64, 64, 4, 2, 3, 8, [600, 9], "phsd", {"window": (20, 2), "causal": False, "scale": 0.3}),
    (F32, 40, 24, 6, 3, 2, 5, [130, 0, 1], "pshd", {"window": (50, None)}),  # simt
    (F64, 72, 72, 4, 1, 3, 16, [90, 2], "phsd", {"softcap": 4.0}),
]


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0].name}-D{c[1]}-G{c[3] // c[4]}-Nq{c[5]}-S{c[6]}")
def test_kernels_match_oracle(cp, rng, case):
    dtype, d, dv, heads_q, heads_kv, n_q, page_size, lengths, layout, extras = case
    extras = dict(extras)
    prefix = extras.pop("shared_prefix", 0)
    k, v, table, lens = make_pool(rng, lengths, page_size, heads_kv, d, dv, dtype, layout=layout,
                                  shared_prefix=prefix)
    q = rng.standard_normal((len(lengths), heads_q, n_q, d)).astype(dtype)
    assert compare(cp, q, k, v, table, lens, **extras) == []


def test_forced_configs_match_oracle(cp, rng):
    k, v, table, lens = make_pool(rng, [2500, 60], 16, 2, 128, 128, F16)
    q = rng.standard_normal((2, 4, 1, 128)).astype(F16)
    tile = mma_tile(256, 4, H200)  # a wider tile than needed, 4 row warps for 2 rows
    assert compare(cp, q, k, v, table, lens, config=tile) == []
    with pytest.raises(ValueError, match="argument 'config'"):
        attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens),
                        config=PagedSimtRows())


def test_one_long_sequence_among_many_short(cp, rng):
    """A long sequence split over many units beside 299 short unsplit ones, 64 rows a KV head
    (4 row warps), partials beyond the reused workspace."""
    lengths = [20000] + [int(n) for n in rng.integers(0, 40, 299)]
    k, v, table, lens = make_pool(rng, lengths, 16, 4, 128, 128, BF16, layout="pshd")
    q = rng.standard_normal((len(lengths), 64, 4, 128)).astype(BF16)
    assert compare(cp, q, k, v, table, lens) == []


def test_calls_with_other_splits(cp, rng):
    """Back-to-back calls on one stream whose sequences split differently each merge every
    sequence once (nothing of the earlier call's schedule is reused)."""
    k, v, table, lens = make_pool(rng, [7000, 3000, 50], 16, 2, 64, 64, F16)
    q = rng.standard_normal((3, 8, 3, 64)).astype(F16)
    attention_paged(cp.asarray(q), cp.asarray(k), cp.asarray(v), cp.asarray(table), cp.asarray(lens))
    assert compare(cp, q, k, v, table, np.int32([2500, 2900, 40])) == []
    assert compare(cp, q, k, v, table, lens) == []


def test_merge_warps_follow_one_sequence_units():
    """The merge's block size comes from one sequence's unit bound, not the whole grid's."""
    tile = mma_tile(128, 1, H200)
    plan = tile.plan(_problem(batch=128, heads_kv=8, max_pages=64), H200)  # 1024 keys: at most 2 units
    assert plan.launches[1].block == (32,)
    plan = tile.plan(_problem(batch=1, heads_kv=1, max_pages=65536), H200)  # 1M keys: 32 warps
    assert plan.launches[1].block == (1024,)


def test_bitwise_reproducible(cp, rng):
    k, v, table, lens = make_pool(rng, [9000, 300, 4000], 16, 2, 128, 128, BF16)
    args = [cp.asarray(x) for x in (rng.standard_normal((3, 8, 2, 128)).astype(BF16), k, v, table, lens)]
    first = attention_paged(*args, return_lse=True)
    second = attention_paged(*args, return_lse=True)
    assert all(bool((a.view(cp.uint8) == b.view(cp.uint8)).all()) for a, b in zip(first, second))


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_kv_append_then_attention(cp, rng, dtype):
    lengths, n_new, page_size = [300, 0, 47], 4, 16
    k, v, table, lens = make_pool(rng, lengths, page_size, 2, 64, 64, dtype, layout="pshd", spare_tokens=n_new)
    k_new, v_new = (rng.standard_normal((3, 2, n_new, 64)).astype(dtype) for _ in range(2))
    k_dev, v_dev = to_device(cp, k), to_device(cp, v)
    kv_append(k_dev, v_dev, cp.asarray(k_new), cp.asarray(np.ascontiguousarray(np.swapaxes(v_new, 1, 2))).swapaxes(1, 2), cp.asarray(table),
              cp.asarray(lens))
    kv_append(k, v, k_new, v_new, table, lens)  # the NumPy path, in place
    np.testing.assert_array_equal(cp.asnumpy(k_dev), k)
    np.testing.assert_array_equal(cp.asnumpy(v_dev), v)
    q = rng.standard_normal((3, 4, n_new, 64)).astype(dtype)
    assert compare(cp, q, k, v, table, lens + n_new) == []


def test_debug_checks_page_indices(cp, rng, monkeypatch):
    k, v, table, lens = make_pool(rng, [40, 9], 16, 1, 64, 64, F16)
    table[1, 0] = k.shape[0] + 5
    q = rng.standard_normal((2, 1, 1, 64)).astype(F16)
    monkeypatch.setenv("CUFUSE_DEBUG", "1")
    with pytest.raises(ValueError, match="attention_paged: argument 'block_table'"):
        attention_paged(*(cp.asarray(x) for x in (q, k, v, table, lens)))


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_plans_reach_only_listed_kernels(dev):
    listed = set(instantiations(dev))
    for group, n_q, d, dtype in [(1, 1, 128, F16), (8, 2, 64, BF16), (16, 8, 256, F16), (4, 1, 59, BF16),
                                 (2, 2, 32, F32), (1, 1, 100, F64)]:
        for max_pages in (1, 4096):
            plan = plan_attention_paged((3, 2 * group, n_q, d), (0,) * 4, (50, 2, 16, d), (0, 0, 0, 1),
                                        (50, 2, 16, d), (0, 0, 0, 1), (3, max_pages), (max_pages, 1), 1, dtype,
                                        True, 0.1, (-1, -1), 0.0, False, (True, True), dev)
            assert {launch.spec for launch in plan.launches} <= listed
            split = len(plan.launches) == 2
            assert split == (dtype in (F16, BF16) and max_pages * 16 > 512)


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_default_tiles_fit_the_device(dev):
    for bucket in (64, 128, 256):
        for warps in (1, 2, 4):
            assert mma_tile(bucket, warps, dev).smem_bytes <= dev.max_smem_per_block
    assert mma_tile(256, 1, A100).stages == 2 and mma_tile(256, 1, H200).stages == 3


def test_grid_bounds_the_schedule():
    """The host grid covers the most units find_unit can make: target / heads + B."""
    tile = mma_tile(128, 1, H200)
    plan = tile.plan(_problem(batch=5, heads_kv=8, max_pages=1000), H200)
    units, heads = plan.launches[0].grid
    assert heads == 8 and units == math.ceil(tile.target_units / 8) + 5
    assert isinstance(tile, PagedMmaTile) and tile.target_units == H200.sm_count * tile.resident_blocks(H200) * UNITS_PER_SLOT


def _problem(batch, heads_kv, max_pages):
    from cufuse.ops.paged_attention.problem import describe
    return describe((batch, heads_kv, 1, 128), (0,) * 4, (10, heads_kv, 16, 128), (0, 0, 0, 1), (10, heads_kv, 16, 128),
                    (0, 0, 0, 1), (batch, max_pages), (max_pages, 1), 1, F16, True, 0.1, (-1, -1), 0.0, False,
                    (True, True))
