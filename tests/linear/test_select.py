"""CPU tests of the linear default selection (``cufuse.ops.linear.select``): which variant,
tile and split count each regime gets on the H200 and the A100, the split-K arithmetic, and
that ``instantiations(dev)`` is exactly what the selection can reach."""
from __future__ import annotations

import itertools
import math

import pytest

from cufuse._core.device import A100, H200
from cufuse.ops.linear import select
from cufuse.ops.linear.dmma import DMMA_FEW_ROW_TILES, DMMA_PIPELINED_TILE, PipelinedDmmaConfig
from cufuse.ops.linear.gemv import GEMV_MAX_ROWS, GEMV_WAVES, GemvConfig, GemvTile
from cufuse.ops.linear.mma import LARGE_TILE, MEDIUM_TILE, STREAM64_TILE, STREAM_TILE, MmaConfig
from cufuse.ops.linear.pingpong import PINGPONG_128x128, PingPongConfig
from cufuse.ops.linear.simt import SIMT_LARGE, SIMT_SMALL, SimtConfig
from cufuse.ops.linear.swap_tma import SWAP_DEFAULT_TILES, SwapConfig
from cufuse.ops.linear.tiling import MAX_SPLITS, choose_k_splits, effective_splits, stream_splits, tile_count, \
    wave_efficiency
from cufuse.ops.linear.wgmma import TMA_128x128, TMA_64x64, TMA_TILE, WGMMA_128x128, WGMMA_64x64, WGMMA_STREAM_TILE, \
    WGMMA_TILE, TmaConfig, WgmmaConfig
from cufuse.ops.linear.wide import DMMA_TILE, TF32_FEW_ROW_TILES, TF32_TILE, DmmaConfig, Tf32x3Config

from .cases import BF16, F16, F32, F64

choose = select._choose  # (m, n, k, dtype, tensor_ok, dev, kmajor, tma_ok)


@pytest.mark.parametrize("m,n,k", [(8192, 8192, 8192), (16384, 4096, 4096), (4096, 16384, 4096)])
def test_large_shapes_take_the_largest_mma_tile_without_wgmma(m, n, k):
    assert choose(m, n, k, BF16, True, A100, False, False) == MmaConfig(tile=LARGE_TILE)


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n,k", [(8192, 8192, 8192), (16384, 4096, 4096), (4097, 4096, 4096)])
def test_large_shapes_take_wgmma_128x256_or_the_pingpong_kernel_on_hopper(m, n, k, kmajor):
    assert choose(m, n, k, BF16, True, H200, kmajor, False) == WgmmaConfig(tile=WGMMA_TILE)
    # tensor maps: the ping-pong TMA kernel, whose tiles give every consumer warpgroup work
    assert choose(m, n, k, BF16, True, H200, kmajor, True) == PingPongConfig(tile=PINGPONG_128x128)
    assert isinstance(choose(m, n, k, BF16, True, A100, kmajor, False), MmaConfig)


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("dev,kind", [(H200, "wgmma"), (A100, "mma")], ids=["h200", "a100"])
def test_medium_shape_takes_a_tile_that_fills_the_sms(dev, kind, kmajor):
    config = choose(512, 4096, 4096, BF16, True, dev, kmajor, False)
    assert config.kind == kind
    blocks = tile_count(512, 4096, config.tile) * config.splits
    assert wave_efficiency(blocks, dev.sm_count * config.tile.blocks_per_sm(dev)) > 0.9


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n,k", [(512, 4096, 4096), (65, 4096, 4100), (2048, 2048, 4096), (300, 264, 520)])
def test_few_tiles_take_the_wgmma_candidates_on_hopper(m, n, k, kmajor):
    # Fewer 128x256 tiles than SMs (512 x 4096^2: wgmma 128x128 363-366 TFLOP/s, mma 260-263).
    assert choose(m, n, k, BF16, True, H200, kmajor, False) == select.choose_wgmma_config(m, n, k, H200)
    assert choose(512, 4096, 4096, BF16, True, H200, kmajor, False).tile == WGMMA_128x128
    assert choose(512, 4096, 4096, BF16, True, H200, kmajor, True) == TmaConfig(tile=TMA_128x128)


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n", [(512, 4096), (2048, 2048), (524358, 8), (64, 8192), (130, 17152), (770, 4672)])
def test_wgmma_128x256_needs_a_full_wave_and_the_better_score(m, n, kmajor):
    assert not select.prefers_wgmma(m, n, H200)
    few_tiles = m <= 64 or tile_count(m, n, WGMMA_TILE) < H200.sm_count  # then choose_wgmma_config decides
    assert choose(m, n, 4096, BF16, True, H200, kmajor, False).kind == ("wgmma" if few_tiles else "mma")


