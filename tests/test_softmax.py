"""softmax / log_softmax: config selection and layout collapse (CPU), kernels vs the float64
oracle and SciPy (GPU)."""
from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest
import scipy.special

import cufuse
from cufuse import reference
from cufuse._configs import A100, H200
from cufuse._configs import softmax as configs
from cufuse.softmax import _collapse

from .conftest import allocations, poisoned

BF16 = np.dtype(ml_dtypes.bfloat16)
FN = {False: cufuse.softmax, True: cufuse.log_softmax}
ORACLE = {False: reference.softmax, True: reference.log_softmax}
SCIPY = {False: scipy.special.softmax, True: scipy.special.log_softmax}



def ladder(dtype):
    """The H200 capacity ladder of ``dtype`` in 16-byte vectors: each value is the last length
    a config holds."""
    configs_in_order = configs._rows_configs(dtype) + configs._cluster_configs(dtype)
    return [c.capacity_vectors for c in configs_in_order]


# ---------------------------------------------------------------- CPU: selection rules


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_ladder_picks_the_smallest_config_that_holds_the_row(dtype):
    vs = configs.vector_size(dtype)
    previous = 0
    for capacity in ladder(dtype):
        at = configs.choose_rows(capacity * vs, 1000, dtype, H200)
        past_previous = configs.choose_rows(previous * vs + 1, 1000, dtype, H200)
        assert at.capacity_vectors == capacity
        assert past_previous == at
        previous = capacity
    past = configs.choose_rows(ladder(dtype)[-1] * vs + 1, 4, dtype, H200)
    stashed = configs._stashed_configs(dtype, H200)
    assert past == stashed[0] if stashed else isinstance(past, (configs.ClusterConfig, configs.SplitConfig))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_stashed_rows_are_one_flag(dtype, monkeypatch):
    """Rows past the block ladder take the first stashed rung that holds them (float64 has
    none), then the cluster / split kernels; ``_STASHED_ROWS_DEFAULT = False`` restores the
    split kernel there."""
    vs = configs.vector_size(dtype)
    past_block = ladder(dtype)[-1] * vs + 1
    rungs = configs._stashed_configs(dtype, H200)
    if not rungs:
        assert not isinstance(configs.choose_rows(past_block, 1000, dtype, H200), configs.StashedRowsConfig)
        return
    assert configs.choose_rows(past_block, 1000, dtype, H200) == rungs[0]
    assert [r.capacity_vectors for r in rungs] == sorted({r.capacity_vectors for r in rungs})
    assert configs.choose_rows(rungs[-1].capacity_vectors * vs, 1000, dtype, H200) == rungs[-1]
    assert isinstance(configs.choose_rows(rungs[-1].capacity_vectors * vs + 1, 1000, dtype, H200), configs.SplitConfig)
    for rung in rungs:  # each fits its blocks an SM in the H200's shared memory
        assert rung.blocks_per_sm * (rung.smem_bytes + 2048) <= H200.smem_per_sm
    assert configs._stashed_configs(dtype, A100) == []  # 164 KB an SM: the split kernel stays
    specs = configs.instantiations(H200)
    assert all(c.spec(dtype, log) in specs for c in rungs for log in (False, True))
    monkeypatch.setattr(configs, "_STASHED_ROWS_DEFAULT", False)
    assert isinstance(configs.choose_rows(past_block, 1000, dtype, H200), configs.SplitConfig)


def test_row_share_is_whole_vectors_covering_the_row():
    """The share of a row each of several blocks holds (split kernel, clusters): whole 16-byte
    vectors, the shares together covering the row."""
    for length, parts, dtype in [(10, 3, np.float32), (65536, 16, np.float16), (200003, 8, np.float32), (7, 4, np.float64)]:
        share, vs = configs.row_share(length, parts, dtype), configs.vector_size(dtype)
        assert share % vs == 0 and share * parts >= length > share * parts - parts * vs
    assert configs.row_share(65536, 16, np.float16) == 4096 and configs.row_share(10, 3, np.float32) == 4
    assert configs.ClusterConfig(512, 4, 8).chunk(100003, np.float64) == configs.row_share(100003, 8, np.float64)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_stashed_clusters_choice(dtype, monkeypatch):
    """Rows past the one-block stashed rungs that fill at least 3/4 of a stashed cluster rung
    take it (float32 clusters of 8 on sm_90; 2-byte types, float64 and the A100 have none);
    shorter rows and longer ones keep the split kernel; ``_STASHED_CLUSTERS_DEFAULT = False``
    restores it everywhere. Every cluster the kernel is built for is an instantiation."""
    vs = configs.vector_size(dtype)
    rungs = configs._stashed_cluster_configs(dtype, H200)
    assert configs._stashed_cluster_configs(dtype, A100) == []
    specs = configs.instantiations(H200)
    if np.dtype(dtype).itemsize != 4:
        assert rungs == []
        return
    assert rungs == [configs.StashedRowsConfig(256, 8, 3, 2, 8)]
    rung = rungs[0]
    assert rung.capacity_vectors * vs == 262144 and rung.chunk(262144, dtype) == 32768
    assert rung.blocks_per_sm * (rung.smem_bytes + 2048) <= H200.smem_per_sm
    full, fill = rung.capacity_vectors * vs, rung.capacity_vectors * 3 // 4 * vs
    assert configs.choose_rows(full, 128, dtype, H200) == rung
    assert configs.choose_rows(fill, 128, dtype, H200) == rung
    assert isinstance(configs.choose_rows(fill - vs, 128, dtype, H200), configs.SplitConfig)
    assert isinstance(configs.choose_rows(full + 1, 128, dtype, H200), configs.SplitConfig)
    assert all(configs.StashedRowsConfig(256, 8, 3, 2, c).spec(dtype, log) in specs for c in (2, 4, 8, 16) for log in (False, True))
    monkeypatch.setattr(configs, "_STASHED_CLUSTERS_DEFAULT", False)
    assert isinstance(configs.choose_rows(full, 128, dtype, H200), configs.SplitConfig)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_ladder_is_increasing_and_groups_tile_the_block(dtype):
    assert ladder(dtype) == sorted(set(ladder(dtype)))
    rows = configs._rows_configs(dtype)
    assert [c.capacity_vectors for c in rows] == [c.capacity_vectors for c in configs._rows_configs(np.float32)]
    for config in rows:
        assert config.threads % config.group == 0 and config.group <= 32 or config.group == config.threads


def test_measured_winners_of_h200_run_9_and_softmax_v7():
    """Sub-warp rows (run 9, then the v7 sweep of session 3): float16 32 columns g4 v1, 128 g8 v2;
    float32 32 g8 v1, 128 g16 v2. Rows past the block rungs: the stashed rows (v9, session 5),
    then the split kernel for 2- and 4-byte types (v7: it beat the cluster rung), clusters for
    float64 only."""
    R, C = configs.RowsConfig, configs.ClusterConfig
    for dtype, cols, expected in [
        (np.float16, 32, R(256, 4, 1, True)),
        (np.float16, 128, R(256, 8, 2, True)),
        (np.float32, 32, R(256, 8, 1, True)),
        (np.float32, 128, R(256, 16, 2, True)),
        (np.float64, 16384, C(512, 4, 4)),
    ]:
        assert configs.choose_rows(cols, 1024, dtype, H200) == expected, (dtype, cols)
    S = configs.StashedRowsConfig
    for dtype, cols, expected in [(np.float16, 65536, S(512, 4, 3, 2)), (BF16, 65536, S(512, 4, 3, 2)),
                                  (np.float32, 32768, S(256, 8, 3, 2)), (np.float32, 65536, S(512, 4, 7, 1))]:
        assert configs.choose_rows(cols, 1024, dtype, H200) == expected, (dtype, cols)
    for dtype, cols in [(np.float16, 65537), (np.float32, 65537), (BF16, 262144)]:
        assert isinstance(configs.choose_rows(cols, 1024, dtype, H200), configs.SplitConfig), (dtype, cols)
    split = configs.choose_rows(131072, 1024, np.float32, H200)
    assert isinstance(split, configs.SplitConfig) and (split.blocks_per_row, split.smem_tiles, split.streams) == (4, 7, False)


def test_measured_winners_of_the_v5_sweep():
    """Block rows: plain softmax_rows (the v5 prefetching twins, defaults from v6, lost to the
    v7 rows on every shape); the pipelined split for float16 and float32 (H200 14:18 and
    14:56); axis=0 float32 in 16-byte column vectors (8 lanes, cluster 8), the scalar column
    kernel in clusters of 4."""
    R = configs.RowsConfig
    for dtype, cols, expected in [
        (np.float16, 4096, R(128, 128, 4, True)),
        (np.float16, 16384, R(256, 256, 8, False)),
        (np.float32, 16384, R(512, 512, 8, True)),
        (np.float32, 8192, R(256, 256, 8, True)),
        (np.float32, 4096, R(128, 128, 8, True)),
        (np.float32, 1024, R(128, 32, 8, True)),
        (np.float16, 1024, R(128, 32, 4, True)),
    ]:
        assert configs.choose_rows(cols, 4096, dtype, H200) == expected, (dtype, cols)
    for cols in (262144, 1 << 20, 1 << 22):
        assert configs.choose_rows(cols, 16, np.float16, H200).pipelined
        assert cols == 262144 or configs.choose_rows(cols, 16, np.float32, H200).pipelined  # 262144: stashed clusters (v10)
        assert not configs.choose_rows(cols, 16, np.float64, H200).pipelined
    assert configs.choose_cols(16384, 4096, np.float32, H200, False) == configs.ColsConfig(16, 8, 4)
    assert configs.choose_cols(16384, 4096, np.float16, H200, False) == configs.ColsConfig(16, 12, 4)
    assert configs.choose_cols(16384, 4096, np.float32, H200, False) == configs.ColsConfig(16, 8, 4)


