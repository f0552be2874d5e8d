"""softmax's default selection (CPU): the rows ladder, the stashed and cluster rungs, the split
kernel, the column kernels, and instantiations(dev) = exactly what the rules reach."""
from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
import pytest

from cufuse._core.device import A100, H200, ceil_div
from cufuse.ops.softmax import partials, select
from cufuse.ops.softmax.cols import ColsConfig, ColsShortConfig, ColsShortShiftedConfig, ColsShortVecConfig, ColsSplitConfig, ColsVecConfig
from cufuse.ops.softmax.layout import SoftmaxProblem, cols_vectorizable, row_share, vector_size
from cufuse.ops.softmax.rows import STASHED_MAX_THREADS, ClusterConfig, RowsConfig, SpanRowsConfig, StashedRowsConfig
from cufuse.ops.softmax.split import SplitConfig

from .oracle import BF16, ladder

DTYPES = [np.float16, BF16, np.float32, np.float64]
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ladder_picks_the_smallest_config_that_holds_the_row(dtype):
    """The sub-warp and warp rungs and the float64 cluster rungs: the first that holds the row
    (the block rows between them are sized to the row: next test)."""
    vs = vector_size(dtype)
    block_reach = ladder(dtype)[len(select.rows_ladder(dtype))]  # the float64 clusters follow the block rows
    for rungs, previous in ((select.rows_ladder(dtype), 0), (select.row_cluster_rungs(dtype, H200), block_reach)):
        for capacity in (c.capacity_vectors for c in rungs):
            at = select.choose_rows(capacity * vs, 1000, dtype, H200)
            assert at.capacity_vectors == capacity
            assert select.choose_rows(previous * vs + 1, 1000, dtype, H200) == at
            previous = capacity
    past = select.choose_rows(ladder(dtype)[-1] * vs + 1, 4, dtype, H200)
    stashed = select.stashed_rows(ladder(dtype)[-1] + 1, dtype, H200)
    assert past == stashed if stashed else isinstance(past, (ClusterConfig, SplitConfig))


