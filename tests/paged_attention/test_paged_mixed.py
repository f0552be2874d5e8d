"""attention_paged with cu_seqlens_q (packed queries: one call for a step that mixes prefill chunks
and decodes) and kv_append with cu_seqlens_new: the NumPy path against the unpacked path and
the element formula, argument checks, the plans and a model of the device schedule (CPU); the
kernels against the float64 oracle, stream capture and every forced branch (GPU)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cufuse import attention_paged, kv_append, reference
from cufuse._core.device import A100, H200
from cufuse._core.lse_merge import merge_threads
from cufuse.ops.paged_attention.plan import plan_attention_paged
from cufuse.ops.paged_attention.problem import describe
from cufuse.ops.paged_attention.select import instantiations, mma_tile, row_warps_for
from cufuse.ops.paged_attention.simt import PagedSimtRows

from ..conftest import poisoned
from .cases import (BF16, DECREASING_LENGTHS, F16, F32, F64, TOLERANCE, compare, decreasing_prefix_sums, make_pool,
                    make_step, run_decreasing, to_device)
from .test_paged import direct


def _unpacked(q, k, v, table, lens, cu, **kwargs):
    """The packed call as one unpacked call a sequence (its rows as q (1, Hq, n, D))."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.full(q.shape[:-1], -np.inf)
    for b in range(len(lens)):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        if rows.stop > rows.start:
            o, l = attention_paged(q[rows].swapaxes(0, 1)[None], k, v, table[b:b + 1], lens[b:b + 1],
                                   return_lse=True, **kwargs)
            out[rows], lse[rows] = o[0].swapaxes(0, 1), l[0].T
    return out, lse


@pytest.mark.parametrize("kwargs", [{}, {"causal": False}, {"window": (5, None)}, {"window": (3, 2), "causal": False},
                                    {"softcap": 4.0}, {"sinks": np.float32([0.5, -1.0])}])
@pytest.mark.parametrize("layout", ["phsd", "pshd"])
def test_packed_numpy_path_matches_unpacked(rng, kwargs, layout):
    queries, lengths = [3, 0, 1, 9, 2, 0], [11, 7, 0, 20, 1, 0]  # 0 queries, 0 keys, Nq > length
    q, k, v, table, lens, cu = make_step(rng, queries, lengths, 4, 4, 2, 8, 6, F64, layout=layout, shared_prefix=1)
    out, lse = attention_paged(q, k, v, table, lens, cu_seqlens_q=cu, return_lse=True, **kwargs)
    ref, ref_lse = _unpacked(q, k, v, table, lens, cu, **kwargs)
    assert out.shape == (q.shape[0], 4, 6) and lse.shape == q.shape[:-1] and out.dtype == lse.dtype == np.float64
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-12)
    oracle, oracle_lse = reference.attention_paged(q, k, v, table, lens, cu_seqlens_q=cu, return_lse=True, tile=3,
                                                   **kwargs)
    np.testing.assert_allclose(out, oracle, atol=1e-12)
    np.testing.assert_allclose(lse, oracle_lse, atol=1e-12)


def test_packed_numpy_path_matches_direct(rng):
    queries, lengths = [2, 5, 1], [9, 5, 13]  # the second a fresh prefill chunk: its first query sees one key
    q, k, v, table, lens, cu = make_step(rng, queries, lengths, 4, 6, 2, 8, 5, F64, layout="phsd")
    out = attention_paged(q, k, v, table, lens, cu_seqlens_q=cu, window=(4, None), softcap=3.0)
    for b, n in enumerate(queries):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        want = direct(q[rows].swapaxes(0, 1)[None], k, v, table[b:b + 1], lens[b:b + 1], window=(4, None), softcap=3.0)
        np.testing.assert_allclose(out[rows], want[0].swapaxes(0, 1), atol=1e-12)