def test_no_clusters_on_a100():
    block_max = configs._rows_configs(np.float32)[-1].capacity_vectors
    config = configs.choose_rows(block_max * 4 + 1, 8, np.float32, A100)
    assert isinstance(config, configs.SplitConfig)
    assert not any(s.name == "softmax_rows_cluster" for s in configs.instantiations(A100))


@pytest.mark.parametrize("length,rows", [(131073, 40), (1 << 20, 16), (1 << 22, 4), (1 << 26, 1), (3_000_017, 2), (16385 * 4, 1)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("dev", [H200, A100])
def test_split_covers_the_row_with_a_resident_grid(length, rows, dtype, dev):
    c = configs.choose_split(length, rows, dtype, dev)
    vs = configs.vector_size(dtype)
    assert c.chunk % vs == 0
    assert (c.blocks_per_row - 1) * c.chunk < length <= c.blocks_per_row * c.chunk
    assert c.grid % c.blocks_per_row == 0 and c.blocks_per_row <= c.grid <= dev.sm_count * c.blocks_per_sm
    assert c.grid // c.blocks_per_row <= rows
    tiles_per_block = -(-c.chunk // (c.threads * c.vecs * vs))
    assert 0 <= c.smem_tiles <= tiles_per_block - 1
    assert c.streams == (tiles_per_block - 1 > c.smem_tiles)
    # Two blocks per SM fit in shared memory, and a block's share fits the opt-in limit.
    assert c.blocks_per_sm * (c.smem_bytes + 2048) <= dev.smem_per_sm
    assert c.smem_bytes <= dev.max_smem_per_block


def test_benchmark_grid_takes_single_read_paths():
    """Every last-axis benchmark shape reads its rows once on the H200 (no streaming)."""
    for rows, cols in [(1048576, 32), (262144, 128), (65536, 1024), (16384, 4096), (4096, 16384),
                       (1024, 65536), (128, 262144), (16, 1048576), (4, 4194304)]:
        for dtype in (np.float16, np.float32):
            config = configs.choose_rows(cols, rows, dtype, H200)
            assert not getattr(config, "streams", False), (rows, cols, dtype)


def test_every_choice_is_an_instantiation():
    for dev in (H200, A100):
        specs = set(configs.instantiations(dev))
        for dtype in (np.float16, BF16, np.float32, np.float64):
            for length in [1, 7, 100, 1000, 5000, 70000, 500000, 1 << 22, 1 << 26]:
                for log in (False, True):
                    assert configs.choose_rows(length, 3, dtype, dev).spec(dtype, log) in specs
                    vs = configs.vector_size(dtype)
                    for vectorizable in {False, configs.cols_vectorizable(1, vs, 0, vs, dtype)}:
                        assert configs.choose_cols(length, 64, dtype, dev, vectorizable).spec(dtype, log) in specs


def test_long_columns_take_the_cluster_column_kernel():
    for dtype in (np.float16, np.float32, np.float64):
        assert configs.choose_cols(2048, 64, dtype, H200).cluster == 4
        assert configs.choose_cols(2047, 64, dtype, H200).cluster == 1
        assert configs.choose_cols(1 << 20, 64, dtype, A100).cluster == 1
        assert configs.choose_cols(16384, 4096, dtype, H200).spec(dtype, False).name == "softmax_cols_cluster"


def test_collapse():
    # C-contiguous (4, 5, 6): last axis, middle axis, leading axes, everything.
    assert _collapse((4, 5, 6), (30, 6, 1), {2}) == ((20, 6, 1), (6, 1, 0))
    assert _collapse((4, 5, 6), (30, 6, 1), {1}) == ((4, 5, 6), (30, 6, 1))
    assert _collapse((4, 5, 6), (30, 6, 1), {0, 1}) == ((1, 20, 6), (0, 6, 1))
    assert _collapse((4, 5, 6), (30, 6, 1), {0, 1, 2}) == ((1, 120, 1), (0, 1, 0))
    # Scattered axes, and a view whose leading axes do not collapse.
    assert _collapse((4, 5, 6), (30, 6, 1), {0, 2}) is None
    assert _collapse((4, 5, 6), (60, 18, 1), {2}) is None
    # Size-1 axes are ignored, a transposed matrix reduces along its unit stride.
    assert _collapse((4, 1, 6), (6, 6, 1), {0, 2}) == ((1, 24, 1), (0, 1, 0))
    assert _collapse((6, 4), (1, 6), {0}) == ((1, 6, 4), (0, 1, 6))
    assert _collapse((3, 1), (1, 1), {1}) == ((3, 1, 1), (1, 0, 0))
    assert _collapse((), (), set()) == ((1, 1, 1), (0, 0, 0))
    # Negative strides collapse like positive ones.
    assert _collapse((4, 5), (-5, -1), {1}) == ((4, 5, 1), (-5, -1, 0))


def test_exp_once_where_the_exps_fit():
    for dtype, vecs, expected in [(np.float16, 4, True), (np.float16, 8, False), (np.float32, 8, True), (np.float64, 8, True)]:
        config = configs.with_exp_once(configs.RowsConfig(128, 32, vecs), dtype)
        assert config.exp_once is expected
        assert config.spec(dtype, True).template_args[-1] is False  # log_softmax has no exp to keep


def test_every_rows_rung_is_a_default_and_clusters_only_for_float64():
    """The ladder picks each rows rung at its capacity (with exp_once where it fits), and after
    the block rungs clusters for float64 only (the stashed rows, then the split kernel, for 2-
    and 4-byte types)."""
    specs = set(configs.instantiations(H200))
    for dtype in (np.float16, BF16, np.float32, np.float64):
        vs = configs.vector_size(dtype)
        for rung in configs._rows_configs(dtype):
            chosen = configs.choose_rows(rung.capacity_vectors * vs, 8, dtype, H200)
            assert chosen == configs.with_exp_once(rung, dtype), (dtype, rung)
            assert chosen.spec(dtype, True) in specs
        after_blocks = configs.choose_rows(8192 * vs, 8, dtype, H200)
        expected = configs.ClusterConfig if np.dtype(dtype).itemsize == 8 else configs.StashedRowsConfig
        assert isinstance(after_blocks, expected), dtype
        after_stashed = configs.choose_rows(16384 * vs + 1, 8, dtype, H200)
        assert isinstance(after_stashed, configs.SplitConfig), dtype


def test_cols_vectorizable_and_the_vec_default(monkeypatch):
    f16, f32 = np.float16, np.float32
    monkeypatch.setattr(configs, "_COLS_SPLIT_DEFAULT", False)  # the kernels below the column split
    assert configs.cols_vectorizable(1, 4096, 0, 4096, f16)
    assert configs.cols_vectorizable(4, 64, 777 * 64, 64, f16)
    assert not configs.cols_vectorizable(1, 70, 0, 70, f32)  # inner not a multiple of 4
    assert not configs.cols_vectorizable(1, 64, 0, 130, f16)  # sl not a multiple of 8
    assert not configs.cols_vectorizable(3, 64, 102, 64, f32)  # so not a multiple of 4
    assert not configs.cols_vectorizable(1, 64, 0, 64, np.float64)
    assert isinstance(configs.choose_cols(30000, 4096, f16, H200, True), configs.ColsConfig)  # float16 lost; no strip fits
    chosen = configs.choose_cols(30000, 4096, f32, H200, True)
    assert isinstance(chosen, configs.ColsVecConfig) and chosen.cluster == 8
    assert configs.choose_cols(255, 64, f32, H200, True) == configs.ColsVecConfig(256, 8, 4, 1)  # below a strip tile, short: no cluster
    assert configs.choose_cols(16384, 4096, f32, A100, True).spec(f32, False).name == "softmax_cols_vec"
    assert isinstance(configs.choose_cols(16384, 4096, f32, H200, False), configs.ColsConfig)
    specs = set(configs.instantiations(H200))
    assert chosen.spec(f32, True) in specs


def test_cols_strip_holds_the_column_on_chip():
    """choose_cols_strip on the benchmark's 16384 x 4096 (H200): 2-byte types in 64-byte rows,
    float16 256 threads x 8 vectors three blocks an SM (longer columns and bfloat16: 512 x 4),
    clusters of 16 with 2 shared-memory tiles a block; float32 in 128-byte rows with the
    register tile and 3 shared-memory tiles. Then each threshold: shorter than a tile, the
    float32 switch to 64-byte rows, longer than the chip holds; A100 without clusters; never
    float64 (not vectorizable)."""
    strip = configs.ColsStripConfig
    assert configs.choose_cols_strip(16384, 4096, np.float16, H200) == strip(256, 4, 8, False, 3, 16, 2)
    assert configs.choose_cols_strip(16384, 4096, BF16, H200) == strip(512, 4, 4, False, 2, 16, 2)  # 256 x 8 spills
    assert configs.choose_cols_strip(16385, 4096, np.float16, H200) == strip(512, 4, 4, False, 2, 16, 3)
    assert configs.choose_cols_strip(16384, 4096, np.float32, H200) == strip(512, 8, 4, True, 2, 16, 3)
    assert configs.choose_cols_strip(16385, 4096, np.float32, H200) == strip(512, 4, 4, False, 2, 16, 3)
    for dtype, shortest, longest in [(np.float16, 512, 24576), (BF16, 512, 24576), (np.float32, 256, 24576)]:
        assert configs.choose_cols_strip(shortest - 1, 4096, dtype, H200) is None
        assert configs.choose_cols_strip(shortest, 4096, dtype, H200).cluster == 1
        assert configs.choose_cols_strip(longest, 4096, dtype, H200).cluster == 16
        assert configs.choose_cols_strip(longest + 1, 4096, dtype, H200) is None
    assert configs.choose_cols_strip(1024, 4096, np.float16, A100) == strip(512, 4, 4, False, 2, 1, 2)
    assert configs.choose_cols_strip(1025, 4096, np.float16, A100) is None
    assert configs.choose_cols_strip(16384, 4096, np.float64, H200) is None


def test_cols_strip_cluster_grows_while_strips_leave_sms_idle():
    # 1024 float16 rows: one cluster block holds 2 tiles; 128 strips of 32 columns fill 128 of
    # the 264 block slots, so 2 blocks of one tile each; with 1M columns the smallest cluster.
    assert configs.choose_cols_strip(1024, 4096, np.float16, H200).cluster == 2
    assert configs.choose_cols_strip(1024, 1 << 20, np.float16, H200).cluster == 1
    assert configs.choose_cols_strip(2048, 2048, np.float16, H200).cluster == 4
    assert configs.choose_cols_strip(2048, 1 << 20, np.float16, H200).cluster == 2


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_cols_strip_configs_fit_and_are_instantiations(dtype):
    """Every chosen strip holds its column (tiles a block), fits blocks_per_sm blocks an SM in
    shared memory, and is compiled by check-compile."""
    for dev in (H200, A100):
        specs = set(configs.instantiations(dev))
        for length in (1, 255, 256, 511, 512, 700, 1024, 1025, 1031, 3001, 4099, 8192, 16383, 16384, 16385, 24576, 24577):
            for rows in (8, 72, 4096, 1 << 20):
                c = configs.choose_cols_strip(length, rows, dtype, dev)
                if c is None:
                    continue
                part = -(-length // c.cluster)
                assert -(-part // c.tile_rows) <= c.tiles_per_block and part >= 1
                assert c.cluster <= (16 if dev.cc >= 90 else 1)
                static = configs._strip_static_smem(c.threads, c.columns(dtype), dtype)
                assert c.blocks_per_sm * (c.smem_bytes + static + 1024) <= dev.smem_per_sm
                assert c.smem_bytes <= dev.max_smem_per_block
                for log in (False, True):
                    assert c.spec(dtype, log) in specs


def test_cols_strip_default_is_one_flag(monkeypatch):
    """_COLS_STRIP_DEFAULT on (the default since run S4-4): the strip kernel wherever it holds a
    vectorizable column, the two-read kernels elsewhere; off: the two-read kernels."""
    f16, f32 = np.float16, np.float32
    monkeypatch.setattr(configs, "_COLS_SPLIT_DEFAULT", False)  # the kernels below the column split
    monkeypatch.setattr(configs, "_COLS_STRIP_DEFAULT", False)
    assert not isinstance(configs.choose_cols(16384, 4096, f16, H200, True), configs.ColsStripConfig)
    monkeypatch.setattr(configs, "_COLS_STRIP_DEFAULT", True)
    assert configs.choose_cols(16384, 4096, f16, H200, True).threads == 256  # measured fastest (S4-4)
    assert configs.choose_cols(16384, 4096, f16, H200, True) == configs.choose_cols_strip(16384, 4096, f16, H200)
    assert configs.choose_cols(16384, 4096, f32, H200, True) == configs.choose_cols_strip(16384, 4096, f32, H200)
    assert configs.choose_cols(16384, 4096, f16, H200, False) == configs.ColsConfig(16, 12, 4)
    assert configs.choose_cols(100, 4096, f16, H200, True) == configs.ColsConfig(16, 12, 1)
    assert configs.choose_cols(1 << 20, 64, f32, H200, True) == configs.ColsVecConfig(256, 8, 4, 8)
    for dev in (H200, A100):
        specs = set(configs.instantiations(dev))
        for dtype in (f16, BF16, f32, np.float64):
            for length in [1, 7, 100, 1000, 5000, 70000]:
                vectorizable = configs.cols_vectorizable(1, 64, 0, 64, dtype)
                assert configs.choose_cols(length, 64, dtype, dev, vectorizable).spec(dtype, True) in specs


def test_cols_split_config():
    """choose_cols_split (H200): 16384 x 4096 in tiles of 128-byte rows (2-byte types 32 KB tiles
    two blocks an SM, float32 16 KB tiles three), the parts whole tiles, the fewest tiles a block
    over the call with an exchange weighing a tile (run S6-7: 22 blocks a strip beat 32 and 64;
    ties: the larger part); None for float64, below one tile and beyond the resident grid's parts."""
    split = configs.ColsSplitConfig
    f16, f32 = np.float16, np.float32
    assert configs.choose_cols_split(16384, 4096, f16, H200) == split(256, 8, 8, False, 2, 22, 12, 768, 3)
    assert configs.choose_cols_split(16384, 4096, BF16, H200) == split(256, 8, 8, False, 2, 22, 12, 768, 3)
    assert configs.choose_cols_split(16384, 4096, f32, H200) == split(256, 8, 4, False, 3, 32, 12, 512, 4)
    # 2 strips of 64 columns: smaller parts, more blocks a strip, to fill the grid.
    assert configs.choose_cols_split(16384, 128, f16, H200) == split(256, 8, 8, False, 2, 64, 2, 256, 1)
    assert configs.choose_cols_split(256, 4096, f32, H200) == split(256, 8, 4, False, 3, 2, 128, 128, 1)
    for dtype, tile_rows, longest in [(f16, 256, 264 * 3 * 256), (BF16, 256, 264 * 3 * 256), (f32, 128, 396 * 4 * 128)]:
        assert configs.choose_cols_split(tile_rows - 1, 4096, dtype, H200) is None
        assert configs.choose_cols_split(longest, 64, dtype, H200).grid == (396 if dtype is f32 else 264)  # 3 / 2 blocks an SM
        assert configs.choose_cols_split(longest + 1, 64, dtype, H200) is None
    assert configs.choose_cols_split(16384, 4096, np.float64, H200) is None


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_cols_split_configs_fit_and_are_instantiations(dtype):
    """Every chosen split holds its column in whole parts within their tiles, keeps its grid
    resident at blocks_per_sm an SM (shared memory included), waits on at most 8 cp.async
    groups, and is compiled by check-compile."""
    for dev in (H200, A100):
        specs = set(configs.instantiations(dev))
        for length in (255, 256, 257, 511, 1031, 3001, 12289, 16384, 16385, 100000, 300000):
            for columns in (8, 72, 520, 4104, 1 << 20):
                c = configs.choose_cols_split(length, columns, dtype, dev)
                if c is None:
                    continue
                assert c.blocks_per_strip * c.part >= length > (c.blocks_per_strip - 1) * c.part
                assert c.part == c.tiles_per_block * c.tile_rows and 0 <= c.smem_tiles <= 8
                assert c.grid <= c.blocks_per_sm * dev.sm_count
                assert c.strips_per_wave <= -(-columns // c.columns(dtype))
                static = configs._strip_static_smem(c.threads, c.columns(dtype), dtype, cluster=1)  # no inbox
                assert c.blocks_per_sm * (c.smem_bytes + static + 1024) <= dev.smem_per_sm
                for log in (False, True):
                    assert c.spec(dtype, log) in specs


def test_cols_split_default_is_one_flag(monkeypatch):
    """_COLS_SPLIT_DEFAULT on (the default since run S6-7): the split wherever it applies to a
    vectorizable layout; off: the previous choice (strips, two-read kernels) everywhere."""
    f16, f32 = np.float16, np.float32
    monkeypatch.setattr(configs, "_COLS_SPLIT_DEFAULT", False)
    before = {(n, d, v): configs.choose_cols(n, 4096, d, H200, v) for n in (100, 16384, 300000) for d in (f16, f32) for v in (False, True)}
    assert not any(isinstance(c, configs.ColsSplitConfig) for c in before.values())
    monkeypatch.setattr(configs, "_COLS_SPLIT_DEFAULT", True)
    assert configs.choose_cols(16384, 4096, f16, H200, True) == configs.choose_cols_split(16384, 4096, f16, H200)
    assert configs.choose_cols(16384, 4096, f32, H200, True) == configs.choose_cols_split(16384, 4096, f32, H200)
    for (n, d, v), c in before.items():
        if not (v and n == 16384):
            assert configs.choose_cols(n, 4096, d, H200, v) == c
    assert configs.choose_cols(16384, 4096, np.float64, H200, False) == configs.ColsConfig(16, 2, 4)


def test_split_pipelined_flag_reaches_the_kernel():
    c = configs.choose_split(1 << 20, 16, np.float32, H200)
    assert c.spec(np.float32, False).template_args[-1] is True
    assert configs.choose_split(1 << 20, 16, BF16, H200).spec(BF16, False).template_args[-1] is True
    d = configs.choose_split(1 << 20, 16, np.float64, H200)
    assert d.spec(np.float64, False).template_args[-1] is False
    assert dataclasses.replace(d, pipelined=True).spec(np.float64, False).template_args[-1] is True


# ---------------------------------------------------------------- CPU: the host path
# Fake cupy arrays over host memory and a recording kernel: the per-call Python path is
# exercised without a GPU.


class _RecordingKernel:
    num_regs = 64
    shared_size_bytes = 1024
    name = "fake"

    def __init__(self):
        self.launches = []

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((grid, block, args, shared_mem))


@pytest.fixture
def fake_gpu(monkeypatch):
    """(make_array, kernels): cupy arrays over host memory on device 0, kernels that record
    their launches; the softmax caches are emptied for the test and restored after it."""
    cupy = pytest.importorskip("cupy")
    import sys

    module = sys.modules["cufuse.softmax"]
    kernels = {}
    owners = []

    def make_array(shape, dtype):
        nbytes = max(16, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        buffer = np.zeros(nbytes + 16, np.uint8)
        owners.append(buffer)
        memory = cupy.cuda.memory.UnownedMemory(buffer.ctypes.data, buffer.nbytes, buffer, device_id=0)
        return cupy.ndarray(shape, dtype, memptr=cupy.cuda.memory.MemoryPointer(memory, 0))

    def get_kernel(source, name, *args, dynamic_smem=0):
        return kernels.setdefault((name, args), _RecordingKernel())

    class Stream:
        ptr = 0

    for name, value in [("get_kernel", get_kernel), ("device_info", lambda device_id: H200), ("_cupy", None),
                        ("_plans", {}), ("_signatures", {}), ("_scratches", {})]:
        monkeypatch.setattr(module, name, value)
    monkeypatch.setattr(cupy.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: Stream())
    return module, make_array, kernels


def test_host_path_plans_once_and_launches_the_geometry(fake_gpu, monkeypatch):
    module, make_array, kernels = fake_gpu
    x, out = make_array((1000, 200), np.float32), make_array((1000, 200), np.float32)
    built = []
    make_plan = module._make_plan
    monkeypatch.setattr(module, "_make_plan", lambda *a: built.append(a) or make_plan(*a))
    for _ in range(3):
        assert cufuse.softmax(x, axis=-1, out=out) is out
    assert len(built) == 1 and len(module._signatures) == 1
    (kernel,) = kernels.values()
    assert len(kernel.launches) == 3
    grid, block, args, smem = kernel.launches[-1]
    config = configs.choose_rows(200, 1000, np.float32, H200)
    assert grid == (-(-1000 // config.rows_per_block),) and block == (config.threads,) and smem == 0
    assert args[0] is x and args[1] is out
    assert [int(a) for a in args[2:]] == [1000, 200, 1, 200, 0, 1]  # rows, length, inner, so, si, sl
    # A new out on the fast path is still checked for overlap with x.
    with pytest.raises(ValueError, match="overlap"):
        cufuse.softmax(x, axis=-1, out=x)
    # Other axis forms are other signatures (1.0 is not an axis even though 1.0 == 1).
    with pytest.raises(TypeError, match="axis"):
        cufuse.softmax(x, axis=1.0, out=out)


def test_host_path_reuses_the_split_scratch(fake_gpu):
    module, make_array, kernels = fake_gpu
    x, out = make_array((4, 1 << 20), np.float32), make_array((4, 1 << 20), np.float32)
    plan = module._plan(x.shape, x.strides, x.dtype, (1,), 0, None, False)
    accum_dtype, accumulators, counters = plan.scratch
    assert (accumulators, counters) == (2 * 4 * configs.choose_rows(1 << 20, 4, np.float32, H200).blocks_per_row, 4)
    held = (make_array((accumulators,), accum_dtype), make_array((counters,), np.uint32))
    module._scratches[(0, 0, accum_dtype)] = held  # as if allocated by an earlier call
    cufuse.softmax(x, axis=-1, out=out)
    cufuse.softmax(x, axis=-1, out=out)
    (kernel,) = kernels.values()
    for _, _, args, smem in kernel.launches:
        assert args[-2] is held[0] and args[-1] is held[1] and smem == plan.smem


def test_host_path_cols_vec_grid(fake_gpu):
    """ColsVecConfig: refused where the layout does not allow vectors; otherwise a block per
    columns(dtype) columns, times the cluster."""
    module, _, _ = fake_gpu
    with pytest.raises(ValueError, match="config"):
        module._plan((100, 70), (4, 400), np.dtype(np.float32), (0,), 0, configs.ColsVecConfig(256, 4, 4), False)
    cols = module._plan((100, 64), (128, 2), np.dtype(np.float16), (0,), 0, configs.ColsVecConfig(256, 4, 4, 8), False)
    assert cols.grid == (2 * 8,) and cols.block == (256,)


def test_host_path_cols_strip(fake_gpu, monkeypatch):
    """ColsStripConfig: a block per strip of columns times the cluster, the part of each block
    and the shared-memory tiles, the non-portable cluster of 16 allowed; refused where the
    layout does not allow vectors or the config does not hold the column."""
    module, _, _ = fake_gpu
    non_portable = []
    monkeypatch.setattr(module, "_allow_non_portable_cluster", non_portable.append)
    f16 = np.dtype(np.float16)
    config = configs.ColsStripConfig(512, 4, 4, False, 2, 16, 2)
    plan = module._plan((16384, 4096), (8192, 2), f16, (0,), 0, config, False)
    assert plan.grid == (4096 // 32 * 16,) and plan.block == (512,) and plan.smem == 2 * 32768
    assert [int(a) for a in plan.scalars] == [1, 16384, 4096, 0, 1, 4096, 1024]  # outer, geometry, part
    assert non_portable == [plan.kernel] and plan.kernel.preferred_shared_memory_carveout == 100
    outer = module._plan((3, 1031, 40), (1031 * 80, 80, 2), f16, (1,), 0, configs.choose_cols_strip(1031, 120, f16, H200), False)
    assert outer.grid[0] % 6 == 0 and int(outer.scalars[0]) == 3  # 3 outer x 2 strips of 32 columns, x the cluster
    with pytest.raises(ValueError, match="config"):
        module._plan((40000, 64), (128, 2), f16, (0,), 0, config, False)  # 2500 rows a block: beyond 2 tiles
    with pytest.raises(ValueError, match="config"):
        module._plan((16384, 70), (280, 4), np.dtype(np.float32), (0,), 0, configs.choose_cols_strip(16384, 72, np.float32, H200), False)


def test_host_path_cols_split(fake_gpu, monkeypatch):
    """ColsSplitConfig: the persistent grid, the part, blocks a strip and strips (outer x column
    strips), the scratch (2 x grid x Cols pairs, strips_per_wave counters); refused where the
    layout does not allow vectors, the config does not hold the column or its grid is not
    resident on the device."""
    module, make_array, kernels = fake_gpu
    f16 = np.dtype(np.float16)
    config = configs.choose_cols_split(16384, 4096, f16, H200)
    plan = module._plan((16384, 4096), (8192, 2), f16, (0,), 0, config, False)
    assert plan.grid == (264,) and plan.block == (256,) and plan.smem == 3 * 32768
    assert [int(a) for a in plan.scalars] == [1, 16384, 4096, 0, 1, 4096, 768, 22, 64]  # outer, geometry, part, blocks, strips
    assert plan.scratch == (np.dtype(np.float32), 2 * 264 * 64 * 2, 12)
    assert plan.kernel.preferred_shared_memory_carveout == 100
    outer = module._plan((3, 1031, 72), (1031 * 144, 144, 2), f16, (1,), 0, configs.choose_cols_split(1031, 216, f16, H200), False)
    assert int(outer.scalars[0]) == 3 and int(outer.scalars[-1]) == 3 * 2  # 3 outer x 2 strips of 64 columns
    held = (make_array((2 * 264 * 64 * 2,), np.float32), make_array((12,), np.uint32))
    module._scratches[(0, 0, np.dtype(np.float32))] = held  # as if allocated by an earlier call (rows split or not)
    x, out = make_array((16384, 4096), f16), make_array((16384, 4096), f16)
    cufuse.softmax(x, axis=0, out=out, config=config)
    (kernel,) = kernels.values()
    assert kernel.launches[-1][2][-2] is held[0] and kernel.launches[-1][2][-1] is held[1]
    with pytest.raises(ValueError, match="config"):
        module._plan((100, 70), (140, 2), f16, (0,), 0, config, False)  # not vectorizable
    with pytest.raises(ValueError, match="holds 22 x 768 rows a strip, got columns of 16897"):
        module._plan((16897, 64), (128, 2), f16, (0,), 0, config, False)
    with pytest.raises(ValueError, match="co-resident"):
        module._plan((16384, 64), (128, 2), f16, (0,), 0, dataclasses.replace(config, strips_per_wave=13), False)
    monkeypatch.setattr(configs, "_COLS_SPLIT_DEFAULT", True)  # the flag (the default): the same plan without config=
    assert module._plan((16384, 4096), (8192, 2), f16, (0,), 0, None, False).scalars == plan.scalars


def test_host_path_copy_path_is_not_a_fast_signature(fake_gpu):
    module, make_array, _ = fake_gpu
    x = make_array((6, 7, 300), np.float32)
    assert module._plan(x.shape, x.strides, x.dtype, (0, 2), 0, None, False) is None
    assert module._plan(x.shape, x.strides, x.dtype, (2,), 0, None, False) is not None


# ---------------------------------------------------------------- GPU helpers

TOL = {
    np.dtype(np.float16): dict(rtol=2e-3, atol=1e-6),
    BF16: dict(rtol=1.6e-2, atol=1e-5),
    np.dtype(np.float32): dict(rtol=3e-5, atol=1e-9),
    np.dtype(np.float64): dict(rtol=1e-12, atol=1e-300),
}
LOG_ATOL = {np.dtype(np.float16): 1e-2, BF16: 8e-2, np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


def _random(cp, rng, shape, dtype, scale=3.0):
    values = rng.standard_normal(shape) * scale
    return cp.asarray(values.astype(dtype))


def _check(cp, x, axis, log, *, out=None, scipy_too=False, config=None):
    """Run cufuse on x (cupy) and compare with the float64 oracle, NaN pattern included."""
    result = FN[log](x, axis=axis, out=out, config=config)
    if out is not None:
        assert result is out
    host = cp.asnumpy(x)
    dtype = np.dtype(np.float64) if host.dtype.kind in "biu" else host.dtype
    assert result.dtype == dtype and result.shape == x.shape
    axes = tuple(range(host.ndim)) if axis is None else axis
    expected = ORACLE[log](host.astype(np.float64), axes)
    tol = dict(TOL[dtype])
    if log:
        tol["atol"] = LOG_ATOL[dtype]
    actual = cp.asnumpy(result).astype(np.float64)
    np.testing.assert_allclose(actual, expected, equal_nan=True, **tol)
    if scipy_too:
        np.testing.assert_allclose(actual, SCIPY[log](host.astype(np.float64), axis=axis), equal_nan=True, **tol)
    return result


def _lengths_past_each_threshold(dtype):
    vs = configs.vector_size(dtype)
    return [1] + [c * vs + 1 for c in ladder(dtype)] + [ladder(dtype)[-1] * vs]


# ---------------------------------------------------------------- GPU tests
# Default configs only (``python -m cufuse precompile`` builds them first) except the one
# forced split config, which shares its kernel with the default float32 split; arrays of at
# most ~2M elements except the benchmark's 4 x 4194304 and the > 2**31 case.

_MAX_ELEMENTS = 1 << 20


def _rows_for(length, most=37):
    return max(1, min(most, _MAX_ELEMENTS // length))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("log", [False, True])
def test_every_ladder_branch(cp, rng, dtype, log):
    """Lengths 1, at and just past every capacity of the ladder (the last one: the split
    kernel), odd row counts, poisoned out."""
    for length in _lengths_past_each_threshold(dtype):
        x = _random(cp, rng, (_rows_for(length), length), dtype)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


def _one_length_per_kernel(dtype):
    """Sub-warp (1 and 16 lanes), warp, block, cluster and split rows, ragged lengths."""
    vs = configs.vector_size(dtype)
    return (3, 31 * vs - 1, 100 * vs + 3, 1000 * vs + 1, 4096 * vs + 3, 16384 * vs + 7)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_dtypes_on_each_kernel(cp, rng, dtype, log):
    for length in _one_length_per_kernel(dtype):
        x = _random(cp, rng, (_rows_for(length, 9), length), dtype)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


@pytest.mark.parametrize("log", [False, True])
def test_many_short_rows_and_scipy(cp, rng, log):
    x = _random(cp, rng, (1001, 32), np.float16)
    _check(cp, x, -1, log, scipy_too=True)
    x = _random(cp, rng, (257, 13), np.float32)
    _check(cp, x, 1, log, scipy_too=True)


@pytest.mark.parametrize("log", [False, True])
def test_split_waves_streaming_and_scratch_reuse(cp, rng, log):
    # 40 rows of 131073: 7 blocks per row, 37 rows per wave on the H200 -> 2 waves.
    x = _random(cp, rng, (40, 131073), np.float32)
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    # Forced: 25000-element chunks = 7 register tiles (1 in registers, 2 in shared memory,
    # 4 streamed and read twice). Back-to-back calls, on two streams: each call relies on
    # the previous one of its stream having left the reused arrival counters at zero.
    streamed = configs.SplitConfig(256, 4, 2, 2, 4, 25000, 2, True)
    stream = cp.cuda.Stream(non_blocking=True)
    for rows in (2, 5, 1):
        x = _random(cp, rng, (rows, 50000), np.float32)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=streamed)
        with stream:
            _check(cp, x, -1, log, config=streamed)


def test_benchmark_long_rows_float16(cp, rng):
    """4 x 4194304 float16 (split kernel, one wave), checked on the GPU in float64 (the
    host oracle of 16M elements would be slow); the float32 sum must not overflow."""
    x = _random(cp, rng, (4, 4194304), np.float16)
    out = poisoned(cp, x.shape, x.dtype)
    cufuse.softmax(x, axis=-1, out=out)
    a = x.astype(cp.float64)
    e = cp.exp(a - a.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    assert float(cp.abs(out.astype(cp.float64) - expected).max()) <= 2e-3 * float(expected.max())


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_axis_forms(cp, rng, dtype, log):
    x = _random(cp, rng, (6, 35, 129), dtype)
    for axis in (None, 0, 1, 2, -1, -2, (0, 1), (1, 2), (0, 2), (0, 1, 2), (-1, 0)):
        axes = None if axis is None else tuple(sorted(a % 3 for a in np.atleast_1d(axis)))
        _check(cp, x, axes if axis is not None else None, log, out=poisoned(cp, x.shape, x.dtype))
    _check(cp, _random(cp, rng, (), dtype), None, log)
    _check(cp, _random(cp, rng, (5,), dtype), 0, log)


@pytest.mark.parametrize("log", [False, True])
def test_cluster_rows_per_cluster(cp, rng, log):
    """Persistent clusters (a forced config on the cluster kernel, the float32 rung up to
    softmax v7; ff5956b moved float32 to the split kernel): 7 rows on 3 clusters (3, 2 and 2
    rows each, the partials' parity buffers reused), non-finite rows, a ragged last block."""
    if configs_device().max_cluster_size < 4:
        pytest.skip("thread-block clusters need sm_90")
    config = configs.ClusterConfig(256, 8, 4, 3)
    length = config.capacity_vectors * configs.vector_size(np.float32) - 5
    x = cp.asarray(_rows_with_non_finite(rng, length, np.float32))
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


def configs_device():
    from cufuse._configs import current_device_info

    return current_device_info()


@pytest.mark.parametrize("log", [False, True])
def test_axis_argument_forms_as_given(cp, rng, log):
    x = _random(cp, rng, (6, 35, 129), np.float32)
    for axis in (-1, -2, (-1, 0), (2, 1), np.int64(1)):
        result = FN[log](x, axis=axis)
        expected = SCIPY[log](cp.asnumpy(x).astype(np.float64), axis=axis)
        np.testing.assert_allclose(cp.asnumpy(result), expected, rtol=3e-5, atol=2e-5 if log else 1e-9)


def test_repeated_signature_fast_path(cp, rng):
    """The second call of a signature skips validation and planning: fresh data still gives
    fresh results, and an out overlapping x is still refused."""
    out = cp.empty((300, 1000), dtype=cp.float32)
    for _ in range(2):
        x = _random(cp, rng, (300, 1000), np.float32)
        _check(cp, x, -1, False, out=out)
    with pytest.raises(ValueError, match="overlap"):
        cufuse.softmax(x, axis=-1, out=x)


@pytest.mark.parametrize("log", [False, True])
def test_leading_axis_reduces_down_columns(cp, rng, log):
    # Column lengths on both sides of the cluster threshold, ragged column counts.
    for shape in [(16384, 33), (2048, 100), (2047, 100), (1000, 1025), (3, 4097), (1, 64)]:
        x = _random(cp, rng, shape, np.float32)
        _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype))
    x = _random(cp, rng, (4, 777, 70), np.float16)  # middle axis: outer > 1
    _check(cp, x, (1,), log)


@pytest.mark.parametrize("log", [False, True])
def test_strided_views(cp, rng, log):
    base = _random(cp, rng, (64, 2050), np.float32)
    views = [
        base[:, ::2],  # strided reduced axis (scalar loads)
        base[:, 1:],  # misaligned rows (scalar path)
        base[:, :1023],  # odd length, aligned rows: vector body + scalar tail
        base[::-1, ::-1],  # negative strides
        base.T,  # reduced axis 0 contiguous in memory
        base[::3],  # row stride 3 x 2050
    ]
    for view in views:
        for axis in ((view.ndim - 1,), (0,), None):
            _check(cp, view, axis, log, out=poisoned(cp, view.shape, view.dtype))
    three = _random(cp, rng, (10, 12, 300), np.float32)[::2, ::3, 1:]  # does not collapse: copy path
    _check(cp, three, (2,), log)
    _check(cp, three, (0, 2), log)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("log", [False, True])
def test_integer_and_bool_inputs_compute_in_float64(cp, rng, dtype, log):
    x = cp.asarray(rng.integers(0, 2 if dtype is np.bool_ else 50, size=(17, 301)).astype(dtype))
    result = _check(cp, x, (1,), log, scipy_too=True)
    assert result.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_nan_pattern(cp, rng, dtype, log):
    """Rows with NaN, +inf, all -inf, some -inf entries, and +inf with -inf, on the sub-warp,
    warp, block, cluster and split paths (the cluster and split paths merge partials across
    blocks) and down columns."""
    for length in _one_length_per_kernel(dtype)[::-1]:
        x = cp.asarray(_rows_with_non_finite(rng, length, dtype))
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))
    for length in (5, 3000):  # the column kernel, without and with a cluster
        x = cp.asarray(_rows_with_non_finite(rng, length, dtype))
        _check(cp, cp.ascontiguousarray(x.T), 0, log, out=poisoned(cp, x.T.shape, x.dtype))


def _rows_with_non_finite(rng, length, dtype):
    """7 rows: NaN, +inf, all -inf, every other -inf, +inf with -inf, two +inf, finite."""
    host = (rng.standard_normal((7, length)) * 3).astype(dtype)
    host[0, length // 2] = np.nan
    host[1, length - 1] = np.inf
    host[2, :] = -np.inf
    host[3, ::2] = -np.inf
    host[4, 0] = np.inf
    host[4, 1:] = -np.inf
    host[5, 0] = np.inf
    host[5, -1] = np.inf
    return host


@pytest.mark.parametrize("log", [False, True])
def test_empty_arrays(cp, log):
    for shape, axis in [((0,), None), ((3, 0), 1), ((0, 5), 1), ((0, 5), 0)]:
        x = cp.empty(shape, dtype=cp.float32)
        result = FN[log](x, axis=axis)
        assert result.shape == shape and result.dtype == cp.float32


# ---------------------------------------------------------------- GPU: v5/v6 kernels (config overrides)
# Forced configs: sweep candidates (bench/sweep_softmax.py) and the defaults' kernels in
# geometries the default grid does not reach (several rows per block, streamed tiles);
# test_every_ladder_branch and test_dtypes_on_each_kernel run the defaults. The
# forced_kernels fixture compiles them all in parallel first (NVRTC inside the tests is serial).

SPLIT_STREAMED_PIPELINED = configs.SplitConfig(256, 4, 2, 2, 4, 25000, 2, True, pipelined=True)
# The float16 default split kernel with 3 blocks a row and 2 rows a wave: each block prefetches
# its next row's 2 shared-memory tiles during the output pass, 4 waves.
SPLIT_PIPELINED_WAVES_F16 = configs.SplitConfig(256, 4, 2, 3, 6, 24576, 2, False, pipelined=True)
# A non-portable cluster of 16 (the kernel attribute set by the host), 2 rows a cluster: a v6
# sweep candidate (float32 1024 x 65536).
CLUSTER_16 = configs.ClusterConfig(256, 4, 16, 2)
COLS_VEC = {1: configs.ColsVecConfig(256, 4, 4, 1), 8: configs.ColsVecConfig(256, 4, 4, 8)}


def _split_pipelined(length, rows, dtype):
    return dataclasses.replace(configs.choose_rows(length, rows, dtype, configs_device()), pipelined=True)


_forced_compiled = []


def _precompile(forced):
    """(config, dtype) pairs compiled in parallel for this device, softmax and log_softmax."""
    from cufuse._loader import arch_for, precompile

    dev = configs_device()
    specs = [c.spec(d, log) for c, d in forced for log in (False, True)]
    precompile([s for s in specs if s.min_cc <= dev.cc], arch_for(dev.cc), jobs=16)


@pytest.fixture
def forced_kernels(cp):
    if _forced_compiled:
        return
    _forced_compiled.append(True)
    forced = [(SPLIT_STREAMED_PIPELINED, np.float32), (_split_pipelined(131073, 7, np.float16), np.float16)]
    forced += [(CLUSTER_16, np.float32), (STASHED_F16, np.float16), (STASHED_F16, BF16), (STASHED_F32, np.float32),
               (STASHED_F32_WIDE, np.float32)]
    forced += [(c, d) for c in COLS_VEC.values() for d in (np.float16, np.float32)]
    _precompile(forced)


def _clusters(size):
    return configs_device().max_cluster_size >= min(size, 8) and configs_device().cc >= 90


@pytest.mark.parametrize("log", [False, True])
def test_non_portable_cluster(cp, rng, forced_kernels, log):
    """softmax_rows_cluster in clusters of 16 (above the portable 8): non-finite rows, a ragged
    and prime length, 37 rows on persistent clusters of 2 rows each, misaligned and strided rows."""
    if not _clusters(16):
        pytest.skip("needs thread-block clusters (sm_90)")
    for length in (65536, 49999):
        x = cp.asarray(_rows_with_non_finite(rng, length, np.float32))
        x = cp.concatenate([x, _random(cp, rng, (30, length), np.float32)])  # 37 rows
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=CLUSTER_16)
    base = _random(cp, rng, (23, 65538), np.float32)
    for view in (base[:, 1:65537], base[:, :65536:2]):  # misaligned; strided
        _check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=CLUSTER_16)


@pytest.mark.parametrize("log", [False, True])
def test_split_pipelined(cp, rng, forced_kernels, log):
    """The pipelined split kernel: the default geometry (7 shared-memory tiles, one cp.async
    group each) over several waves, float16 and float32, and the streamed forced config;
    non-finite rows; the next row's tiles requested in the output pass (several rows a
    block), also where consecutive rows of a block alternate between aligned and not."""
    x = _random(cp, rng, (40, 131073), np.float32)
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=_split_pipelined(131073, 40, np.float32))
    x = cp.asarray(_rows_with_non_finite(rng, 50000, np.float32))
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_STREAMED_PIPELINED)
    # Row stride 50001: row r is 16-byte aligned iff r % 4 == 0 (block 0 serves rows 0, 2, 4, 6).
    x = _random(cp, rng, (7, 50001), np.float32)[:, :50000]
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_STREAMED_PIPELINED)
    x = cp.asarray(_rows_with_non_finite(rng, 70001, np.float16))
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=SPLIT_PIPELINED_WAVES_F16)
    x = cp.asarray(_rows_with_non_finite(rng, 131073, np.float16))
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=_split_pipelined(131073, 7, np.float16))


STASHED_F16 = configs.StashedRowsConfig(512, 4, 3, 2)  # the 2-byte rung: 128 KB rows, two blocks an SM
STASHED_F32 = configs.StashedRowsConfig(256, 8, 3, 2)  # the float32 rungs
STASHED_F32_WIDE = configs.StashedRowsConfig(512, 4, 7, 1)


@pytest.mark.parametrize("log", [False, True])
def test_stashed_rows(cp, rng, forced_kernels, log):
    """softmax_rows_stashed (one block a row: a register tile and shared-memory tiles): full
    rows, rows ending inside a shared-memory tile (the register tile empty), a row of one
    element, non-finite rows, misaligned and strided rows (the synchronous stash path),
    float16, bfloat16 and float32; out poisoned."""
    for config, dtype, length in ((STASHED_F16, np.float16, 65536), (STASHED_F16, BF16, 40003),
                                  (STASHED_F32, np.float32, 32768), (STASHED_F32_WIDE, np.float32, 65531)):
        x = _random(cp, rng, (9, length), dtype)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
        x = cp.asarray(_rows_with_non_finite(rng, length, dtype))
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
    for length in (1, 8, 20001):
        x = _random(cp, rng, (5, length), np.float16)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=STASHED_F16)
    base = _random(cp, rng, (11, 30002), np.float32)
    for view in (base[:, 1:30001], base[:, ::2]):  # misaligned; strided
        _check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=STASHED_F32)


@pytest.mark.parametrize("log", [False, True])
def test_stashed_cluster_rows(cp, rng, forced_kernels, log):
    """softmax_rows_stashed_cluster (a cluster of stashed blocks a row, statistics pushed
    through distributed shared memory): clusters of 2, 4, 8 and 16 (non-portable); full rows,
    ragged and prime lengths (the last block's chunk partly or wholly empty), non-finite rows
    (NaN, +inf, all -inf, -inf entries: in different blocks' chunks), misaligned and strided
    rows (the synchronous stash path), float16, bfloat16 and float32; out poisoned."""
    if not _clusters(16):
        pytest.skip("needs thread-block clusters (sm_90)")
    geometry = (256, 8, 3, 2)
    for cluster, dtype, length in ((2, np.float32, 65536), (4, np.float16, 262144), (4, BF16, 200003),
                                   (8, np.float32, 199999), (16, np.float16, 1 << 20), (16, np.float32, 40000)):
        config = configs.StashedRowsConfig(*geometry, cluster)
        x = _random(cp, rng, (5, length), dtype)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
        x = cp.asarray(_rows_with_non_finite(rng, length, dtype))
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)
    config = configs.StashedRowsConfig(*geometry, 4)
    base = _random(cp, rng, (6, 100002), np.float32)
    for view in (base[:, 1:100001], base[:, ::2]):  # misaligned; strided
        _check(cp, view, -1, log, out=poisoned(cp, view.shape, view.dtype), config=config)
    x = _random(cp, rng, (3, 20), np.float16)  # every block but the first holds nothing
    _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


