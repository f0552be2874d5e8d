"""softmax's row kernels on the GPU against the float64 oracle: every rung of the default
ladder, every dtype on each kernel, the split kernel's waves, streaming and scratch reuse,
the stashed rows and their clusters, the row clusters, forced configs; NaN patterns, poisoned
outputs. Default configs are precompiled by ``python -m cufuse precompile``; the forced ones
by the ``forced_kernels`` fixture, in parallel."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cufuse
from cufuse.ops.softmax import select
from cufuse.ops.softmax.problem import vector_size
from cufuse.ops.softmax.rows import ClusterConfig, StashedRowsConfig
from cufuse.ops.softmax.split import SplitConfig

from ..conftest import poisoned
from .oracle import (BF16, check, clusters, device, lengths_past_each_threshold, one_length_per_kernel, precompile_once,
                     random, rows_for, rows_for_online_merge, rows_with_non_finite)

# Forced configs: sweep candidates (experiments/softmax/sweep_softmax.py) and the defaults'
# kernels in geometries the default grid does not reach (several rows per block, streamed tiles).
SPLIT_STREAMED = SplitConfig(threads=256, vecs=4, blocks_per_sm=2, blocks_per_row=2, grid=4, chunk=25000, smem_tiles=2,
                             streams=True)  # 7 tiles: 1 in registers, 2 in shared memory, 4 streamed
SPLIT_STREAMED_PIPELINED = dataclasses.replace(SPLIT_STREAMED, pipelined=True)
# The float16 default split kernel with 3 blocks a row and 2 rows a wave: each block prefetches
# its next row's 2 shared-memory tiles during the output pass, 4 waves.
SPLIT_PIPELINED_WAVES_F16 = SplitConfig(threads=256, vecs=4, blocks_per_sm=2, blocks_per_row=3, grid=6, chunk=24576,
                                        smem_tiles=2, streams=False, pipelined=True)
STASHED_F16 = StashedRowsConfig(threads=448, vecs=4, stash_tiles=4, blocks_per_sm=2)  # the widest two-an-SM 2-byte rung: 140 KB rows
STASHED_F32 = StashedRowsConfig(threads=256, vecs=8, stash_tiles=3, blocks_per_sm=2)  # the float32 rungs
STASHED_F32_WIDE = StashedRowsConfig(threads=512, vecs=4, stash_tiles=7, blocks_per_sm=1)
STASHED_CLUSTER_GEOMETRY = dict(threads=256, vecs=8, stash_tiles=3, blocks_per_sm=2)


def _split_pipelined(length, rows, dtype):
    return dataclasses.replace(select.choose_rows(length, rows, dtype, device()), pipelined=True)


def _forced():
    forced = [(SPLIT_STREAMED_PIPELINED, np.float32), (_split_pipelined(131073, 7, np.float16), np.float16),
              (ClusterConfig(threads=256, vecs=8, cluster=4, rows_per_cluster=3), np.float32)]
    forced += [(STASHED_F16, np.float16), (STASHED_F16, BF16), (STASHED_F32, np.float32), (STASHED_F32_WIDE, np.float32)]
    forced += [(StashedRowsConfig(**STASHED_CLUSTER_GEOMETRY, cluster=c), d)
               for c in (2, 4, 8) for d in (np.float16, BF16, np.float32)]
    return forced


@pytest.fixture
def forced_kernels(cp):
    precompile_once("rows", _forced)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("log", [False, True])
def test_every_ladder_branch(cp, rng, dtype, log):
    """Lengths 1, at and just past every capacity of the ladder (the last one: the stashed or
    split kernel), odd row counts, poisoned out; lengths the span rows take by default also on
    the ladder's rung (strided and padded rows keep it)."""
    for length in lengths_past_each_threshold(dtype):
        x = random(cp, rng, (rows_for(length), length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
        if length <= select.span_ladder(dtype)[-1].capacity_elements:
            misalignment = vector_size(dtype) - 1 if x.shape[0] > 1 else 0
            rung = select.choose_rows(length, x.shape[0], dtype, device(), misalignment)
            check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=rung)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_dtypes_on_each_kernel(cp, rng, dtype, log):
    for length in one_length_per_kernel(dtype):
        x = random(cp, rng, (rows_for(length, 9), length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


@pytest.mark.parametrize("log", [False, True])
def test_many_short_rows_and_scipy(cp, rng, log):
    x = random(cp, rng, (1001, 32), np.float16)
    check(cp, x, -1, log, scipy_too=True)
    x = random(cp, rng, (257, 13), np.float32)
    check(cp, x, 1, log, scipy_too=True)


@pytest.mark.parametrize("log", [False, True])
def test_split_waves_streaming_and_scratch_reuse(cp, rng, log):
    # 40 rows of 131073: 7 blocks per row, 37 rows per wave on the H200 -> 2 waves.
    x = random(cp, rng, (40, 131073), np.float32)
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    # Forced: 25000-element chunks, 4 of 7 tiles streamed and read twice. Back-to-back calls on
    # two streams: each relies on the previous one of its stream having left the reused
    # arrival counters at zero.
    stream = cp.cuda.Stream(non_blocking=True)
    for rows in (2, 5, 1):
        x = random(cp, rng, (rows, 50000), np.float32)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_STREAMED)
        with stream:
            check(cp, x, -1, log, config=SPLIT_STREAMED)


def test_benchmark_long_rows_float16(cp, rng):
    """4 x 4194304 float16 (split kernel, one wave), checked on the GPU in float64 (the
    host oracle of 16M elements would be slow); the float32 sum must not overflow."""
    x = random(cp, rng, (4, 4194304), np.float16)
    out = poisoned(cp, x.shape, x.dtype)
    cufuse.softmax(x, axis=-1, out=out)
    a = x.astype(cp.float64)
    e = cp.exp(a - a.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    assert float(cp.abs(out.astype(cp.float64) - expected).max()) <= 2e-3 * float(expected.max())


@pytest.mark.parametrize("log", [False, True])
def test_cluster_rows_per_cluster(cp, rng, forced_kernels, log):
    """Persistent clusters (a forced config on the cluster kernel, float32's former rung):
    7 rows on 3 clusters (3, 2 and 2 rows each, the partials' parity buffers reused),
    non-finite rows, a ragged last block."""
    if not clusters(4):
        pytest.skip("thread-block clusters need sm_90")
    config = ClusterConfig(threads=256, vecs=8, cluster=4, rows_per_cluster=3)
    length = config.capacity_vectors * vector_size(np.float32) - 5
    x = cp.asarray(rows_with_non_finite(rng, length, np.float32))
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
    # 61 rows on 2 clusters: each block's two statistics inboxes reused 15 times, rows of
    # different scales so that a pair read from the wrong round shows
    config = ClusterConfig(threads=256, vecs=8, cluster=4, rows_per_cluster=31)
    x = random(cp, rng, (61, 4000), np.float32) * cp.arange(1, 62, dtype=cp.float32)[:, None]
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_nan_pattern(cp, rng, dtype, log):
    """Rows with NaN, +inf, all -inf, some -inf entries, and +inf with -inf, on the sub-warp,
    warp, block, stashed / cluster and split paths (which merge partials across threads and
    blocks) and down columns."""
    for length in one_length_per_kernel(dtype)[::-1]:
        x = cp.asarray(rows_with_non_finite(rng, length, dtype))
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    for length in (5, 3000):  # the column kernel, without and with a cluster
        x = cp.asarray(rows_with_non_finite(rng, length, dtype))
        check(cp, cp.ascontiguousarray(x.T), 0, log, out=poisoned(cp, x.T.shape, x.dtype))


@pytest.mark.parametrize("log", [False, True])
def test_split_pipelined(cp, rng, forced_kernels, log):
    """The pipelined split kernel: the default geometry (7 shared-memory tiles, one cp.async
    group each) over several waves, float16 and float32, and the streamed forced config;
    non-finite rows; the next row's tiles requested in the output pass (several rows a
    block), also where consecutive rows of a block alternate between aligned and not."""
    x = random(cp, rng, (40, 131073), np.float32)
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=_split_pipelined(131073, 40, np.float32))
    x = cp.asarray(rows_with_non_finite(rng, 50000, np.float32))
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_STREAMED_PIPELINED)
    # Row stride 50001: row r is 16-byte aligned iff r % 4 == 0 (block 0 serves rows 0, 2, 4, 6).
    x = random(cp, rng, (7, 50001), np.float32)[:, :50000]
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_STREAMED_PIPELINED)
    x = cp.asarray(rows_with_non_finite(rng, 70001, np.float16))
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_PIPELINED_WAVES_F16)
    x = cp.asarray(rows_with_non_finite(rng, 131073, np.float16))
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=_split_pipelined(131073, 7, np.float16))