@pytest.mark.parametrize("dtype", DTYPES)
def test_block_rows_are_sized_to_the_row(dtype):
    """Rows of 257..4096 vectors: one block a row, on the rung of _BLOCK_VECS vectors a lane
    (at its fewest threads, a multiple of 32 in 64..512) that keeps the most rows resident an
    SM, then fills its block best; a rung that keeps one row an SM yields to the stashed rows
    where they hold the row. exp_once where its exps fit; one instantiation a rung of vectors
    a lane, whatever the width."""
    vs = vector_size(dtype)
    specs = select.instantiations(H200)
    for vectors in range(257, 4097):
        config = select.choose_rows(vectors * vs, 1000, dtype, H200)
        block = select.block_rows(vectors, dtype)
        if isinstance(config, StashedRowsConfig):
            assert select.resident_rows(block, dtype) == 1 and config == select.stashed_rows(vectors, dtype, H200)
            continue
        assert config == select.with_exp_once(block, dtype)
        assert config.block_rows and config.vecs in select._BLOCK_VECS
        assert config.threads % 32 == 0 and 64 <= config.threads <= 512
        assert config.capacity_vectors >= vectors > config.capacity_vectors - config.vecs * 32 or config.threads == 64
        key = (select.resident_rows(config, dtype), vectors / config.capacity_vectors)
        for vecs in select._BLOCK_VECS:  # no other rung keeps more rows resident, or as many better filled
            threads = max(64, ceil_div(vectors, vecs * 32) * 32)
            other = RowsConfig(threads, threads, vecs)
            if threads <= 512:
                assert (select.resident_rows(other, dtype), vectors / other.capacity_vectors) <= key
        assert config.spec(dtype, False) in specs and config.spec(dtype, True) in specs
    # Run S18-1..3's points (float16 elements, from the boundary below a misaligned start)
    if np.dtype(dtype) == F16:
        assert select.choose_rows(4097, 1000, dtype, H200, misalignment=7) == RowsConfig(96, 96, 6)
        assert select.choose_rows(6500, 1000, dtype, H200, misalignment=4) == RowsConfig(128, 128, 8)
        assert select.choose_rows(16500, 1000, dtype, H200, misalignment=4) == RowsConfig(288, 288, 8)
        assert select.choose_rows(30000, 1000, dtype, H200) == StashedRowsConfig(320, 4, 2, 2)
    with pytest.raises(ValueError, match="blocks of a multiple of 32 threads up to 512, got 1024"):
        RowsConfig(1024, 1024, 4).check(SoftmaxProblem(4, 8000, 1, 8000, 1, 0, np.dtype(dtype), False), H200)


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_rows_count_from_the_vector_boundary_below(dtype):
    """Contiguous rows that may start off a 16-byte boundary take the rung that holds them
    from the boundary below: row o starts at o * so, at most VS - gcd(so, VS) elements past
    one. Strided rows, columns and single rows (where the array starts) count none."""
    vs = vector_size(dtype)
    for capacity in (c.capacity_vectors for c in select.rows_ladder(dtype)):
        aligned = select.choose_rows(capacity * vs, 1000, dtype, H200)
        assert aligned.capacity_vectors == capacity
        assert select.choose_rows(capacity * vs, 1000, dtype, H200, misalignment=1).capacity_vectors > capacity
        assert select.choose_rows(capacity * vs - vs + 1, 1000, dtype, H200, misalignment=vs - 1) == aligned
    problem = partial(SoftmaxProblem, dtype=np.dtype(dtype), log=False)
    assert problem(1000, 100 * vs + 1, 1, 100 * vs + 1, 1, 0).max_row_misalignment == vs - 1
    assert problem(1000, 100 * vs, 1, 100 * vs + 1, 1, 0).max_row_misalignment == vs - 1  # x[:, 1:]
    assert problem(1000, 2, 1, 2, 1, 0).max_row_misalignment == max(vs - 2, 0)
    assert problem(1000, 101, 1, 100 * vs, 1, 0).max_row_misalignment == 0  # padded rows
    assert problem(1, 100 * vs + 1, 1, 0, 1, 0).max_row_misalignment == 0  # one row: where the array starts
    assert problem(1000, 101, 1, 202, 2, 0).max_row_misalignment == 0  # strided rows: scalar slots
    assert problem(10, 101, 7, 707, 7, 1).max_row_misalignment == 0  # columns
    if vs == 8:  # 671088 x 100 float16 rows sliced out of wider ones: 13 vectors from the boundary below
        assert select.choose(problem(671088, 100, 1, 104, 1, 0), H200) == RowsConfig(256, 8, 2, exp_once=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_rows_off_the_vector_take_the_span_rung_that_holds_them(dtype):
    """Rows one after another whose length is not whole vectors, up to 256 elements: the
    span rung of the fewest lanes that holds the row; whole-vector lengths, longer rows,
    padded, strided rows and columns keep their kernels."""
    vs = vector_size(dtype)
    problem = partial(SoftmaxProblem, dtype=np.dtype(dtype), log=False)
    capacities = [c.capacity_elements for c in select.span_ladder(dtype)]
    assert capacities == sorted(capacities) and capacities[-1] == 256
    for length in [n for n in range(1, 258) if n % vs]:
        chosen = select.choose(problem(5000, length, 1, length, 1, 0), H200)
        if length > 256:
            assert not isinstance(chosen, SpanRowsConfig)
            continue
        assert isinstance(chosen, SpanRowsConfig) and chosen.capacity_elements >= length
        assert chosen.capacity_elements == min(c for c in capacities if c >= length)
        assert select.choose(problem(1, length, 1, 0, 1, 0), H200) == chosen  # one row
    assert select.choose(problem(5000, 1, 1, 1, 0, 0), H200) == select.span_ladder(dtype)[0]  # (5000, 1): the axis dropped
    for length in (vs * 3, 256):
        assert isinstance(select.choose(problem(5000, length, 1, length, 1, 0), H200), RowsConfig)
    for layout in ((5000, 99, 1, 104, 1, 0), (5000, 99, 1, 198, 2, 0), (99, 5000, 1, 1, 99, 0), (10, 99, 7, 693, 7, 1)):
        assert not isinstance(select.choose(problem(*layout), H200), SpanRowsConfig)


def test_span_tiles_are_whole_passes_of_about_tile_bytes():
    """Whole passes of rows, at most tile_bytes of them (but one pass), fewer where the rows
    would not fill the device's resident block slots; the tiles fit the SM at the rung's
    blocks an SM."""
    for dtype in DTYPES:
        itemsize = np.dtype(dtype).itemsize
        for config in select.span_ladder(dtype):
            groups = config.threads // config.group
            slots = config.blocks_per_sm * H200.sm_count
            for length in sorted({1, 7, config.capacity_elements // 2 + 1, config.capacity_elements}):
                for rows in (1, 1000, 10 ** 7):
                    tile = config.tile_rows(length, rows, dtype, H200)
                    assert tile % groups == 0 and tile >= groups
                    assert tile == groups or tile * length * itemsize <= config.tile_bytes
                    assert tile == groups or ceil_div(rows, tile) >= slots
                    assert config.smem_bytes(length, tile, dtype) >= tile * length * itemsize + 16
                tile = config.tile_rows(length, 10 ** 7, dtype, H200)
                assert tile == groups * max(1, config.tile_bytes // (length * itemsize * groups))
                assert config.blocks_per_sm * (config.smem_bytes(length, tile, dtype) + 1024) <= H200.smem_per_sm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_stashed_rows_follow_the_block_rows(dtype, dev):
    """Rows past the block rows (4096 vectors) take the stashed rows (float64 has none): 4
    vectors a lane, two blocks an SM where their shared memory fits, the fewest tiles (1-7)
    at the widest block, the threads then the fewest; then the cluster / split kernels. Every
    choice fits the device and is an instantiation."""
    vs = vector_size(dtype)
    specs = select.instantiations(dev)
    reserve = 2048
    last = None
    for vectors in range(4097, 16385, 7):  # past the block rows (shorter rows: the previous test)
        config = select.choose_rows(vectors * vs, 1000, dtype, dev)
        stashed = select.stashed_rows(vectors, dtype, dev)
        if np.dtype(dtype).itemsize == 8:
            assert stashed is None and not isinstance(config, StashedRowsConfig)
            continue
        if stashed is None:  # the A100: past its shared memory
            assert dev is A100 and not isinstance(config, StashedRowsConfig)
            continue
        assert config == stashed and config.vecs == 4 and config.cluster == 1
        widest = STASHED_MAX_THREADS[4, config.blocks_per_sm]
        assert config.threads % 32 == 0 and config.threads <= widest
        assert config.capacity_vectors >= vectors > config.capacity_vectors - 32 * 4 * (config.stash_tiles + 1)
        assert vectors > widest * 4 * config.stash_tiles  # the fewest tiles at the widest block
        assert config.smem_bytes + reserve <= dev.max_smem_per_block
        assert config.blocks_per_sm * (config.smem_bytes + reserve) <= dev.smem_per_sm
        if config.blocks_per_sm == 1:  # two would not fit
            two = select._fewest_threads(vectors, 4 * (config.stash_tiles + 1), 32)
            assert not select._stashed_fits(StashedRowsConfig(min(two, widest), 4, config.stash_tiles, 2), dev) or \
                vectors > STASHED_MAX_THREADS[4, 2] * 4 * 8
        assert config.spec(dtype, False) in specs and config.spec(dtype, True) in specs
        last = config
    if np.dtype(dtype).itemsize != 8 and dev is H200:
        assert last.blocks_per_sm == 1 and select.stashed_rows(16385, dtype, dev) is None
        assert not isinstance(select.choose_rows(16385 * vs, 1000, dtype, dev), StashedRowsConfig)


def test_row_share_is_whole_vectors_covering_the_row():
    """The share of a row each of several blocks holds (split kernel, clusters): whole 16-byte
    vectors, the shares together covering the row."""
    for length, parts, dtype in [(10, 3, np.float32), (65536, 16, np.float16), (200003, 8, np.float32), (7, 4, np.float64)]:
        share, vs = row_share(length, parts, dtype), vector_size(dtype)
        assert share % vs == 0 and share * parts >= length > share * parts - parts * vs
    assert row_share(65536, 16, np.float16) == 4096 and row_share(10, 3, np.float32) == 4
    assert ClusterConfig(512, 4, 8).chunk(100003, np.float64) == row_share(100003, 8, np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stashed_clusters_choice(dtype):
    """Rows past the one-block stashed rungs that fill at least 3/4 of a stashed cluster rung
    take it (float32 clusters of 8 on sm_90; 2-byte types, float64 and the A100 have none);
    shorter rows and longer ones keep the split kernel. Only the cluster the rule picks is an
    instantiation (2, 4 and 16 remain for config= and the sweeps)."""
    vs = vector_size(dtype)
    rungs = select.stashed_cluster_rungs(dtype, H200)
    assert select.stashed_cluster_rungs(dtype, A100) == []
    specs = select.instantiations(H200)
    if np.dtype(dtype).itemsize != 4:
        assert rungs == []
        return
    assert rungs == [StashedRowsConfig(256, 8, 3, 2, 8)]
    rung = rungs[0]
    assert rung.capacity_vectors * vs == 262144 and rung.chunk(262144, dtype) == 32768
    assert rung.blocks_per_sm * (rung.smem_bytes + 2048) <= H200.smem_per_sm
    full, fill = rung.capacity_vectors * vs, rung.capacity_vectors * 3 // 4 * vs
    assert select.choose_rows(full, 128, dtype, H200) == rung
    assert select.choose_rows(fill, 128, dtype, H200) == rung
    assert isinstance(select.choose_rows(fill - vs, 128, dtype, H200), SplitConfig)
    assert isinstance(select.choose_rows(full + 1, 128, dtype, H200), SplitConfig)
    for log in (False, True):
        assert rung.spec(dtype, log) in specs
        assert not any(StashedRowsConfig(256, 8, 3, 2, c).spec(dtype, log) in specs for c in (2, 4, 16))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ladder_is_increasing_and_groups_tile_the_block(dtype):
    assert ladder(dtype) == sorted(set(ladder(dtype)))
    rows = select.rows_ladder(dtype)
    capacities = [c.capacity_vectors for c in rows]
    assert capacities == sorted(set(capacities)) and capacities[-1] == 256
    for config in rows:
        assert config.threads % config.group == 0 and config.group <= 32 or config.group == config.threads


def test_measured_winners_of_h200_run_9_and_softmax_v7():
    """Sub-warp rows (run 9, then the v7 sweep of session 3): float16 32 columns g4 v1, 128 g8 v2;
    float32 32 g8 v1, 128 g16 v2. Rows past the block rungs: the stashed rows (v9, session 5),
    then the split kernel for 2- and 4-byte types (v7: it beat the cluster rung), clusters for
    float64 only."""
    R, C = RowsConfig, ClusterConfig
    for dtype, cols, expected in [
        (np.float16, 32, R(256, 4, 1, True)),
        (np.float16, 128, R(256, 8, 2, True)),
        (np.float32, 32, R(256, 8, 1, True)),
        (np.float32, 128, R(256, 16, 2, True)),
        (np.float64, 16384, C(512, 4, 4)),
    ]:
        assert select.choose_rows(cols, 1024, dtype, H200) == expected, (dtype, cols)
    S = StashedRowsConfig  # run S18-1's rule (test_stashed_rows_follow_the_block_rows)
    for dtype, cols, expected in [(np.float16, 65536, S(416, 4, 4, 2)), (BF16, 33331, S(352, 4, 2, 2)),
                                  (np.float32, 16500, S(352, 4, 2, 2)), (np.float32, 65536, S(512, 4, 7, 1)),
                                  (np.float16, 131072, S(512, 4, 7, 1))]:
        assert select.choose_rows(cols, 1024, dtype, H200) == expected, (dtype, cols)
    for dtype, cols in [(np.float16, 131073), (np.float32, 65537), (BF16, 262144)]:
        assert isinstance(select.choose_rows(cols, 1024, dtype, H200), SplitConfig), (dtype, cols)
    split = select.choose_rows(131072, 1024, np.float32, H200)
    assert isinstance(split, SplitConfig) and (split.blocks_per_row, split.smem_tiles, split.streams) == (4, 7, False)


def test_measured_winners_of_the_v5_sweep():
    """Block rows: plain softmax_rows (sized to the row since run S18-1); the pipelined split
    for float16 and float32; the scalar column kernel in clusters of 4 where the layout has no
    aligned column vectors."""
    R = RowsConfig
    for dtype, cols, expected in [
        (np.float16, 4096, R(64, 64, 8, False)),
        (np.float16, 16384, R(256, 256, 8, False)),
        (np.float32, 16384, StashedRowsConfig(352, 4, 2, 2)),  # 512 x 8 keeps one row an SM
        (np.float32, 8192, R(256, 256, 8, True)),
        (np.float32, 4096, R(128, 128, 8, True)),
        (np.float32, 1024, R(128, 32, 8, True)),
        (np.float16, 1024, R(128, 32, 4, True)),
        (np.float16, 1500, R(128, 32, 6, False)),  # warp rows on the first rung that holds the row
    ]:
        assert select.choose_rows(cols, 4096, dtype, H200) == expected, (dtype, cols)
    for cols in (262144, 1 << 20, 1 << 22):
        assert select.choose_rows(cols, 16, np.float16, H200).pipelined
        assert cols == 262144 or select.choose_rows(cols, 16, np.float32, H200).pipelined  # 262144: stashed clusters (v10)
        assert not select.choose_rows(cols, 16, np.float64, H200).pipelined
    assert select.choose_cols(16384, 4096, np.float32, H200, False) == ColsConfig(16, 8, 4)
    assert select.choose_cols(16384, 4096, np.float16, H200, False) == ColsConfig(16, 12, 4)


def test_no_clusters_on_a100():
    assert isinstance(select.choose_rows(16384 * 4 + 1, 8, np.float32, A100), SplitConfig)
    assert isinstance(select.choose_rows(8192 * 2 + 1, 8, np.float64, A100), SplitConfig)
    assert not any(s.min_cc >= 90 for s in select.instantiations(A100))


@pytest.mark.parametrize("length,rows", [(131073, 40), (1 << 20, 16), (1 << 22, 4), (1 << 26, 1), (3_000_017, 2), (16385 * 4, 1)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("dev", [H200, A100])
def test_split_covers_the_row_with_a_resident_grid(length, rows, dtype, dev):
    vs = vector_size(dtype)
    misaligned = select.choose_rows_split(length, rows, dtype, dev, misalignment=vs - 1)
    assert length + vs - 1 <= misaligned.blocks_per_row * misaligned.chunk  # held from the boundary below
    assert select.choose_rows(length, rows, dtype, dev, vs - 1) in (misaligned, select.choose_rows(length, rows, dtype, dev))
    c = select.choose_rows_split(length, rows, dtype, dev)
    vs = vector_size(dtype)
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
            config = select.choose_rows(cols, rows, dtype, H200)
            assert not getattr(config, "streams", False), (rows, cols, dtype)


def test_exp_once_where_the_exps_fit():
    for dtype, vecs, expected in [(np.float16, 4, True), (np.float16, 8, False), (np.float32, 8, True), (np.float64, 8, True)]:
        config = select.with_exp_once(RowsConfig(128, 32, vecs), dtype)
        assert config.exp_once is expected
        assert config.spec(dtype, True).template_args[-1] is False  # log_softmax has no exp to keep


def test_every_rows_rung_is_a_default_and_clusters_only_for_float64():
    """The ladder picks each rows rung at its capacity (with exp_once where it fits), and after
    the block rungs clusters for float64 only (the stashed rows, then the split kernel, for 2-
    and 4-byte types)."""
    specs = set(select.instantiations(H200))
    for dtype in DTYPES:
        vs = vector_size(dtype)
        for rung in select.rows_ladder(dtype):
            chosen = select.choose_rows(rung.capacity_vectors * vs, 8, dtype, H200)
            assert chosen == select.with_exp_once(rung, dtype), (dtype, rung)
            assert chosen.spec(dtype, True) in specs
        after_blocks = select.choose_rows(8192 * vs, 8, dtype, H200)
        expected = ClusterConfig if np.dtype(dtype).itemsize == 8 else StashedRowsConfig
        assert isinstance(after_blocks, expected), dtype
        assert isinstance(select.choose_rows(16384 * vs + 1, 8, dtype, H200), SplitConfig), dtype


def test_split_pipelined_flag_reaches_the_kernel():
    c = select.choose_rows_split(1 << 20, 16, np.float32, H200)
    assert c.spec(np.float32, False).template_args[-1] is True
    assert select.choose_rows_split(1 << 20, 16, F16, H200).spec(F16, False).template_args[-1] is True
    assert select.choose_rows_split(1 << 20, 16, BF16, H200).spec(BF16, False).template_args[-1] is False  # spills
    d = select.choose_rows_split(1 << 20, 16, np.float64, H200)
    assert d.spec(np.float64, False).template_args[-1] is False
    assert dataclasses.replace(d, pipelined=True).spec(np.float64, False).template_args[-1] is True


def test_cols_vectorizable():
    assert cols_vectorizable(1, 4096, 0, 4096, F16)
    assert cols_vectorizable(4, 64, 777 * 64, 64, F16)
    assert not cols_vectorizable(1, 70, 0, 70, F32)  # inner not a multiple of 4
    assert not cols_vectorizable(1, 64, 0, 130, F16)  # sl not a multiple of 8
    assert not cols_vectorizable(3, 64, 102, 64, F32)  # so not a multiple of 4
    assert cols_vectorizable(1, 64, 0, 64, np.float64)  # float64 vectors: the short-column kernel's
    assert not cols_vectorizable(1, 63, 0, 64, np.float64)


def test_two_read_column_kernels_where_the_split_does_not_apply():
    """Columns shorter than a split tile or longer than its grid holds, layouts without aligned
    vectors, float64: float32 column vectors (clusters of 8 from 2048 rows), else the scalar
    kernel (clusters of 4); no clusters on the A100."""
    assert select.choose_cols(300000, 4096, F16, H200, True) == ColsConfig(16, 12, 4)  # float16 vectors lost
    assert select.choose_cols(300000, 4096, F32, H200, True) == ColsVecConfig(256, 8, 4, 8)
    assert select.choose_cols(127, 64, F32, H200, True) == ColsVecConfig(256, 8, 4, 1)  # below a tile: short, no cluster
    assert select.choose_cols(300000, 4096, F32, A100, True).spec(F32, False).name == "softmax_cols_vec"
    assert select.choose_cols(100, 4096, F16, H200, True) == ColsConfig(16, 12, 1)
    assert select.choose_cols(16384, 4096, np.float64, H200, False) == ColsConfig(16, 2, 4)
    for dtype in (np.float16, np.float32, np.float64):
        assert select.choose_cols(2048, 64, dtype, H200).cluster == 4
        assert select.choose_cols(2047, 64, dtype, H200).cluster == 1
        assert select.choose_cols(1 << 20, 64, dtype, A100).cluster == 1
        assert select.choose_cols(16384, 4096, dtype, H200).spec(dtype, False).name == "softmax_cols_cluster"


def test_short_columns_take_vectors_where_aligned():
    """Columns of up to 16 elements: softmax_cols_short_vec on the smallest rung of 4, 8, 16 rows
    where the column vectors are aligned (float64 included), its launch bound by itemsize and
    exp_once where the kept exps fit (16-bit types: the 4-row rung); elsewhere
    softmax_cols_short_shifted on the rungs of 4 and 8 rows, its own launch bounds, exps kept
    for 2-byte types (2- and 4-byte types), else softmax_cols_short; 17 rows leave them all."""
    for dtype in DTYPES:
        itemsize = np.dtype(dtype).itemsize
        bounds = {4: 4, 8: 2, 16: 1} if itemsize == 8 else {4: 5, 8: 4, 16: 2}
        for length, rung in ((1, 4), (2, 4), (4, 4), (5, 8), (6, 8), (8, 8), (9, 16), (16, 16)):
            exp_once = itemsize >= 4 or rung == 4
            chosen = select.choose_cols(length, 3000000, dtype, H200, True)
            assert chosen == ColsShortVecConfig(256, rung, bounds[rung], exp_once)
            assert select.choose_cols(length, 3000000, dtype, A100, True) == chosen
            shifted = (ColsShortConfig(256, 16) if itemsize == 8 or rung == 16
                       else ColsShortShiftedConfig(256, rung, {4: 4, 8: 3}[rung], exp_once=itemsize == 2))
            assert select.choose_cols(length, 3000000, dtype, H200, False) == shifted
            assert select.choose_cols(length, 3, dtype, A100, False) == shifted
        for vectorizable in (False, True):
            chosen = select.choose_cols(17, 3000000, dtype, H200, vectorizable)
            assert not isinstance(chosen, (ColsShortConfig, ColsShortVecConfig, ColsShortShiftedConfig))


def test_cols_split_config():
    """choose_cols_split (H200): 16384 x 4096 in tiles of 128-byte rows (2-byte types 32 KB tiles
    two blocks an SM, float32 16 KB tiles three), the parts whole tiles, the fewest tiles a block
    over the call with an exchange weighing a tile (run S6-7: 22 blocks a strip beat 32 and 64;
    ties: the larger part); None for float64, below one tile and beyond the resident grid's parts."""
    split = ColsSplitConfig
    assert select.choose_cols_split(16384, 4096, F16, H200) == split(256, 8, 8, False, 2, 22, 12, 768, 3)
    assert select.choose_cols_split(16384, 4096, BF16, H200) == split(256, 8, 8, False, 2, 22, 12, 768, 3)
    assert select.choose_cols_split(16384, 4096, F32, H200) == split(256, 8, 4, False, 3, 32, 12, 512, 4)
    # 2 strips of 64 columns: smaller parts, more blocks a strip, to fill the grid.
    assert select.choose_cols_split(16384, 128, F16, H200) == split(256, 8, 8, False, 2, 64, 2, 256, 1)
    assert select.choose_cols_split(256, 4096, F32, H200) == split(256, 8, 4, False, 3, 2, 128, 128, 1)
    for dtype, tile_rows, longest in [(F16, 256, 264 * 3 * 256), (BF16, 256, 264 * 3 * 256), (F32, 128, 396 * 4 * 128)]:
        assert select.choose_cols_split(tile_rows - 1, 4096, dtype, H200) is None
        assert select.choose_cols_split(longest, 64, dtype, H200).grid == (396 if dtype is F32 else 264)  # 3 / 2 blocks an SM
        assert select.choose_cols_split(longest + 1, 64, dtype, H200) is None
    assert select.choose_cols_split(16384, 4096, np.float64, H200) is None


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_cols_split_configs_fit_and_are_instantiations(dtype):
    """Every chosen split holds its column in whole parts within their tiles, keeps its grid
    resident at blocks_per_sm an SM (shared memory included), waits on at most 8 cp.async
    groups, and is an instantiation."""
    for dev in (H200, A100):
        specs = set(select.instantiations(dev))
        for length in (255, 256, 257, 511, 1031, 3001, 12289, 16384, 16385, 100000, 300000):
            for columns in (8, 72, 520, 4104, 1 << 20):
                c = select.choose_cols_split(length, columns, dtype, dev)
                if c is None:
                    continue
                assert c.blocks_per_strip * c.part >= length > (c.blocks_per_strip - 1) * c.part
                assert c.part == c.tiles_per_block * c.tile_rows and 0 <= c.smem_tiles <= 8
                assert c.grid <= c.blocks_per_sm * dev.sm_count
                assert c.strips_per_wave <= -(-columns // c.columns(dtype))
                assert c.blocks_per_sm * (c.smem_bytes + c.static_smem(dtype) + 1024) <= dev.smem_per_sm
                for log in (False, True):
                    assert c.spec(dtype, log) in specs


def test_columns_take_the_split_wherever_it_applies():
    """The column split for every vectorizable layout it holds; the two-read kernels elsewhere."""
    for n in (100, 255, 16384, 300000):
        for dtype in (F16, F32):
            for vectorizable in (False, True):
                split = select.choose_cols_split(n, 4096, dtype, H200) if vectorizable else None
                chosen = select.choose_cols(n, 4096, dtype, H200, vectorizable)
                assert chosen == split if split is not None else not isinstance(chosen, ColsSplitConfig)
    assert isinstance(select.choose_cols(16384, 4096, F16, H200, True), ColsSplitConfig)


def test_every_choice_is_an_instantiation_and_every_instantiation_a_choice():
    """instantiations(dev) is exactly what choose_rows / choose_cols / choose reach on dev: rows
    at every rung's capacity, dense rows off the vector, columns on both sides of each threshold, both layouts, every dtype."""
    columns = (1, 5, 16, 100, 127, 255, 2047, 2048, 16384, 202752, 202753, 1 << 22)
    vectors = list(range(1, 4200)) + list(range(4200, 17000, 61)) + [1 << k for k in range(13, 18)] + [49152, 60000]
    for dev in (H200, A100):
        specs = set(select.instantiations(dev))
        reached = set()
        for dtype in DTYPES:
            for log in (False, True):
                for v in vectors:
                    reached.add(select.choose_rows(v * vector_size(dtype), 3, dtype, dev).spec(dtype, log))
                for length in range(1, 257, 2):  # dense rows off the vector: the span rungs
                    problem = SoftmaxProblem(3, length, 1, length, 1, 0, np.dtype(dtype), log)
                    reached.add(select.choose(problem, dev).spec(dtype, log))
                for length in columns:
                    for vectorizable in (False, True):
                        reached.add(select.choose_cols(length, 64, dtype, dev, vectorizable).spec(dtype, log))
                for length in (3, 7):  # the shifted rungs of 4 and 8 rows
                    reached.add(select.choose_cols(length, 64, dtype, dev, False).spec(dtype, log))
        reached |= set(partials.instantiations(dev))  # cufuse.dask's split rows (test_partials.py)
        assert reached == specs, sorted(s.expression for s in specs ^ reached)