def test_packed_out_and_dtypes(rng):
    q, k, v, table, lens, cu = make_step(rng, [2, 3], [4, 9], 2, 4, 4, 16, 16, F32)
    out = np.full((5, 4, 16), np.nan, dtype=F32)
    assert attention_paged(q, k, v, table, lens, cu_seqlens_q=list(cu), out=out) is out
    np.testing.assert_allclose(out, _unpacked(q, k, v, table, lens, cu)[0], atol=2e-6)
    empty = attention_paged(q[:0], k, v, table, np.int32([0, 0]), cu_seqlens_q=np.int32([0, 0, 0]))
    assert empty.shape == (0, 4, 16)


def _packed_inputs(rng):
    q, k, v, table, lens, cu = make_step(rng, [2, 1], [5, 9], 4, 4, 2, 8, 8, F32)
    return {"q": q, "k_pages": k, "v_pages": v, "block_table": table, "seq_lens": lens, "cu_seqlens_q": cu}


@pytest.mark.parametrize("change,error,argument", [
    (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"].astype(np.int64)}, TypeError, "cu_seqlens_q"),
    (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"][None]}, ValueError, "cu_seqlens_q"),
    (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"][:2]}, ValueError, "cu_seqlens_q"),  # not B + 1
    (lambda a: {**a, "cu_seqlens_q": np.int32([1, 2, 3])}, ValueError, "cu_seqlens_q"),  # not 0 first
    (lambda a: {**a, "cu_seqlens_q": np.int32([0, 3, 2])}, ValueError, "cu_seqlens_q"),  # decreasing, not Tq last
    (lambda a: {**a, "cu_seqlens_q": np.int32([0, 1, 2])}, ValueError, "cu_seqlens_q"),  # Tq is 3
    (lambda a: {**a, "cu_seqlens_q": [0, 2, 2 ** 40]}, ValueError, "cu_seqlens_q"),  # outside int32
    (lambda a: {**a, "q": a["q"][None]}, ValueError, "q"),  # 4-D with cu_seqlens_q
    (lambda a: {**a, "cu_seqlens_q": None}, ValueError, "q"),  # 3-D without
    (lambda a: {**a, "q": a["q"][:, :3]}, ValueError, "k_pages"),  # Hq % Hkv
    (lambda a: {**a, "seq_lens": a["seq_lens"][:1]}, ValueError, "block_table"),  # B from seq_lens
    (lambda a: {**a, "seq_lens": a["seq_lens"].astype(np.int64)}, TypeError, "seq_lens"),
    (lambda a: {**a, "seq_lens": a["seq_lens"] + 100}, ValueError, "seq_lens"),
    (lambda a: {**a, "block_table": np.where(a["block_table"] >= 0, 99, -1).astype(np.int32)}, ValueError,
     "block_table"),
    (lambda a: {**a, "block_table": a["block_table"][:0], "seq_lens": a["seq_lens"][:0],
                "cu_seqlens_q": np.int32([0])}, ValueError, "q"),  # queries without a sequence
    (lambda a: {**a, "out": np.zeros((3, 4, 8, 1), dtype=F32)}, ValueError, "out"),
])
def test_packed_bad_inputs_name_the_argument(rng, change, error, argument):
    args = change(_packed_inputs(rng))
    with pytest.raises(error, match=rf"attention_paged: argument '{argument}'"):
        attention_paged(**args)


def _scatter(k_pages, table, lens, cu, k_new):
    """kv_append's packed semantics one token at a time."""
    page_size = k_pages.shape[2]
    for b in range(len(lens)):
        for n, t in enumerate(range(int(cu[b]), int(cu[b + 1]))):
            position = int(lens[b]) + n
            k_pages[table[b, position // page_size], :, position % page_size] = k_new[t]


@pytest.mark.parametrize("layout", ["phsd", "pshd"])
def test_packed_kv_append_numpy(rng, layout):
    lengths, new = [5, 0, 17, 3], [3, 0, 40, 1]
    k, v, table, lens = make_pool(rng, lengths, 4, 2, 16, 8, F32, layout=layout, spare_tokens=40)
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    k_new = rng.standard_normal((cu[-1], 2, 16)).astype(F32)
    v_new = rng.standard_normal((cu[-1], 2, 8)).astype(F32)
    want_k, want_v = k.copy(), v.copy()
    _scatter(want_k, table, lens, cu, k_new)
    _scatter(want_v, table, lens, cu, v_new)
    assert kv_append(k, v, k_new, v_new, table, lens, cu_seqlens_new=cu) is None
    np.testing.assert_array_equal(k, want_k)
    np.testing.assert_array_equal(v, want_v)
    # then the step's queries over the appended keys: packed equals unpacked
    q = rng.standard_normal((cu[-1], 4, 16)).astype(F32)
    out = attention_paged(q, k, v, table, lens + np.diff(cu), cu_seqlens_q=cu)
    np.testing.assert_allclose(out, _unpacked(q, k, v, table, lens + np.diff(cu), cu)[0], atol=2e-6)


def test_packed_kv_append_bad_inputs(rng):
    k, v, table, lens = make_pool(rng, [5, 9], 4, 2, 8, 8, F32, spare_tokens=2)
    cu = np.int32([0, 2, 3])
    k_new = rng.standard_normal((3, 2, 8)).astype(F32)
    with pytest.raises(ValueError, match="kv_append: argument 'k_new'"):  # 4-D with cu_seqlens_new
        kv_append(k, v, k_new[None], k_new[None], table, lens, cu_seqlens_new=cu)
    with pytest.raises(ValueError, match="kv_append: argument 'k_new'"):  # 3-D without
        kv_append(k, v, k_new, k_new, table, lens)
    with pytest.raises(ValueError, match="kv_append: argument 'v_new'"):
        kv_append(k, v, k_new, k_new[:, :1], table, lens, cu_seqlens_new=cu)
    with pytest.raises(TypeError, match="kv_append: argument 'cu_seqlens_new'"):
        kv_append(k, v, k_new, k_new, table, lens, cu_seqlens_new=cu.astype(np.int64))
    with pytest.raises(ValueError, match="kv_append: argument 'cu_seqlens_new'"):
        kv_append(k, v, k_new, k_new, table, lens, cu_seqlens_new=np.int32([0, 3, 2]))
    with pytest.raises(ValueError, match="kv_append: argument 'cu_seqlens_new'"):
        kv_append(k, v, k_new, k_new, table, lens, cu_seqlens_new=cu[:2])
    with pytest.raises(ValueError, match="kv_append: argument 'seq_lens'"):  # 16 + 1 keys past the 16 slots
        kv_append(k, v, k_new, k_new, table, np.int32([5, 16]), cu_seqlens_new=cu)


def _mixed_problem(tq, batch, heads_q, heads_kv, max_pages, page_size=16, head_dim=128, dtype=F16, window=(-1, -1)):
    return describe((tq, heads_q, head_dim), (heads_q * head_dim, head_dim, 1), (4096, heads_kv, page_size, head_dim),
                    (0, 0, 0, 1), (4096, heads_kv, page_size, head_dim), (0, 0, 0, 1), (batch, max_pages),
                    (max_pages, 1), 1, dtype, True, 0.1, window, 0.0, False, (True, True), 0, 1)


@pytest.mark.parametrize("tq,batch,group,tile,warps", [(3150, 63, 4, 16, 4), (60, 60, 4, 1, 1), (130, 63, 8, 4, 2),
                                                        (2000, 3, 1, 64, 4), (5, 5, 64, 1, 4), (0, 2, 2, 1, 1)])
def test_packed_query_tile(tq, batch, group, tile, warps):
    """Decode-only steps keep the decode tile, steps with prefill chunks fill the widest."""
    problem = _mixed_problem(tq, batch, 8 * group, 8, 64)
    assert problem.q_tile == tile and problem.rows == group * tile
    assert problem.query_tiles == tq // tile + batch
    if tq:
        plan = plan_attention_paged((tq, 8 * group, 128), (8 * group * 128, 128, 1), (4096, 8, 16, 128), (0, 0, 0, 1),
                                    (4096, 8, 16, 128), (0, 0, 0, 1), (batch, 64), (64, 1), 1, F16, True, 0.1,
                                    (-1, -1), 0.0, False, (True, True), H200, cu_stride=1)
        assert plan.launches[0].spec.template_args[2] == warps


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_packed_plans_reach_only_listed_kernels(dev):
    listed = set(instantiations(dev))
    for group, tq, batch, d, dtype in [(1, 1, 1, 128, F16), (8, 3150, 63, 64, BF16), (16, 40, 5, 256, F16),
                                       (4, 7, 3, 59, BF16), (2, 9, 4, 32, F32), (1, 3, 3, 100, F64)]:
        for max_pages in (1, 4096):
            plan = plan_attention_paged((tq, 2 * group, d), (0,) * 3, (50, 2, 16, d), (0, 0, 0, 1), (50, 2, 16, d),
                                        (0, 0, 0, 1), (batch, max_pages), (max_pages, 1), 1, dtype, True, 0.1, (-1, -1),
                                        0.0, False, (True, True), dev, cu_stride=1)
            assert {launch.spec for launch in plan.launches} <= listed
            if len(plan.launches) == 2:  # the merge covers every packed output row
                assert plan.launches[1].grid[0] == tq * 2 * group


def test_packed_merge_warps_follow_the_tile_bound():
    """A tile has at most ceil(target / heads) units: the merge of a step with 100K-key sequences
    is not sized by the keys alone (100K / 512 would give 32 warps to each of Tq x Hq rows)."""
    tile = mma_tile(128, 4, H200)
    plan = tile.plan(_mixed_problem(3150, 63, 32, 8, 6250), H200)
    heads = plan.launches[0].grid[1]
    assert plan.launches[1].grid[0] == 3150 * 32
    assert plan.launches[1].block == (merge_threads(math.ceil(tile.target_units / heads)),)
    assert plan.launches[1].block[0] < 1024


def test_packed_merge_takes_the_grid_units():
    """The merge reads no unit past the forward's grid (the partials' units): it gets their count."""
    plan = mma_tile(128, 4, H200).plan(_mixed_problem(3150, 63, 32, 8, 6250), H200)
    forward, merge = plan.launches
    assert merge.args[-1] == forward.grid[0] == plan.temporaries[0][1][0]


def _schedule(lens, cu, max_keys, tile, window, causal, target, blocks_per_unit, min_chunk, align):
    """paged.cuh find_unit, one unit after another: (b, key_begin, key_end, query0, queries, first,
    count), the keys those of its split that its tile's queries see; each sequence's rows clamped to
    [0, cu[-1]] as SeqRows clamps them to [0, Tq], and no check that cu does not decrease."""
    left, right = window
    right_limit = 0 if causal else right
    sequences = []
    for b in range(len(lens)):
        length = min(max(int(lens[b]), 0), max_keys)
        row_begin = min(max(int(cu[b]), 0), int(cu[-1]))
        n_q = min(max(int(cu[b + 1]), row_begin), int(cu[-1])) - row_begin
        lo = 0 if left < 0 else max(0, length - n_q - left)
        sequences.append((length, lo, n_q))
    total = sum((length - lo) * -(-n_q // tile) for length, lo, n_q in sequences)
    units = []
    for b, (length, lo, n_q) in enumerate(sequences):
        v = length - lo
        n = (2 * v * target + total * blocks_per_unit) // (2 * total * blocks_per_unit) if total > 0 else 1
        n = max(1, min(n, v // min_chunk))
        chunk = ((v + n - 1) // n + align - 1) // align * align
        count = -(-v // chunk) if v > 0 else 1
        first = len(units)
        for u in range(-(-n_q // tile) * count):
            query0 = u // count * tile
            tile_nq, position = min(tile, n_q - query0), query0 + length - n_q
            begin = lo + u % count * chunk
            end = min(length, begin + chunk)
            if right_limit >= 0:
                end = min(end, position + tile_nq + right_limit)
            units.append((b, max(begin, 0 if left < 0 else position - left), end, query0, tile_nq, first, count))
    return units


@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (True, (300, -1)), (False, (40, 9))])
def test_schedule_covers_each_visible_key_once(rng, causal, window):
    """A model of the packed schedule (find_unit): every key a query sees falls in exactly one
    unit of its query tile, and the units fit the grid."""
    left, right = window
    queries = [1200, 0, 300] + [int(n) for n in rng.integers(1, 5, 60)] + [0, 17, 40]
    lengths = [5000, 40, 300] + [int(n) for n in np.exp(rng.uniform(np.log(100), np.log(100_000), 60))] + [0, 9, 20]
    order = rng.permutation(len(queries))
    queries, lengths = [queries[i] for i in order], [lengths[i] for i in order]
    cu = np.concatenate([[0], np.cumsum(queries)])
    problem = _mixed_problem(int(cu[-1]), len(queries), 32, 8, 8192, window=window)
    tile = mma_tile(128, 4, H200)
    heads = problem.heads_kv * math.ceil(problem.rows / tile.block_rows)
    units = _schedule(lengths, cu, problem.max_keys, problem.q_tile, window, causal, tile.target_units, heads,
                      tile.min_chunk, tile.block_n)
    assert len(units) <= tile.plan(problem, H200).launches[0].grid[0]
    seen = {}
    for b, key_begin, key_end, query0, tile_nq, _, _ in units:
        for i in range(query0, query0 + tile_nq):
            seen.setdefault((b, i), []).append(range(key_begin, max(key_begin, key_end)))  # as n_tiles >= 0
    for b, (n_q, length) in enumerate(zip(queries, lengths)):
        keys = np.arange(length)
        for i in range(n_q):
            p = i + length - n_q
            visible = (keys <= p) if causal else (keys <= p + right) if right >= 0 else np.ones(length, dtype=bool)
            if left >= 0:
                visible &= keys >= p - left
            counts = np.zeros(length, dtype=int)
            for keys_range in seen[(b, i)]:
                counts[keys_range.start:keys_range.stop] += 1
            assert (counts[visible] == 1).all(), (b, i)


def test_partial_rows_meet_in_the_merge():
    """The rows mma.cu writes (out directly, or the partials of its unit) and the partials
    merge.cu reads for an output row (token, query head) agree: every packed output row is
    written once or merged from all its tile's units."""
    queries, lengths = [40, 0, 3, 1, 17], [3000, 50, 9000, 700, 9]
    cu = np.concatenate([[0], np.cumsum(queries)])
    tq, heads_kv, group = int(cu[-1]), 2, 4
    problem = _mixed_problem(tq, len(queries), heads_kv * group, heads_kv, 1024)
    tile = mma_tile(128, row_warps_for(problem.rows), H200)
    row_blocks = math.ceil(problem.rows / tile.block_rows)
    units = _schedule(lengths, cu, problem.max_keys, problem.q_tile, (-1, -1), True, tile.target_units,
                      heads_kv * row_blocks, tile.min_chunk, tile.block_n)
    q_tile, heads_q = problem.q_tile, heads_kv * group
    direct, partials = {}, {}
    for index, (b, _, _, query0, tile_nq, first, count) in enumerate(units):
        for head in range(heads_kv):
            for row in range(group * tile_nq):  # the rows of every row block, packed
                hq, i = head * group + row // tile_nq, query0 + row % tile_nq
                if count == 1:  # queries.out_row, packed
                    out_row = (int(cu[b]) + i) * heads_q + hq
                    direct[out_row] = direct.get(out_row, 0) + 1
                else:
                    partials[(index * heads_kv + head) * group * q_tile + row] = (b, hq, i)
    assert direct and partials  # both kinds of sequence
    for t in range(tq):
        b = int(np.searchsorted(cu, t, side="right") - 1)  # find_sequence
        for hq in range(heads_q):
            out_row, i = t * heads_q + hq, t - int(cu[b])
            first, count = next((u[5], u[6]) for u in units if u[0] == b)
            if count == 1:
                assert direct.get(out_row) == 1
                continue
            assert out_row not in direct
            tile_index = i // q_tile
            tile_nq = min(q_tile, queries[b] - tile_index * q_tile)
            in_unit = (hq // group) * group * q_tile + (hq % group) * tile_nq + i % q_tile
            for u in range(count):
                assert partials[(first + tile_index * count + u) * heads_q * q_tile + in_unit] == (b, hq, i)


def test_decreasing_prefix_sums_outgrow_the_grid():
    """Why find_unit makes no unit where cu_seqlens_q decreases: the sequences' clamped rows
    overlap and their units outnumber the grid the host sizes from Tq and B, so that some
    sequence's unit range (unit_meta) would be written by no block and read by the merge."""
    batch = len(DECREASING_LENGTHS)
    problem = _mixed_problem(batch, batch, 8, 2, 1024, head_dim=64)
    tile = mma_tile(64, row_warps_for(problem.rows), H200)
    heads = problem.heads_kv * math.ceil(problem.rows / tile.block_rows)
    units = _schedule(DECREASING_LENGTHS, decreasing_prefix_sums(batch, batch), problem.max_keys, problem.q_tile,
                      (-1, -1), True, tile.target_units, heads, tile.min_chunk, tile.block_n)
    forward, _ = tile.plan(problem, H200).launches  # and the merge
    assert max(first for *_, first, _ in units) >= forward.grid[0]


# --- GPU -------------------------------------------------------------------------------------


def _mixed_step(rng, prefill, decodes, page_size, heads_q, heads_kv, d, dtype, layout, extra_empty=True):
    """A serving step in a shuffled order: ``prefill`` (queries, keys) chunks, ``decodes`` decodes
    of 1 to 4 queries over log-uniform caches of 100 to 100K keys, and (``extra_empty``) a
    sequence without queries and one without keys."""
    queries = [n for n, _ in prefill] + [int(n) for n in rng.integers(1, 5, decodes)]
    lengths = [n for _, n in prefill] + [int(n) for n in np.exp(rng.uniform(np.log(100), np.log(100_000), decodes))]
    if extra_empty:
        queries, lengths = queries + [0, 2], lengths + [700, 0]
    order = rng.permutation(len(queries))
    return make_step(rng, [queries[i] for i in order], [lengths[i] for i in order], page_size, heads_q, heads_kv, d, d,
                     dtype, layout=layout)


@pytest.mark.parametrize("page_size", [1, 16, 256])
@pytest.mark.parametrize("layout", ["phsd", "pshd"])
def test_mixed_step_matches_oracle(cp, rng, page_size, layout):
    """3 prefill chunks (300 queries over a 20K cache, fresh 1000, 2000 over 2600) and 60 decodes
    of 1 to 4 queries over 100 to 100K keys, one launch (plus the merge)."""
    q, k, v, table, lens, cu = _mixed_step(rng, [(300, 20_000), (1000, 1000), (2000, 2600)], 60, page_size, 8, 2, 128,
                                           BF16, layout)
    assert compare(cp, q, k, v, table, lens, cu_seqlens_q=cu) == []


# (dtype, D, Hq, Hkv, page size, extras): GQA 1 / 4 / 8, head dims, masks, softcap, sinks, shared pages
FEATURE_CASES = [
    (F16, 64, 4, 4, 16, {}),  # G 1
    (BF16, 128, 16, 4, 16, {"causal": False}),  # G 4
    (F16, 256, 16, 2, 8, {"window": (200, None)}),  # G 8
    (BF16, 128, 8, 1, 16, {"window": (100, 3), "causal": False}),
    (F16, 64, 8, 2, 32, {"softcap": 20.0}),
    (BF16, 128, 8, 2, 16, {"sinks": np.float32([0.5, -1.0, 2.0, 0.0])}),
    (F16, 128, 8, 2, 16, {"shared_prefix": 6}),
    (BF16, 59, 4, 2, 16, {}),  # odd head dim: element loads
    (F32, 40, 6, 3, 5, {"window": (50, None)}),  # simt
    (F64, 72, 4, 1, 16, {"softcap": 4.0, "sinks": np.float32([1.0])}),
]


@pytest.mark.parametrize("case", FEATURE_CASES, ids=lambda c: f"{c[0].name}-D{c[1]}-G{c[2] // c[3]}-S{c[4]}")
def test_mixed_features_match_oracle(cp, rng, case):
    dtype, d, heads_q, heads_kv, page_size, extras = case
    extras = dict(extras)
    prefix = extras.pop("shared_prefix", 0)
    queries = [150, 1, 0, 3, 70, 2, 1, 4]
    lengths = [1200, 3000, 300, 5000, 70, 3, 0, 600]
    q, k, v, table, lens, cu = make_step(rng, queries, lengths, page_size, heads_q, heads_kv, d, d, dtype,
                                         layout="pshd", shared_prefix=prefix)
    assert compare(cp, q, k, v, table, lens, cu_seqlens_q=cu, **extras) == []


@pytest.mark.parametrize("bucket,warps", [(64, 1), (128, 2), (256, 4), (128, 4)])
def test_mixed_forced_mma_tiles(cp, rng, bucket, warps):
    """Every tile width on one step (row blocks beyond the tile's rows, wider head dims)."""
    q, k, v, table, lens, cu = make_step(rng, [90, 1, 3, 0, 20], [3000, 700, 5000, 10, 20], 16, 8, 2, 64, 64, F16)
    assert compare(cp, q, k, v, table, lens, cu_seqlens_q=cu, config=mma_tile(bucket, warps, H200)) == []


def test_mixed_forced_simt(cp, rng):
    q, k, v, table, lens, cu = make_step(rng, [30, 1, 0, 2], [900, 300, 5, 0], 8, 4, 2, 32, 32, F32)
    assert compare(cp, q, k, v, table, lens, cu_seqlens_q=cu, config=PagedSimtRows(warps=2)) == []
    with pytest.raises(ValueError, match="argument 'config'"):
        attention_paged(*(cp.asarray(x) for x in (q, k, v, table, lens)), cu_seqlens_q=cp.asarray(cu),
                        config=mma_tile(64, 1, H200))


def test_mixed_step_graph_capture(cp, rng):
    """kv_append and attention_paged, packed, captured into a CUDA graph (nothing read back to the
    host) and replayed on other lengths and query splits written into the same buffers."""
    heads_q, heads_kv, d, page_size = 8, 2, 64, 16
    queries, lengths = [40, 1, 3, 0], [2000, 600, 7000, 50]  # 44 queries; a second split below
    k, v, table, lens = make_pool(rng, lengths, page_size, heads_kv, d, d, BF16, layout="pshd", spare_tokens=64)
    cu = np.concatenate([[0], np.cumsum(queries)]).astype(np.int32)
    tq = int(cu[-1])
    k_new, v_new, q = (rng.standard_normal((tq, h, d)).astype(BF16) for h in (heads_kv, heads_kv, heads_q))
    dev = {name: to_device(cp, x) for name, x in (("k", k), ("v", v))}
    dev.update({name: cp.asarray(x) for name, x in (("table", table), ("lens", lens), ("new_lens", lens + np.diff(cu)),
                                                     ("cu", cu), ("k_new", k_new), ("v_new", v_new), ("q", q))})
    out = poisoned(cp, (tq, heads_q, d), BF16)

    def step():
        kv_append(dev["k"], dev["v"], dev["k_new"], dev["v_new"], dev["table"], dev["lens"], cu_seqlens_new=dev["cu"])
        return attention_paged(dev["q"], dev["k"], dev["v"], dev["table"], dev["new_lens"], cu_seqlens_q=dev["cu"],
                               out=out, return_lse=True)

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        step()  # warm: compile, the stream's memory pool
        stream.synchronize()
        stream.begin_capture()
        _, lse = step()
        graph = stream.end_capture()
        # other values, same shapes: written through set (no allocation while the graph holds its buffers)
        queries, lengths = [2, 30, 0, 12], [1500, 620, 6000, 64]  # within each sequence's pages
        cu = np.concatenate([[0], np.cumsum(queries)]).astype(np.int32)
        k_host, v_host = (cp.asnumpy(x).copy() for x in (dev["k"], dev["v"]))
        for name, x in (("lens", np.int32(lengths)), ("new_lens", np.int32(lengths) + np.diff(cu)), ("cu", cu)):
            dev[name].set(x)
        out.view(cp.uint8).fill(0xFF)
        graph.launch()
        stream.synchronize()
    kv_append(k_host, v_host, k_new, v_new, table, np.int32(lengths), cu_seqlens_new=cu)
    np.testing.assert_array_equal(cp.asnumpy(dev["k"]).astype(np.float32), k_host.astype(np.float32))
    ref, ref_lse = reference.attention_paged(q, k_host, v_host, table, np.int32(lengths) + np.diff(cu),
                                             cu_seqlens_q=cu, return_lse=True)
    got = cp.asnumpy(out).astype(np.float64)
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() <= TOLERANCE[BF16] * max(1.0, np.abs(ref).max())
    assert np.abs(cp.asnumpy(lse) - ref_lse).max() <= 10 * TOLERANCE[BF16]


@pytest.mark.parametrize("dtype", [BF16, F32])
@pytest.mark.parametrize("layout", ["phsd", "pshd"])
def test_packed_kv_append_matches_numpy(cp, rng, dtype, layout):
    lengths, new = [300, 0, 47, 1000], [5, 0, 64, 1]
    k, v, table, lens = make_pool(rng, lengths, 16, 2, 64, 48, dtype, layout=layout, spare_tokens=64)
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    k_new = rng.standard_normal((cu[-1], 2, 64)).astype(dtype)
    v_new = rng.standard_normal((cu[-1], 2, 48)).astype(dtype)
    k_dev, v_dev = to_device(cp, k), to_device(cp, v)
    v_new_dev = cp.asarray(np.ascontiguousarray(v_new.swapaxes(0, 1))).swapaxes(0, 1)  # strided rows
    kv_append(k_dev, v_dev, cp.asarray(k_new), v_new_dev, cp.asarray(table), cp.asarray(lens),
              cu_seqlens_new=cp.asarray(cu))
    kv_append(k, v, k_new, v_new, table, lens, cu_seqlens_new=cu)
    np.testing.assert_array_equal(cp.asnumpy(k_dev), k)
    np.testing.assert_array_equal(cp.asnumpy(v_dev), v)


def test_mixed_bitwise_reproducible(cp, rng):
    q, k, v, table, lens, cu = make_step(rng, [200, 1, 2, 1], [9000, 300, 4000, 20000], 16, 8, 2, 128, 128, BF16)
    args = [cp.asarray(x) for x in (q, k, v, table, lens)]
    first = attention_paged(*args, cu_seqlens_q=cp.asarray(cu), return_lse=True)
    second = attention_paged(*args, cu_seqlens_q=cp.asarray(cu), return_lse=True)
    assert all(bool((a.view(cp.uint8) == b.view(cp.uint8)).all()) for a, b in zip(first, second))


def test_debug_checks_prefix_sums(cp, rng, monkeypatch):
    q, k, v, table, lens, cu = make_step(rng, [3, 1], [40, 9], 16, 2, 1, 64, 64, F16)
    monkeypatch.setenv("CUFUSE_DEBUG", "1")
    with pytest.raises(ValueError, match="attention_paged: argument 'cu_seqlens_q'"):
        attention_paged(*(cp.asarray(x) for x in (q, k, v, table, lens)), cu_seqlens_q=cp.asarray(np.int32([0, 3, 3])))


def test_decreasing_prefix_sums_stay_in_bounds(cp, rng):
    """cu_seqlens_q outside the contract (decreasing) leaves the rows unspecified but faults
    nowhere, with stale unit ranges in the memory pool too; the next valid call is exact."""
    q, k, v, table, lens, cu = run_decreasing(cp, rng)
    assert not compare(cp, q, k, v, table, lens, cu_seqlens_q=cu)