@pytest.mark.parametrize("log", [False, True])
def test_stashed_clusters_by_default(cp, rng, log):
    """float32 rows of 3/4 to all of 262144 elements run the stashed clusters of 8 by default."""
    if not _clusters(16):
        pytest.skip("needs thread-block clusters (sm_90)")
    for length in (262144, 196613):
        assert configs.choose_rows(length, 9, np.float32, configs_device()) == configs.StashedRowsConfig(256, 8, 3, 2, 8)
        x = _random(cp, rng, (9, length), np.float32)
        _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype))


def test_forced_row_config_too_short_is_refused(cp, rng):
    x = _random(cp, rng, (3, 65537), np.float16)
    with pytest.raises(ValueError, match="holds rows of up to 8192 16-byte vectors"):
        cufuse.softmax(x, axis=-1, config=STASHED_F16)


def _rows_for_online_merge(rng, length, dtype):
    """Rows that exercise softmax v7's per-thread online merge in the split kernel: -inf over
    the first 3/4 (a thread's early tiles hold only -inf, later ones not), a single finite
    value in the middle, NaN at element 9000 (a shared-memory tile), +inf in the last
    element, a maximum that grows along the row (every tile rescales the sum) and one that
    falls, magnitudes near float16's limit."""
    host = (rng.standard_normal((7, length)) * 3).astype(np.float64)
    host[0, : 3 * length // 4] = -np.inf
    host[1, :] = -np.inf
    host[1, length // 2 + 1] = 1.5
    host[2, 9000] = np.nan
    host[3, -1] = np.inf
    host[4] += np.linspace(-40.0, 40.0, length)
    host[5] += np.linspace(40.0, -40.0, length)
    host[6] += 60000.0
    return host.astype(dtype)


@pytest.mark.parametrize("log", [False, True])
def test_split_online_merge_and_full_tiles(cp, rng, forced_kernels, log):
    """The split kernel's per-thread (max, sum) over its tiles, merged once a row: streamed,
    shared-memory and register tiles (float32 25000-element chunks), and float16 chunks of
    exactly 3 full tiles (the full-tile paths) with and without a ragged end."""
    for config, dtype, lengths in [
        (SPLIT_STREAMED_PIPELINED, np.float32, (50000, 49999)),
        (configs.SplitConfig(256, 4, 2, 2, 4, 25000, 2, True), np.float32, (50000,)),
        (SPLIT_PIPELINED_WAVES_F16, np.float16, (3 * 24576, 3 * 24576 - 5, 2 * 24576 + 8)),
    ]:
        for length in lengths:
            x = cp.asarray(_rows_for_online_merge(rng, length, dtype))
            _check(cp, x, -1, log, out=poisoned(cp, x.shape, x.dtype), config=config)


@pytest.mark.parametrize("log", [False, True])
def test_cols_vec(cp, rng, forced_kernels, log):
    """16-byte column vectors: with and without a cluster (column lengths 2048 / 2047 and a
    prime), a ragged last column tile, a middle axis (outer > 1), a misaligned base (scalar
    accesses), non-finite columns, float16 and float32; and the refusal where the layout
    does not allow vectors."""
    clusters = (1, 8) if _clusters(8) else (1,)
    for dtype, shape in [(np.float16, (2048, 40)), (np.float16, (2047, 64)), (np.float32, (3001, 36)), (np.float32, (2048, 4))]:
        for c in clusters:
            x = _random(cp, rng, shape, dtype)
            _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=COLS_VEC[c])
    config = COLS_VEC[clusters[-1]]
    x = _random(cp, rng, (4, 777, 64), np.float16)
    _check(cp, x, (1,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
    flat = _random(cp, rng, (2049 * 32 + 1,), np.float32)
    misaligned = flat[1:].reshape(2049, 32)
    _check(cp, misaligned, (0,), log, out=poisoned(cp, misaligned.shape, misaligned.dtype), config=config)
    for dtype in (np.float16, np.float32):
        x = cp.ascontiguousarray(cp.asarray(_rows_with_non_finite(rng, 2500, dtype)).T)  # 2500 x 7
        x = cp.concatenate([x, x[:, :1]], axis=1)  # 8 columns: one float16 vector, two float32
        _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
    with pytest.raises(ValueError, match="config"):
        FN[log](_random(cp, rng, (100, 70), np.float32), axis=0, config=config)


# The one-read column strips (softmax v8 candidates; the default behind _COLS_STRIP_DEFAULT):
# column lengths at each threshold (one tile, a cluster step, the float32 switch to 64-byte
# rows, the longest), primes, strips not a multiple of the columns a block holds (72 float16
# columns: 2 strips + one lane of 4; 24 float32: 6 lanes of 8), a middle axis (outer > 1).
STRIP_SHAPES = [((512, 40), 0), ((256, 24), 0), ((777, 72), 0), ((1031, 24), 0), ((4099, 72), 0),
                ((16384, 40), 0), ((16385, 8), 0), ((24576, 8), 0), ((3, 1031, 40), 1)]
STRIP_DTYPES = (np.float16, BF16, np.float32)


def _column_config(choose, shape, axis, dtype):
    """choose(length, columns, dtype, device) for x of ``shape`` reduced over ``axis``."""
    length = shape[axis]
    return choose(length, int(np.prod(shape)) // length, dtype, configs_device())


def _strip_for(shape, axis, dtype):
    return _column_config(configs.choose_cols_strip, shape, axis, dtype)


_strip_compiled = []


@pytest.fixture
def strip_kernels(cp):
    """The strip kernels of the tests below and the column split kernels (one geometry a
    dtype), compiled in parallel first."""
    if _strip_compiled:
        return
    _strip_compiled.append(True)
    shapes = STRIP_SHAPES + [((4099, 32), 0), ((16385, 32), 0), ((1031, 72), 0), ((511, 40), 0), ((3, 777, 40), 1)]
    chosen = {(_strip_for(shape, axis, d), d) for shape, axis in shapes for d in STRIP_DTYPES}
    chosen |= {(_split_forced(d, 1, 1, 1), d) for d in STRIP_DTYPES}
    _precompile([(c, d) for c, d in chosen if c is not None])


@pytest.mark.parametrize("dtype", STRIP_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_strip(cp, rng, strip_kernels, dtype, log):
    for shape, axis in STRIP_SHAPES:
        config = _strip_for(shape, axis, dtype)
        if config is None:  # longer than this device holds
            continue
        x = _random(cp, rng, shape, dtype)
        _check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype), config=config)


@pytest.mark.parametrize("dtype", STRIP_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_strip_non_finite_and_misaligned(cp, rng, strip_kernels, dtype, log):
    """Non-finite columns (NaN, +inf, all -inf, ...) and the online merge across tiles (-inf
    over the first 3/4 of a column, growing and falling maxima, NaN in a shared-memory tile,
    +inf in the last row), beside finite columns; x and out not 16-byte aligned (scalars)."""
    length = 16385  # clusters of 16, 3 shared-memory tiles a block
    columns = np.concatenate([_rows_with_non_finite(rng, length, dtype).T, _rows_for_online_merge(rng, length, dtype).T], axis=1)
    host = np.concatenate([columns, (rng.standard_normal((length, 32 - 14)) * 3).astype(dtype)], axis=1)
    x = cp.asarray(host)
    config = _strip_for(x.shape, 0, dtype)
    _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
    flat = _random(cp, rng, (4099 * 32 + 1,), dtype)
    misaligned = flat[1:].reshape(4099, 32)
    out = poisoned(cp, (4099 * 32 + 1,), dtype)[1:].reshape(4099, 32)
    _check(cp, misaligned, (0,), log, out=out, config=_strip_for(misaligned.shape, 0, dtype))


@pytest.mark.parametrize("choose,shape,kernel", [
    (configs.choose_cols_strip, (4099, 72), "softmax_cols_strip"),
    (configs.choose_cols_split, (4099, 520), "softmax_cols_split"),  # its scratch: allocated by the first call
])
def test_cols_strip_and_split_one_launch_no_allocation(cp, rng, strip_kernels, choose, shape, kernel):
    x = _random(cp, rng, shape, np.float16)
    out = cp.empty_like(x)
    config = _column_config(choose, x.shape, 0, np.float16)
    call = lambda: cufuse.softmax(x, axis=0, out=out, config=config)  # noqa: E731
    call()
    cp.cuda.Device().synchronize()
    assert len(allocations(cp, call)[1]) == 0
    dot, nodes = _graph_nodes(cp, call)
    assert kernel in dot and nodes == 1, dot


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("flag,shapes", [
    ("_COLS_STRIP_DEFAULT", [((511, 40), 0), ((1031, 72), 0), ((24577, 8), 0), ((3, 777, 40), 1)]),
    ("_COLS_SPLIT_DEFAULT", [((255, 40), 0), ((1031, 72), 0), ((3, 777, 40), 1), ((12289, 40), 0)]),
])
def test_cols_strip_and_split_as_the_default(cp, rng, strip_kernels, monkeypatch, dtype, log, flag, shapes):
    """The dispatch with _COLS_STRIP_DEFAULT on (the default): strips where they hold the column,
    the two-read kernels below one tile, beyond the chip and for float64; with
    _COLS_SPLIT_DEFAULT on: the column split where it applies, the same kernels elsewhere."""
    import sys

    module = sys.modules["cufuse.softmax"]
    monkeypatch.setattr(configs, flag, True)
    monkeypatch.setattr(module, "_plans", {})
    monkeypatch.setattr(module, "_signatures", {})
    for shape, axis in shapes:
        x = _random(cp, rng, shape, dtype)
        _check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype))


# The persistent column split (softmax v10 candidate; the default behind _COLS_SPLIT_DEFAULT):
# column lengths off the tile rows (16384 = 64 tiles of 256 rows, 12289, 3001, 257: a tile and a
# row), columns off the strip (4104: 64 float16 strips and 8 columns; 520; 40 and 72 ragged), a
# middle axis (outer > 1).
SPLIT_SHAPES = [((16384, 72), 0), ((12289, 40), 0), ((3001, 520), 0), ((257, 4104), 0), ((5, 1031, 72), 1)]


def _split_for(shape, axis, dtype):
    return _column_config(configs.choose_cols_split, shape, axis, dtype)


def _split_forced(dtype, blocks_per_strip, strips_per_wave, tiles):
    """The dtype's split geometry with a forced grid: parts of ``tiles`` tiles."""
    geometry = configs._COLS_SPLIT[np.dtype(dtype)][0]
    probe = configs.ColsSplitConfig(*geometry, 1, 1, 0, 0)
    return configs.ColsSplitConfig(*geometry, blocks_per_strip, strips_per_wave, tiles * probe.tile_rows, tiles - int(probe.register_tile))


@pytest.mark.parametrize("dtype", STRIP_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_split(cp, rng, strip_kernels, dtype, log):
    """The chosen configs; then the same with 1-2 strip slots, so that each block walks several
    strips (the refill of the next strip, the partials' parity, ragged strips between full ones);
    columns shorter than a block's part (a part partly or wholly empty)."""
    for shape, axis in SPLIT_SHAPES:
        x = _random(cp, rng, shape, dtype)
        config = _split_for(shape, axis, dtype)
        _check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
        few_slots = dataclasses.replace(config, strips_per_wave=min(2, config.strips_per_wave))
        _check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype), config=few_slots)
    for length in (300, 100):
        x = _random(cp, rng, (length, 136), dtype)
        _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=_split_forced(dtype, 2, 2, 2))