def test_the_mma_128x256_tile_never_beats_wgmma_on_hopper():
    # Same shape, one block an SM each, wgmma's speed 1.5 against 1.0: wherever choose_gemm_tile
    # would pick LARGE_TILE, prefers_wgmma holds (so instantiations(H200) leaves it out).
    for m, n in itertools.product(range(65, 3000, 37), range(64, 40000, 611)):
        if select.choose_gemm_tile(m, n, H200) == LARGE_TILE and tile_count(m, n, WGMMA_TILE) >= H200.sm_count:
            assert select.prefers_wgmma(m, n, H200)


def test_wgmma_candidates_fill_one_wave_on_few_tiles():
    config = select.choose_wgmma_config(512, 4096, 4096, H200)
    assert config.tile == WGMMA_128x128 and config.splits == 1
    assert select.choose_wgmma_config(8192, 8192, 8192, H200) == WgmmaConfig(tile=WGMMA_TILE)
    # 64 x 8192^2 through the cp.async stream tile: 64x64 s6 split 2 (3.14-3.17 TB/s).
    assert select.choose_wgmma_config(64, 8192, 8192, H200) == WgmmaConfig(tile=WGMMA_64x64, splits=2)


@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (7, 33, 4096), (64, 264, 2056), (65, 4096, 4096), (300, 264, 520),
                                   (512, 4096, 4096), (4097, 256, 8192)])
def test_wgmma_candidate_splits_stay_bounded(m, n, k):
    config = select.choose_wgmma_config(m, n, k, H200)
    k_tiles = math.ceil(k / config.tile.bk)
    assert 1 <= config.splits <= min(MAX_SPLITS, k_tiles)
    assert (config.splits - 1) * math.ceil(k_tiles / config.splits) < k_tiles  # no split is empty


def test_row_major_few_tiles_split_k_through_slots_without_wgmma():
    config = choose(256, 4096, 4096, BF16, True, A100, False, False)  # 64 tiles of 128x128 < 108 SMs
    assert config == MmaConfig(tile=MEDIUM_TILE, splits=config.splits) and config.splits > 1


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("dev,m,tma_ok,expected", [
    (H200, 1, False, MmaConfig), (H200, 16, False, MmaConfig),
    (H200, 17, False, WgmmaConfig), (H200, 64, False, WgmmaConfig),
    (A100, 64, False, MmaConfig),
    (H200, 1, True, SwapConfig), (H200, 16, True, SwapConfig), (H200, 64, True, SwapConfig)],
    ids=["h200-1", "h200-16", "h200-17", "h200-64", "a100-64", "swap-1", "swap-16", "swap-64"])
def test_small_m_streams_the_weight(dev, m, tma_ok, expected, kmajor):
    config = choose(m, 8192, 8192, F16, True, dev, kmajor, tma_ok)
    assert type(config) is expected
    tile = config.tile
    if expected is MmaConfig:
        assert tile == (STREAM_TILE if m <= 16 else STREAM64_TILE)
    if expected is WgmmaConfig:
        assert tile == WGMMA_STREAM_TILE
    if expected is SwapConfig:  # x padded to 8, 16 or 64 rows; one block an SM, no split at 8192^2
        assert tile == SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64] and config.splits == 1
        return
    blocks = tile_count(m, 8192, tile) * config.splits
    slots = dev.sm_count * (1 if tile == STREAM_TILE else tile.blocks_per_sm(dev))
    assert config.splits > 1 and wave_efficiency(blocks, slots) > 0.9