@pytest.mark.parametrize("log", [False, True])
def test_stashed_rows(cp, rng, forced_kernels, log):
    """softmax_rows_stashed (one block a row: a register tile and shared-memory tiles): full
    rows, rows ending inside a shared-memory tile (the register tile empty), a row of one
    element, non-finite rows, misaligned and strided rows (the synchronous stash path),
    float16, bfloat16 and float32; out poisoned."""
    for config, dtype, length in ((STASHED_F16, np.float16, 65536), (STASHED_F16, BF16, 40003),
                                  (STASHED_F32, np.float32, 32768), (STASHED_F32_WIDE, np.float32, 65531)):
        x = random(cp, rng, (9, length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
        x = cp.asarray(rows_with_non_finite(rng, length, dtype))
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
    for length in (1, 8, 20001):
        x = random(cp, rng, (5, length), np.float16)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=STASHED_F16)
    base = random(cp, rng, (11, 30002), np.float32)
    for view in (base[:, 1:30001], base[:, ::2]):  # misaligned; strided
        check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=STASHED_F32)


# Row lengths (elements) on both sides of the block rows' and stashed rows' widths: rows whose
# vectors are not a multiple of any rung (the measured grid and its neighbours).
SIZED_LENGTHS = (2057, 2100, 3001, 4097, 5003, 7777, 10000, 16500, 20011, 25000, 33331, 40000, 50001, 65000, 100003, 131072)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_rows_sized_to_the_row(cp, rng, dtype, log):
    """Block rows and stashed rows whose width the selection sizes to the row (select.block_rows,
    stashed_rows): every length of SIZED_LENGTHS they take by default, with rows that start
    off the vector (x[:, 1:]: the aligned origin, masked head and tail) and strided rows
    (x[:, ::2]: scalar slots) on the same config, out poisoned; the kernel each takes is
    the one the rule names."""
    vs, dev = vector_size(dtype), device()
    for length in SIZED_LENGTHS:
        vectors = -(-length // vs)
        config = select.choose_rows(length, 5, dtype, dev)
        if config == select.stashed_rows(vectors, dtype, dev):
            pass
        elif vectors <= 4096:
            assert config == select.with_exp_once(select.block_rows(vectors, dtype), dtype)
        else:
            continue
        x = random(cp, rng, (rows_for(length, 5), length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
        base = random(cp, rng, (3, 2 * length + 2), dtype)
        for view in (base[:, 1:length + 1], base[:, ::2][:, :length]):
            check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=config)


@pytest.mark.parametrize("log", [False, True])
def test_stashed_cluster_rows(cp, rng, forced_kernels, log):
    """softmax_rows_stashed_cluster (a cluster of stashed blocks a row, statistics pushed
    through distributed shared memory): the default clusters of 8 and the sweep's 2 and 4; full rows, ragged and prime lengths (the last block's chunk partly or
    wholly empty), non-finite rows (in different blocks' chunks), misaligned and strided rows
    (the synchronous stash path), float16, bfloat16 and float32; out poisoned."""
    if not clusters(8):
        pytest.skip("needs thread-block clusters (sm_90)")
    for cluster, dtype, length in ((2, np.float32, 65536), (4, np.float16, 262144), (4, BF16, 200003),
                                   (8, np.float32, 199999), (8, np.float16, 1 << 19), (8, np.float32, 40000)):
        config = StashedRowsConfig(**STASHED_CLUSTER_GEOMETRY, cluster=cluster)
        x = random(cp, rng, (5, length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
        x = cp.asarray(rows_with_non_finite(rng, length, dtype))
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
    config = StashedRowsConfig(**STASHED_CLUSTER_GEOMETRY, cluster=4)
    base = random(cp, rng, (6, 100002), np.float32)
    for view in (base[:, 1:100001], base[:, ::2]):  # misaligned; strided
        check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=config)
    x = random(cp, rng, (3, 20), np.float16)  # every block but the first holds nothing
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


@pytest.mark.parametrize("log", [False, True])
def test_stashed_clusters_by_default(cp, rng, log):
    """float32 rows of 3/4 to all of 262144 elements run the stashed clusters of 8 by default."""
    if not clusters(8):
        pytest.skip("needs thread-block clusters (sm_90)")
    for length in (262144, 196613):
        expected = StashedRowsConfig(**STASHED_CLUSTER_GEOMETRY, cluster=8)
        assert select.choose_rows(length, 9, np.float32, device()) == expected
        x = random(cp, rng, (9, length), np.float32)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


def test_forced_row_config_too_short_is_refused(cp, rng):
    x = random(cp, rng, (3, 8960 * 8 + 1), np.float16)
    with pytest.raises(ValueError, match="holds rows of up to 8960 16-byte vectors"):
        cufuse.softmax(x, axis=-1, config=STASHED_F16)


@pytest.mark.parametrize("log", [False, True])
def test_split_online_merge_and_full_tiles(cp, rng, forced_kernels, log):
    """The split kernel's per-thread (max, sum) over its tiles, merged once a row: streamed,
    shared-memory and register tiles (float32 25000-element chunks), and float16 chunks of
    exactly 3 full tiles (the full-tile paths) with and without a ragged end."""
    for config, dtype, lengths in [
        (SPLIT_STREAMED_PIPELINED, np.float32, (50000, 49999)),
        (SPLIT_STREAMED, np.float32, (50000,)),
        (SPLIT_PIPELINED_WAVES_F16, np.float16, (3 * 24576, 3 * 24576 - 5, 2 * 24576 + 8)),
    ]:
        for length in lengths:
            x = cp.asarray(rows_for_online_merge(rng, length, dtype))
            check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


# Narrow and medium rows whose length is not a whole number of 16-byte vectors: consecutive
# rows start off a vector boundary, and the register and stashed rungs align each row's origin
# (a masked head and tail). Lengths at and around each rung's capacity less one vector.
MISALIGNED_LENGTHS = (1, 3, 7, 9, 13, 100, 127, 255, 257, 1000, 3001, 4095, 32767, 50001)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_misaligned_rows(cp, rng, dtype, log):
    """Contiguous rows of lengths that are not multiples of the vector (every row but some
    starts misaligned), several rows a warp and one block a row, the default rungs; out
    poisoned; non-finite rows in the head and tail slots."""
    for length in MISALIGNED_LENGTHS:
        x = random(cp, rng, (rows_for(length, 67), length), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    for length in (5, 100, 3001):
        x = cp.asarray(rows_with_non_finite(rng, length, dtype))
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


def _check_inside_poisoned_buffer(cp, rng, rows, length, dtype, log, config=None):
    """x and out one element past a vector boundary inside poisoned buffers: nothing is
    written outside out's rows."""
    n, pad = rows * length, vector_size(dtype) * 2
    xb = random(cp, rng, (n + pad,), dtype)
    ob = poisoned(cp, (n + pad,), dtype)
    check(cp, xb[1 : 1 + n].reshape(rows, length), -1, log, out=ob[1 : 1 + n].reshape(rows, length), config=config)
    assert bool(cp.isnan(ob[:1]).all()) and bool(cp.isnan(ob[1 + n :]).all())


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_misaligned_rows_keep_their_neighbours(cp, rng, dtype, log):
    """The masked head and tail stores write nothing outside the rows; rows whose input and
    output are misaligned differently (the scalar path); rows that fill their rung exactly
    from a misaligned start (the origin kept, the scalar path)."""
    vs = vector_size(dtype)
    for rows, length in ((301, 100), (37, 13), (9, 3001), (5, 33 * vs - 3)):
        _check_inside_poisoned_buffer(cp, rng, rows, length, dtype, log)
        xb = random(cp, rng, (rows * length + 2,), dtype)
        check(cp, xb[2:].reshape(rows, length), -1, log, out=poisoned(cp, (rows, length), dtype))
    for config in (select.rows_ladder(dtype, device())[3], select.rows_ladder(dtype, device())[-1]):
        _check_inside_poisoned_buffer(cp, rng, 7, config.capacity_vectors * vs, dtype, log, config=config)


# Span rows: lengths on both sides of every rung's capacity, whole vectors included (forced).
SPAN_LENGTHS = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_span_rows(cp, rng, dtype, log):
    """Every span rung at lengths it holds, row counts that leave the last tile part full and
    that take several tiles; x and out one element past a vector boundary inside poisoned
    buffers (nothing written outside out), x and out misaligned differently (the gathered
    stores), non-finite rows; a small tile so that a few rows make several blocks."""
    for length in SPAN_LENGTHS:
        for config in [c for c in select.span_ladder(dtype) if c.capacity_elements >= length][:2]:
            rows = 3 * config.tile_rows(length, 10 ** 9, dtype, device()) + 5
            x = random(cp, rng, (rows, length), dtype)
            check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
            _check_inside_poisoned_buffer(cp, rng, rows, length, dtype, log, config=config)
            xb = random(cp, rng, (rows * length + 3,), dtype)
            check(cp, xb[3:].reshape(rows, length), -1, log, out=poisoned(cp, (rows, length), dtype), config=config)
    small = dataclasses.replace(next(c for c in select.span_ladder(dtype) if c.capacity_elements >= 128), tile_bytes=64)
    for length in (5, 100, 127):
        x = cp.asarray(np.concatenate([rows_with_non_finite(rng, length, dtype)] * 3))
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=small)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


def test_span_rows_refuse_other_layouts(cp, rng):
    config = select.span_ladder(np.float32)[-1]
    x = random(cp, rng, (64, 300), np.float32)
    with pytest.raises(ValueError, match=r"softmax: argument 'config' .* holds rows of up to 256 elements, got a row of 300"):
        cufuse.softmax(x, axis=-1, config=config)
    with pytest.raises(ValueError, match=r"softmax: argument 'config' .* takes rows one after another in memory"):
        cufuse.softmax(x[:, :100], axis=-1, config=config)
    with pytest.raises(ValueError, match=r"takes rows one after another"):
        cufuse.softmax(x[:, :99], axis=0, config=config)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_split_rows_from_the_vector_boundary_below(cp, rng, forced_kernels, dtype, log):
    """The split kernel holds misaligned rows from the boundary below: odd lengths (rows start
    at every offset), several rows a wave with the pipelined next-row refill (float16,
    alternating alignment), x and out misaligned differently (the scalar slots), nothing
    written outside out; rows whose chunks cannot hold the extra elements keep their origin."""
    length = 140001
    x = random(cp, rng, (5, length), dtype)
    check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    _check_inside_poisoned_buffer(cp, rng, 3, length, dtype, log)
    xb = random(cp, rng, (3 * length + 2,), dtype)
    check(cp, xb[2:].reshape(3, length), -1, log, out=poisoned(cp, (3, length), dtype))
    if np.dtype(dtype) == np.float16:
        x = random(cp, rng, (11, 3 * 24576 - 7), dtype)
        check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_PIPELINED_WAVES_F16)
        tight = dataclasses.replace(SPLIT_PIPELINED_WAVES_F16, chunk=24576)  # rows of exactly 3 chunks: origin kept
        x = random(cp, rng, (7, 3 * 24576), dtype)
        _check_inside_poisoned_buffer(cp, rng, 7, 3 * 24576, dtype, log, config=tight)