@pytest.mark.parametrize("dtype", STRIP_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_split_non_finite_and_misaligned(cp, rng, strip_kernels, dtype, log):
    """Non-finite columns (NaN, +inf, all -inf, ...) and the online merge across tiles and parts
    (-inf over the first 3/4 of a column, growing and falling maxima, NaN at row 9000, +inf in
    the last row) beside finite ones, one strip partly inactive; x and out not 16-byte aligned
    (scalar loads, shared-memory tiles filled synchronously), several strips a block."""
    length = 16385
    columns = np.concatenate([_rows_with_non_finite(rng, length, dtype).T, _rows_for_online_merge(rng, length, dtype).T], axis=1)
    host = np.concatenate([columns, (rng.standard_normal((length, 32 - 14)) * 3).astype(dtype)], axis=1)
    x = cp.asarray(host)
    _check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=_split_for(x.shape, 0, dtype))
    flat = _random(cp, rng, (4099 * 200 + 1,), dtype)
    misaligned = flat[1:].reshape(4099, 200)
    out = poisoned(cp, (4099 * 200 + 1,), dtype)[1:].reshape(4099, 200)
    config = dataclasses.replace(_split_for(misaligned.shape, 0, dtype), strips_per_wave=1)
    _check(cp, misaligned, (0,), log, out=out, config=config)