@pytest.mark.parametrize("m,kmajor", [(1, True), (7, False), (8, True), (9, False), (16, True), (17, True), (64, False)])
def test_swapped_stream_takes_every_m_up_to_64_with_tensor_maps(m, kmajor):
    swap = choose(m, 8192, 8192, BF16, True, H200, kmajor, True)
    assert swap == select.choose_swap_config(m, 8192, 8192, H200)
    assert swap.tile.mx == (8 if m <= 8 else 16 if m <= 16 else 64) and swap.tile.l2_hints
    assert swap.spec(BF16, kmajor) in select.instantiations(H200)
    no_maps = choose(m, 8192, 8192, BF16, True, H200, kmajor, False)
    assert type(no_maps) is (MmaConfig if m <= 16 else WgmmaConfig)
    assert type(choose(65, 8192, 8192, BF16, True, H200, kmajor, True)) is not SwapConfig


@pytest.mark.parametrize("m,n,k", [(16, 8192, 8192), (1, 8192, 8192), (16, 4096, 4096), (9, 33, 8), (1, 4100, 4104)])
def test_swap_splits_fill_one_wave(m, n, k):
    config = select.choose_swap_config(m, n, k, H200)
    blocks = config.splits * tile_count(m, n, config.tile)
    assert blocks <= H200.sm_count * config.tile.blocks_per_sm(H200)
    assert config.splits == effective_splits(-(-k // config.tile.bk), config.splits)


@pytest.mark.parametrize("n,k", [(1, 4096), (33, 8), (4096, 4096), (8192, 8192), (65536, 4096)])
def test_stream_splits_cover_the_sms_once(n, k):
    splits = stream_splits(1, n, k, STREAM_TILE, H200)
    tiles = tile_count(1, n, STREAM_TILE)
    k_tiles = math.ceil(k / STREAM_TILE.bk)
    assert 1 <= splits <= min(MAX_SPLITS, k_tiles)
    assert tiles * splits >= 0.9 * H200.sm_count or splits == min(MAX_SPLITS, k_tiles)
    assert splits == 1 or tiles * (splits - 1) < 0.9 * H200.sm_count  # the fewest that do


@pytest.mark.parametrize("k", [8, 64, 65 * 64, 4096, 8192 + 8])
@pytest.mark.parametrize("n", [1, 33, 4096])
def test_splits_leave_no_split_empty(k, n):
    splits = choose_k_splits(1, n, k, STREAM_TILE, H200)
    k_tiles = math.ceil(k / STREAM_TILE.bk)
    assert 1 <= splits <= MAX_SPLITS and (splits - 1) * math.ceil(k_tiles / splits) < k_tiles
    assert choose_k_splits(1, 1, 4096, STREAM_TILE, H200) >= 16  # a single column spreads K over many blocks


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n", [(1, 8192), (16, 8192), (64, 8192), (65, 4096), (300, 264), (4097, 256), (200, 1)])
def test_split_k_workspace_stays_bounded(m, n, kmajor):
    config = choose(m, n, 4096, BF16, True, H200, kmajor, False)
    if config.splits > 1:  # at most two waves of block slots' tiles
        slots = H200.sm_count * config.tile.blocks_per_sm(H200)
        assert tile_count(m, n, config.tile) * config.splits <= 2 * slots


def test_wave_efficiency_counts_the_last_wave():
    assert wave_efficiency(132, 132) == 1.0
    assert wave_efficiency(133, 132) == pytest.approx(133 / 264)
    assert wave_efficiency(0, 132) == 0.0


def test_simt_tiles():
    assert choose(4096, 4096, 4096, F32, False, H200, False, False) == SimtConfig(tile=SIMT_LARGE)
    assert choose(64, 64, 4096, F32, False, H200, False, False) == SimtConfig(tile=SIMT_SMALL)
    assert choose(4096, 4096, 4096, F64, False, H200, False, False) == SimtConfig(tile=SIMT_SMALL)
    assert choose(4096, 4096, 4100, F16, False, H200, False, False) == SimtConfig(tile=SIMT_SMALL)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
def test_float32_and_float64_few_rows_stream_the_weight(dtype, kmajor):
    """float32 with M <= 4 and float64 with M = 1 take the gemv kernel with the fewest rows that
    cover M; row-major float32 splits K to fill the SMs GEMV_WAVES times, float64 never."""
    largest = GEMV_MAX_ROWS[dtype]
    assert largest == (4 if dtype == F32 else 1)
    for m, rows in ((m, rows) for m, rows in ((1, 1), (2, 4), (4, 4)) if m <= largest):
        config = choose(m, 8192, 8192, dtype, True, H200, kmajor, False)
        assert type(config) is GemvConfig and config.tile == GemvTile(rows=rows)
        col_blocks = -(-8192 // config.tile.columns_per_block(kmajor, dtype.itemsize))
        if kmajor or dtype == F64:
            assert config.splits == 1
        else:
            assert col_blocks * config.splits >= GEMV_WAVES * H200.sm_count > col_blocks * (config.splits - 1)
    assert choose(4 if dtype == F32 else 1, 8192, 300, dtype, True, H200, kmajor, False).splits == 1  # 256 k rows a split
    assert type(choose(largest + 1, 8192, 8192, dtype, True, H200, kmajor, False)) in (Tf32x3Config, PipelinedDmmaConfig)
    assert type(choose(1, 8192, 8192, dtype, False, H200, kmajor, False)) is SimtConfig


@pytest.mark.parametrize("rows,kmajor,itemsize,columns", [
    (1, True, 4, 16), (4, True, 4, 16), (1, False, 4, 128), (4, False, 4, 128),
    (1, True, 8, 16), (1, False, 8, 64)])
def test_gemv_columns_per_block(rows, kmajor, itemsize, columns):
    # kernels/linear/gemv.cu: 2 warp groups x gemv_kmajor_warp_cols (64 accumulator words a
    # thread, 1 to 8 columns) K-major; 32 lanes x 16 bytes of columns row-major.
    assert GemvTile(rows=rows).columns_per_block(kmajor, itemsize) == columns


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_wide_tensor_core_selection(dev, dtype):
    if dtype == F32:
        make, tile, few_rows = Tf32x3Config, TF32_TILE, TF32_FEW_ROW_TILES
    elif dev is H200:
        make, tile, few_rows = PipelinedDmmaConfig, DMMA_PIPELINED_TILE, DMMA_FEW_ROW_TILES
    else:
        make, tile, few_rows = DmmaConfig, DMMA_TILE, ()
    specs = set(select.instantiations(dev))
    for m, n, k in ((1, 8, 8), (65, 4100, 4100), (512, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192),
                    (7, 4096, 4100), (33, 8192, 8192), (64, 1000, 1000)):
        config = select.choose_wide_config(m, n, k, dtype, True, dev)
        expected = next((t for t in few_rows if t.bm >= m), tile)
        assert config == make(tile=expected, splits=choose_k_splits(m, n, k, expected, dev))
        assert type(select.choose_wide_config(m, n, k, dtype, False, dev)) is SimtConfig  # operands it cannot load
        assert {config.spec(dtype, kmajor) for kmajor in (True, False)} <= specs


def test_few_row_wide_tiles_split_k_to_fill_the_sms():
    # 64 x 8192^2 on the 128-row tiles: 64 float32 tiles (128 float64 ones) on 132 SMs, half of
    # each tile padding (0.51 / 1.34 TB/s, CuPy unfused 1.3 / 3.0).
    for dtype, m in itertools.product((F32, F64), (5, 16, 17, 32, 33, 64)):
        config = choose(m, 8192, 8192, dtype, True, H200, False, False)
        if m <= GEMV_MAX_ROWS[dtype]:
            assert type(config) is GemvConfig
            continue
        tile = config.tile
        assert tile in (TF32_FEW_ROW_TILES if dtype == F32 else DMMA_FEW_ROW_TILES) and m <= tile.bm < 2 * max(m, 16)
        blocks = tile_count(m, 8192, tile) * config.splits
        assert config.splits > 1 and H200.sm_count <= blocks <= H200.sm_count * tile.blocks_per_sm(H200)
    # Full waves of 128-row tiles stay unsplit.
    assert choose(4096, 4096, 4096, F32, True, H200, False, False) == Tf32x3Config(tile=TF32_TILE)
    assert choose(4096, 4096, 4096, F64, True, H200, False, False) == PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE)
    assert choose(8192, 8192, 4096, F64, True, A100, False, False) == DmmaConfig(tile=DMMA_TILE)


def _reached_specs(dev):
    """The kernels the selections (fused_linear's, the gated form's) pick over a grid that
    crosses every rule's boundaries."""
    ms = (1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 100, 128, 130, 200, 385, 512, 770, 1000, 4096, 4097, 8192)
    ns = (1, 8, 33, 64, 264, 520, 1000, 4096, 4672, 8192, 8512, 16384, 16960, 17152, 20000)
    specs = set()
    for dtype, m, n, tensor_ok, kmajor in itertools.product((F16, BF16, F32, F64), ms, ns, (True, False),
                                                            (True, False)):
        for tma_ok in ((False, True) if tensor_ok and dev.has_wgmma and dtype.itemsize == 2 else (False,)):
            specs.add(choose(m, n, 4096, dtype, tensor_ok, dev, kmajor, tma_ok).spec(dtype, kmajor))
            gated = select._choose_gated(m, 2 * n, 4096, dtype, tensor_ok and dtype.itemsize == 2, tma_ok, dev)
            specs.add(gated.spec(dtype, kmajor))
    return specs


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_instantiations_are_exactly_the_reachable_kernels(dev):
    listed = select.instantiations(dev)
    assert len(listed) == len(set(listed))
    assert _reached_specs(dev) == set(listed)


def test_tma_time_counts_waves_k_tiles_and_splits():
    from cufuse.ops.linear.tiling import tma_time

    a, b, c, d = TMA_TILE.cost
    # 4096 x 11008: 32 x 43 = 1376 tiles of 128x256, 11 waves of 132 SMs, 64 k tiles each
    assert tma_time(4096, 11008, 4096, TMA_TILE, 1, H200) == pytest.approx(11 * (64 * a + b))
    # 128 x 11008 split 3: 43 x 3 = 129 blocks in one wave of 22 k tiles, and the split terms
    assert tma_time(128, 11008, 4096, TMA_TILE, 3, H200) == pytest.approx(22 * a + b + c + 3 * d)
    # two blocks an SM: 264 slots for the 64x64 tile
    t = TMA_64x64
    assert tma_time(64 * 2, 64 * 132, 64, t, 1, H200) == pytest.approx(t.cost[0] + t.cost[1])


@pytest.mark.parametrize("m,n,k,tile,splits", [
    (128, 11008, 4096, TMA_128x128, 1),  # 34 us; the wave-fill rules' 128x128 split 3 46 us
    (256, 11008, 4096, TMA_TILE, 1),  # 55 us; 128x256 split 3 67 us
])
def test_tma_model_picks_the_configs_the_sweep_measured_fastest(m, n, k, tile, splits):
    assert choose(m, n, k, BF16, True, H200, True, True) == TmaConfig(tile=tile, splits=splits)


@pytest.mark.parametrize("m,n,k", [(4096, 11008, 4096), (8192, 8192, 8192)])
def test_many_tiles_take_the_pingpong_kernel_over_the_cooperative_128x256(m, n, k):
    # The sweep's fastest cooperative config there was 128x256 unsplit; the ping-pong model beats it.
    from cufuse.ops.linear.pingpong import pingpong_time
    from cufuse.ops.linear.tiling import tma_time

    assert pingpong_time(m, n, k, PINGPONG_128x128, H200) < tma_time(m, n, k, TMA_TILE, 1, H200)
    assert choose(m, n, k, BF16, True, H200, True, True) == PingPongConfig(tile=PINGPONG_128x128)


def test_tma_model_splits_k_where_few_tiles_leave_the_sms_idle():
    config = choose(128, 1024, 16384, BF16, True, H200, True, True)  # 8 tiles of 128x128, 256 k tiles
    assert type(config) is TmaConfig and config.splits > 4
    blocks = tile_count(128, 1024, config.tile) * config.splits
    assert blocks <= H200.sm_count * config.tile.blocks_per_sm(H200)  # one wave