def test_cols_split_scratch_is_reused_and_left_armed(cp, rng, strip_kernels):
    """Back-to-back calls on two streams, different grids: each call relies on the previous one
    of its stream having left the arrival counters at zero (checked after each)."""
    import sys

    module = sys.modules["cufuse.softmax"]
    stream = cp.cuda.Stream(non_blocking=True)
    for shape, slots in (((3001, 520), 9), ((3001, 520), 2), ((16384, 72), 1), ((16384, 72), 2)):
        x = _random(cp, rng, shape, np.float32)
        config = dataclasses.replace(_split_for(shape, 0, np.float32), strips_per_wave=slots)
        _check(cp, x, (0,), False, out=poisoned(cp, x.shape, x.dtype), config=config)
        with stream:
            _check(cp, x, (0,), True, config=config)
        cp.cuda.Device().synchronize()
        for _, counters in module._scratches.values():
            assert not bool(counters.any())


def _graph_nodes(cp, fn):
    """(kernel names, number of nodes) of fn() captured into a CUDA graph."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # the memory pool caches blocks per stream: fill this stream's before capturing
        stream.synchronize()
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
    dot = graph.debug_dot_str(0xFFFF)
    nodes = re.findall(r'^\s*"?graph_\d+_node_\d+"?\s*\[', dot, flags=re.M)
    return dot, len(nodes)


@pytest.mark.parametrize(
    "shape,axis,kernel,launches,scratch",
    [
        ((4096, 32), -1, "softmax_rows", 1, 0),
        ((1024, 1024), -1, "softmax_rows", 1, 0),
        ((64, 16384), -1, "softmax_rows", 1, 0),  # the longest block rung
        ((16, 1 << 15), -1, "softmax_rows_stashed", 1, 0),  # past the block rungs (2-/4-byte types)
        ((16, 1 << 17), -1, "softmax_rows_split", 1, 0),  # past the stashed rungs
        ((16, 1 << 18), -1, "softmax_rows_stashed_cluster", 1, 0),  # float32 rows filling a stashed cluster
        ((4096, 300), 0, "softmax_cols_split", 1, 0),  # leading axis: no transposed copy (the scratch is reused)
        ((24577, 64), 0, "softmax_cols_split", 1, 0),  # columns longer than a strip holds
        ((300000, 16), 0, "softmax_cols_vec_cluster", 1, 0),  # longer than the column split holds
        ((4096, 301), 0, "softmax_cols_cluster", 1, 0),
        ((8, 64, 64), None, "softmax_rows", 1, 0),  # axis=None of a contiguous array: one row
        ((4, 1 << 20), -1, "softmax_rows_split", 1, 0),  # the scratch is reused: no memset
    ],
)
def test_one_launch_and_no_allocation_besides_out(cp, rng, shape, axis, kernel, launches, scratch):
    x = _random(cp, rng, shape, np.float32)
    out = cp.empty_like(x)
    call = lambda: cufuse.softmax(x, axis=axis, out=out)  # noqa: E731
    call()  # compile and warm the memory pool outside the measurements
    cp.cuda.Device().synchronize()
    assert len(allocations(cp, call)[1]) == scratch
    assert len(allocations(cp, lambda: cufuse.softmax(x, axis=axis))[1]) == scratch + 1
    dot, nodes = _graph_nodes(cp, call)
    assert kernel in dot
    assert nodes == launches, dot


def test_more_than_2_31_elements(cp, rng):
    """float16 (2**15 + 1) x 2**16 = 2**31 + 2**16 elements (4.3 GB): offsets past 2**31.
    Checked on the last rows against the oracle (the whole array on the host would be slow)."""
    rows, cols = (1 << 15) + 1, 1 << 16
    x = cp.empty((rows, cols), dtype=cp.float16)
    x[...] = cp.random.standard_normal((1, cols), dtype=cp.float32).astype(cp.float16)
    x[-3:] = _random(cp, rng, (3, cols), np.float16)
    out = poisoned(cp, x.shape, x.dtype)
    cufuse.softmax(x, axis=-1, out=out)
    tail = cp.asnumpy(out[-3:]).astype(np.float64)
    np.testing.assert_allclose(tail, reference.softmax(cp.asnumpy(x[-3:]).astype(np.float64), (1,)), **TOL[np.dtype(np.float16)])
    first = cp.asnumpy(out[0]).astype(np.float64)
    np.testing.assert_allclose(first, reference.softmax(cp.asnumpy(x[0]).astype(np.float64), (0,)), **TOL[np.dtype(np.float16)])
    assert not bool(cp.isnan(out).any())
    del x, out
