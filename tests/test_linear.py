"""fused_linear_relu: CPU tests of the configuration rules, GPU tests of every dispatch branch.

The GPU oracle is the float64 product computed by CuPy (the same arithmetic as
``cufuse.reference.fused_linear_relu``, which the small cases also check directly), so the
large shapes stay fast. Tolerance per element, relative to the problem:
``2 ulp(dtype) * |ref| + 8 * eps(accumulator) * K * rms(x) * rms(w)``; the second term is
about 100x below TF32's error at K = 4096, so a float32 case run on TF32 would fail.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from tests.conftest import poisoned
from cufuse import reference
from cufuse._configs import A100, H200, current_device_info
from cufuse._configs import linear as cfg
from cufuse._dtypes import BFLOAT16
from cufuse.linear import fused_linear_relu

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


# ----------------------------------------------------------------------------- CPU: configs


@pytest.mark.parametrize("m,n,k", [(8192, 8192, 8192), (16384, 4096, 4096), (4096, 16384, 4096)])
def test_large_shapes_take_the_largest_tile(m, n, k):
    assert cfg.choose_config(m, n, k, BFLOAT16, True, A100) == cfg.LinearConfig("mma", cfg.LARGE_TILE)


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("dev,kind", [(H200, "wgmma"), (A100, "mma")], ids=["h200", "a100"])
def test_medium_shape_takes_a_tile_that_fills_the_sms(dev, kind, kmajor):
    config = cfg.choose_config(512, 4096, 4096, BFLOAT16, True, dev, kmajor)
    assert config.kind == kind
    blocks = cfg.tile_count(512, 4096, config.tile) * config.splits
    assert cfg.wave_efficiency(blocks, dev.sm_count * config.tile.blocks_per_sm(dev)) > 0.9


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n,k", [(512, 4096, 4096), (65, 4096, 4100), (2048, 2048, 4096), (300, 264, 520)])
def test_few_tiles_take_the_wgmma_candidates_on_hopper(m, n, k, kmajor):
    # Fewer 128x256 tiles than SMs (H200, 512 x 4096^2: wgmma 128x128 363-366 TFLOP/s
    # against the mma kernel's 260-263).
    assert cfg.choose_config(m, n, k, BFLOAT16, True, H200, kmajor) == cfg.choose_wgmma_config(m, n, k, H200)
    assert cfg.choose_config(512, 4096, 4096, BFLOAT16, True, H200, kmajor).tile == cfg.WGMMA_128x128


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n,k", [(8192, 8192, 8192), (16384, 4096, 4096), (4097, 4096, 4096)])
def test_large_shapes_take_wgmma_on_hopper_only(m, n, k, kmajor):
    assert cfg.choose_config(m, n, k, BFLOAT16, True, H200, kmajor) == cfg.LinearConfig("wgmma", cfg.WGMMA_TILE)
    assert cfg.choose_config(m, n, k, BFLOAT16, True, A100, kmajor).kind == "mma"


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n", [(512, 4096), (2048, 2048), (524358, 8), (64, 8192)])
def test_wgmma_128x256_needs_a_full_wave_and_the_better_score(m, n, kmajor):
    assert not cfg.prefers_wgmma(m, n, H200)
    few_tiles = cfg.tile_count(m, n, cfg.WGMMA_TILE) < H200.sm_count  # then choose_wgmma_config decides
    assert cfg.choose_config(m, n, 4096, BFLOAT16, True, H200, kmajor).kind == ("wgmma" if few_tiles else "mma")


def test_wgmma_candidates_fill_one_wave_on_few_tiles():
    # 512 x 4096^2: 128x256 would leave half the SMs idle; a 128-tile choice fills one wave.
    config = cfg.choose_wgmma_config(512, 4096, 4096, H200)
    assert config.tile == cfg.WGMMA_128x128 and config.splits == 1
    assert cfg.choose_wgmma_config(8192, 8192, 8192, H200) == cfg.LinearConfig("wgmma", cfg.WGMMA_TILE)


@pytest.mark.parametrize("m", [1, 16, 64])
def test_wgmma_streams_small_m_with_split_k_through_slots(m):
    config = cfg.choose_wgmma_config(m, 8192, 8192, H200)
    assert config.tile == cfg.WGMMA_STREAM_TILE and config.tile.bm == 64 and config.reduction == "slots"
    blocks = cfg.tile_count(m, 8192, config.tile) * config.splits
    slots = H200.sm_count * config.tile.blocks_per_sm(H200)
    assert config.splits > 1 and cfg.wave_efficiency(blocks, slots) > 0.9


def test_m64_streams_through_64x64_wgmma_tiles_split_in_two():
    # H200, 64 x 8192^2 bf16: 3.14-3.17 TB/s eager (64x64s6 split 2), the best variant measured.
    assert cfg.choose_wgmma_config(64, 8192, 8192, H200) == cfg.LinearConfig("wgmma", cfg.WGMMA_64x64, 2,
                                                                              reduction="slots")


@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (7, 33, 4096), (64, 264, 2056), (65, 4096, 4096), (300, 264, 520),
                                   (512, 4096, 4096), (4097, 256, 8192)])
def test_wgmma_candidate_splits_stay_bounded(m, n, k):
    config = cfg.choose_wgmma_config(m, n, k, H200)
    k_tiles = math.ceil(k / config.tile.bk)
    assert 1 <= config.splits <= min(cfg.MAX_SPLITS, k_tiles)
    assert (config.splits - 1) * math.ceil(k_tiles / config.splits) < k_tiles  # no split is empty
    if config.splits > 1:
        slots = H200.sm_count * config.tile.blocks_per_sm(H200)
        assert config.reduction == "slots"
        assert config.workspace_floats(m, n, config.splits) <= 2 * slots * config.tile.bm * config.tile.bn


def test_row_major_few_tiles_split_k_through_slots():
    # Without wgmma (A100: 64 tiles of 128x128 < 108 SMs).
    config = cfg.choose_config(256, 4096, 4096, BFLOAT16, True, A100, False)
    assert config.kind == "mma" and config.tile == cfg.MEDIUM_TILE and config.splits > 1
    assert config.reduction == "slots"


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("dev,m,kind,tile,reduction", [
    (H200, 1, "mma", cfg.STREAM_TILE, "atomic"), (H200, 16, "mma", cfg.STREAM_TILE, "slots"),
    (H200, 17, "wgmma", cfg.WGMMA_STREAM_TILE, "slots"), (H200, 64, "wgmma", cfg.WGMMA_STREAM_TILE, "slots"),
    (A100, 64, "mma", cfg.STREAM64_TILE, "slots")],
    ids=["h200-1", "h200-16", "h200-17", "h200-64", "a100-64"])
def test_small_m_streams_the_weight_with_split_k(dev, m, kind, tile, reduction, kmajor):
    config = cfg.choose_config(m, 8192, 8192, F16, True, dev, kmajor)
    assert config.kind == kind and config.tile == tile and config.reduction == reduction
    blocks = cfg.tile_count(m, 8192, tile) * config.splits
    assert config.splits > 1
    # The streaming tile covers every SM once (more blocks only add reduction traffic);
    # the 64-row tiles fill every block slot.
    slots = dev.sm_count * (1 if tile == cfg.STREAM_TILE else tile.blocks_per_sm(dev))
    assert cfg.wave_efficiency(blocks, slots) > 0.9


@pytest.mark.parametrize("n,k", [(1, 4096), (33, 8), (4096, 4096), (8192, 8192), (65536, 4096)])
def test_stream_splits_cover_the_sms_once(n, k):
    splits = cfg.stream_splits(1, n, k, cfg.STREAM_TILE, H200)
    tiles = cfg.tile_count(1, n, cfg.STREAM_TILE)
    k_tiles = math.ceil(k / cfg.STREAM_TILE.bk)
    assert 1 <= splits <= min(cfg.MAX_SPLITS, k_tiles)
    assert tiles * splits >= 0.9 * H200.sm_count or splits == min(cfg.MAX_SPLITS, k_tiles)
    assert splits == 1 or tiles * (splits - 1) < 0.9 * H200.sm_count  # the fewest that do


@pytest.mark.parametrize("k", [8, 64, 65 * 64, 4096, 8192 + 8])
@pytest.mark.parametrize("n", [1, 33, 4096])
def test_splits_leave_no_split_empty(k, n):
    splits = cfg.choose_splits(1, n, k, cfg.STREAM_TILE, H200)
    k_tiles = math.ceil(k / cfg.STREAM_TILE.bk)
    per_split = math.ceil(k_tiles / splits)
    assert 1 <= splits <= cfg.MAX_SPLITS
    assert (splits - 1) * per_split < k_tiles  # the last split has work


@pytest.mark.parametrize("kmajor", [True, False])
def test_few_tiles_split_k_and_many_tiles_do_not(kmajor):
    assert cfg.choose_config(65, 4096, 4096, BFLOAT16, True, H200, kmajor).splits > 1
    assert cfg.choose_config(512, 4096, 4096, BFLOAT16, True, H200, kmajor).splits == 1
    assert cfg.choose_config(8192, 8192, 8192, BFLOAT16, True, H200, kmajor).splits == 1


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n", [(1, 8192), (16, 8192), (64, 8192), (65, 4096), (300, 264), (4097, 256), (200, 1)])
def test_split_k_workspace_stays_bounded(m, n, kmajor):
    config = cfg.choose_config(m, n, 4096, BFLOAT16, True, H200, kmajor)
    if config.splits > 1:  # at most two waves of block slots' tiles
        slots = H200.sm_count * config.tile.blocks_per_sm(H200)
        assert config.workspace_floats(m, n, config.splits) <= 2 * slots * config.tile.bm * config.tile.bn


def test_single_column_spreads_k_over_many_blocks():
    assert cfg.choose_splits(1, 1, 4096, cfg.STREAM_TILE, H200) >= 16


def test_wave_efficiency_counts_the_last_wave():
    assert cfg.wave_efficiency(132, 132) == 1.0
    assert cfg.wave_efficiency(133, 132) == pytest.approx(133 / 264)
    assert cfg.wave_efficiency(0, 132) == 0.0


def test_simt_tiles():
    assert cfg.choose_config(4096, 4096, 4096, F32, False, H200).tile == cfg.SIMT_LARGE
    assert cfg.choose_config(64, 64, 4096, F32, False, H200).tile == cfg.SIMT_SMALL
    assert cfg.choose_config(4096, 4096, 4096, F64, False, H200).tile == cfg.SIMT_SMALL
    assert cfg.choose_config(4096, 4096, 4100, F16, False, H200).kind == "simt"


def _eligible(dtype, k, n, w_strides, w_offset=0, x_row_stride=None, x_ptr=0):
    itemsize = np.dtype(dtype).itemsize
    return cfg.mma_eligible(dtype, k, n, x_ptr, x_row_stride or k, 1, 8, 256 + w_offset * itemsize, *w_strides)


def test_mma_eligibility_and_layout():
    assert _eligible(F16, 64, 40, (1, 64)) is True  # transposed (N, K) array: K-major
    assert _eligible(F16, 64, 40, (40, 1)) is False  # row-major (K, N): N-major
    assert _eligible(F16, 64, 33, (1, 64)) is True  # K-major: N may be ragged
    assert _eligible(F16, 64, 33, (33, 1)) is None  # N-major rows not 16-byte multiples
    assert _eligible(F16, 64, 40, (43, 1), w_offset=1) is None  # slice starting at an odd column
    assert _eligible(F16, 33, 40, (40, 1)) is None  # K not a multiple of 8
    assert _eligible(F16, 64, 40, (80, 2)) is None  # neither axis contiguous
    assert _eligible(F16, 64, 40, (40, 1), x_ptr=2) is None  # x misaligned
    assert _eligible(F16, 64, 40, (40, 1), x_row_stride=68) is None  # x rows misaligned
    assert _eligible(F64, 64, 40, (40, 1)) is False  # float64: 2-double chunks
    assert _eligible(F64, 63, 40, (40, 1)) is None


def test_float32_eligibility_uses_4_float_chunks():
    assert _eligible(F32, 64, 40, (1, 64)) is True  # transposed (N, K) array
    assert _eligible(F32, 64, 36, (36, 1)) is False  # row-major (K, N), N % 4 == 0
    assert _eligible(F32, 64, 34, (34, 1)) is None  # row-major rows not 16-byte multiples
    assert _eligible(F32, 68, 40, (1, 68)) is True  # K % 4 == 0 suffices (16-bit needs K % 8)
    assert _eligible(F32, 66, 40, (1, 66)) is None
    assert _eligible(F32, 64, 40, (43, 1), w_offset=1) is None  # slice starting at an odd column
    assert _eligible(F32, 64, 40, (40, 1), x_row_stride=66) is None


@pytest.mark.parametrize("dtype,kind", [(F32, "tf32x3"), (F64, "dmma")])
def test_wide_types_default_to_tensor_cores_where_operands_allow(dtype, kind):
    # Measured on the H200 (4096^3): 3xTF32 61.6 TFLOP/s against SIMT 37.9 and CuPy unfused
    # 48.4; DMMA 45.0 against SIMT 15.5, pipelined DMMA 57.0 (CuPy unfused 56.6).
    assert cfg.choose_config(4096, 4096, 4096, dtype, True, H200).kind == kind
    assert cfg.choose_config(4096, 4096, 4096, dtype, False, H200).kind == "simt"
    assert cfg.choose_wide_config(4096, 4096, 4096, dtype, True, H200, tensor_cores=False).kind == "simt"


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
def test_wide_small_m_streams_the_weight(dtype, kmajor, monkeypatch):
    """float32 with M <= 4 and float64 with M = 1 take the gemv kernel with the fewest rows
    that cover M (more rows run on the few-row tensor-core tiles); row-major float32 splits K to
    fill the SMs GEMV_WAVES times, float64 never splits (its sums would meet in a float32 workspace)."""
    cfg.choose_config.cache_clear()
    try:
        specs = set(cfg.instantiations(H200))
        largest = cfg.GEMV_WIDE_MAX_M[np.dtype(dtype)]
        for m, rows in ((m, rows) for m, rows in ((1, 1), (2, 4), (4, 4), (5, 16), (16, 16)) if m <= largest):
            config = cfg.choose_config(m, 8192, 8192, dtype, True, H200, kmajor)
            assert config.kind == "gemv" and config.tile == cfg.GemvTile(rows)
            assert cfg.kernel_spec(config, dtype, kmajor) in specs
            itemsize = np.dtype(dtype).itemsize
            col_blocks = -(-8192 // config.tile.columns_per_block(kmajor, itemsize))
            if kmajor or dtype == F64:
                assert config.splits == 1
            else:
                assert col_blocks * config.splits >= cfg.GEMV_WAVES * H200.sm_count > col_blocks * (config.splits - 1)
        assert cfg.choose_config(4, 8192, 300, F32, True, H200, kmajor).splits == 1  # 256 k rows a split at least
        assert cfg.choose_config(largest + 1, 8192, 8192, dtype, True, H200, kmajor).kind in ("tf32x3", "dmma")
        assert largest == (4 if dtype == F32 else 1)
        assert cfg.choose_config(1, 8192, 8192, dtype, False, H200, kmajor).kind == "simt"
        monkeypatch.setattr(cfg, "GEMV_WIDE", False)
        cfg.choose_config.cache_clear()
        assert cfg.choose_config(1, 8192, 8192, dtype, True, H200, kmajor).kind in ("tf32x3", "dmma")
    finally:
        cfg.choose_config.cache_clear()


@pytest.mark.parametrize("rows,kmajor,itemsize,columns", [
    (1, True, 2, 16), (1, False, 2, 256),  # the 16-bit kernel's 8 columns a warp / 8 a lane
    (1, True, 4, 16), (4, True, 4, 16), (16, True, 4, 8), (16, False, 4, 128),
    (1, True, 8, 16), (4, True, 8, 16), (16, True, 8, 4), (16, False, 8, 64)])
def test_gemv_columns_per_block(rows, kmajor, itemsize, columns):
    # kernels/linear_relu.cu: 2 warp groups x gemv_kmajor_warp_cols (64 accumulator words a
    # thread, 1 to 8 columns) K-major; 32 lanes x 16 bytes of columns row-major.
    assert cfg.GemvTile(rows).columns_per_block(kmajor, itemsize) == columns


@pytest.mark.parametrize("tile", cfg.GEMV_WIDE_TILES, ids=lambda t: f"rows{t.rows}")
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
def test_gemv_wide_tiles_compile_without_spills(tile, dtype, kmajor):
    from cufuse._loader import compile_spec, resource_usage

    spec = cfg.kernel_spec(cfg.LinearConfig("gemv", tile), dtype, kmajor)
    assert spec in cfg.instantiations(H200)
    assert resource_usage(compile_spec(spec, "sm_90a").log)["spill_stores"] == 0


@pytest.mark.parametrize("dtype,kind,tile", [(F32, "tf32x3", cfg.TF32_TILE), (F64, "dmma", cfg.DMMA_TILE)])
@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_wide_tensor_core_selection(dev, dtype, kind, tile):
    if dtype == F64 and dev is H200 and cfg.DMMA_PIPELINED:
        tile = cfg.DMMA_PIPELINED_TILE
    specs = set(cfg.instantiations(dev))
    few_rows = cfg.WIDE_FEW_ROW_TILES[dtype] if dtype == F32 or dev is H200 else ()
    for m, n, k in ((1, 8, 8), (65, 4100, 4100), (512, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192),
                    (7, 4096, 4100), (33, 8192, 8192), (64, 1000, 1000)):
        config = cfg.choose_wide_config(m, n, k, dtype, True, dev, tensor_cores=True)
        expected = next((t for t in few_rows if t.bm >= m), tile)
        assert config.kind == kind and config.tile == expected and cfg.WIDE_KINDS[kind] == dtype
        assert config.reduction == ("slots" if config.splits > 1 else "atomic")
        assert config.splits == cfg.choose_splits(m, n, k, expected, dev)
        assert cfg.choose_wide_config(m, n, k, dtype, False, dev, tensor_cores=True).kind == "simt"  # operands it cannot load
        for kmajor in (True, False):
            assert cfg.kernel_spec(config, dtype, kmajor) in specs


def test_few_row_wide_tiles_split_k_to_fill_the_sms(monkeypatch):
    # 64 x 8192^2 on the 128-row tiles: 64 float32 tiles (128 float64 ones) on 132 SMs, half of
    # each tile padding (run S8-9: 0.51 / 1.34 TB/s, CuPy unfused 1.3 / 3.0).
    for dtype in (F32, F64):
        for m in (5, 16, 17, 32, 33, 64):
            config = cfg.choose_config(m, 8192, 8192, dtype, True, H200)
            if m <= cfg.GEMV_WIDE_MAX_M[dtype]:
                assert config.kind == "gemv"
                continue
            tile = config.tile
            assert tile in cfg.WIDE_FEW_ROW_TILES[dtype] and m <= tile.bm < 2 * max(m, 16)
            assert config.splits > 1 and config.reduction == "slots"
            blocks = cfg.tile_count(m, 8192, tile) * config.splits
            assert blocks >= H200.sm_count  # every SM streams part of the weight
            assert blocks <= H200.sm_count * tile.blocks_per_sm(H200)  # in one wave
    # Full waves of 128-row tiles stay unsplit (the shapes measured at 1.27x / 1.01x CuPy).
    assert cfg.choose_config(4096, 4096, 4096, F32, True, H200) == cfg.LinearConfig("tf32x3", cfg.TF32_TILE)
    assert cfg.choose_config(4096, 4096, 4096, F64, True, H200) == DMMA_PIPE
    # Off: every M on the 128-row tiles, unsplit.
    monkeypatch.setattr(cfg, "WIDE_FEW_ROWS", False)
    assert cfg.choose_wide_config(64, 8192, 8192, F32, True, H200) == cfg.LinearConfig("tf32x3", cfg.TF32_TILE)
    assert cfg.choose_wide_config(64, 8192, 8192, F64, True, H200) == DMMA_PIPE


def test_split_workspace_holds_float64_slots():
    config = cfg.LinearConfig("dmma", cfg.DMMA_M16_TILE, 3, reduction="slots")
    tiles = cfg.tile_count(16, 8192, cfg.DMMA_M16_TILE)
    assert config.workspace_floats(16, 8192, 3) == 2 * tiles * 3 * 16 * 64  # two float32 cells a double
    config = cfg.LinearConfig("tf32x3", cfg.TF32_M32_TILE, 4, reduction="slots")
    assert config.workspace_floats(32, 8192, 4) == cfg.tile_count(32, 8192, cfg.TF32_M32_TILE) * 4 * 32 * 128


WIDE_TILES = [(t, F32) for t in cfg.TF32_TILES] + [(cfg.DMMA_TILE, F64), (cfg.DMMA_PIPELINED_TILE, F64)]
FEW_ROW_TILES = [(t, dtype) for dtype, tiles in cfg.WIDE_FEW_ROW_TILES.items() for t in tiles]
# linear_relu_dmma (sm_90): the candidate default (DMMA m16n8k8) and its m16n8k16 form (the sweep's).
DMMA_PIPELINED_K16_TILE = dataclasses.replace(cfg.DMMA_PIPELINED_TILE, dmma_k=16)
DMMA_PIPE = cfg.LinearConfig("dmma", cfg.DMMA_PIPELINED_TILE)
DMMA_PIPE_K16 = cfg.LinearConfig("dmma", DMMA_PIPELINED_K16_TILE)


@pytest.mark.parametrize("tile,dtype", WIDE_TILES, ids=lambda p: getattr(p, "name", None) or f"{p.bm}x{p.bn}x{p.itemsize}")
@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_wide_tiles_fit_shared_memory(tile, dtype, dev):
    assert tile.itemsize == dtype.itemsize
    assert tile.smem_bytes() <= dev.max_smem_per_block
    assert tile.blocks_per_sm(dev) == tile.max_blocks_per_sm  # 8 warps per SM


@pytest.mark.parametrize("tile,dtype", FEW_ROW_TILES, ids=lambda p: getattr(p, "name", None) or f"{p.bm}x{p.bn}x{p.itemsize}")
def test_few_row_tiles_fit_shared_memory(tile, dtype):
    assert tile.itemsize == dtype.itemsize
    assert tile.smem_bytes() <= H200.max_smem_per_block
    assert 2 <= tile.blocks_per_sm(H200) <= tile.max_blocks_per_sm  # the kernels' launch bounds ask for 2


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("tile,dtype", WIDE_TILES + FEW_ROW_TILES + [(DMMA_PIPELINED_K16_TILE, F64)],
                         ids=lambda p: getattr(p, "name", None) or f"{p.bm}x{p.bn}x{p.itemsize}k{p.dmma_k}")
def test_wide_tiles_fit_their_register_budget(tile, dtype, kmajor):
    from cufuse._loader import compile_spec, resource_usage

    kind = "tf32x3" if dtype == F32 else "dmma"
    usage = resource_usage(compile_spec(cfg.kernel_spec(cfg.LinearConfig(kind, tile), dtype, kmajor), "sm_90a").log)
    assert usage["spill_stores"] == 0
    assert tile.max_blocks_per_sm * tile.threads * usage["registers"] <= 65536


def test_pipelined_dmma_is_a_one_line_switch_on_compute_capability_9(monkeypatch):
    # On since run S4-4 (the float64 default on compute capability 9.0 only: DMMA m16n8k8 /
    # m16n8k16 .f64 do not exist before); off, DMMA_TILE everywhere.
    assert cfg.choose_wide_config(4096, 4096, 4096, F64, True, H200) == DMMA_PIPE
    monkeypatch.setattr(cfg, "DMMA_PIPELINED", False)
    assert cfg.choose_wide_config(4096, 4096, 4096, F64, True, H200).tile == cfg.DMMA_TILE
    monkeypatch.setattr(cfg, "DMMA_PIPELINED", True)
    assert cfg.choose_wide_config(4096, 4096, 4096, F64, True, A100).tile == cfg.DMMA_TILE
    assert cfg.choose_wide_config(4096, 4096, 4096, F32, True, H200).tile == cfg.TF32_TILE
    assert cfg.choose_wide_config(4096, 4096, 4096, F64, False, H200).kind == "simt"
    spec = cfg.kernel_spec(DMMA_PIPE, F64, False)
    assert spec.name == "linear_relu_dmma" and spec.min_cc == 90
    assert spec in set(cfg.instantiations(H200)) and spec not in set(cfg.instantiations(A100))


@pytest.mark.parametrize("config", [DMMA_PIPE, DMMA_PIPE_K16], ids=lambda c: f"k{c.tile.dmma_k}")
def test_pipelined_dmma_tile_shape(config):
    t = config.tile
    # BK 16 (one 128-byte row of x per k tile), unpadded swizzled rows, cuBLAS's 4 warps of
    # 64x32 two blocks per SM; the kernel's cp.async passes need whole 128-byte rows, 4 rows apart.
    assert (t.bk, t.itemsize, t.threads, t.max_blocks_per_sm) == (16, 8, 128, 2)
    assert t.smem_bytes() == t.stages * (t.bm + t.bn) * 16 * 8 == 73728
    assert t.blocks_per_sm(H200) == 2
    assert (t.threads // (t.bk // 2)) % 4 == 0 and (t.threads // (t.bn // 2)) % 4 == 0
    assert cfg.kernel_spec(config, F64, True).template_args == (128, 64, 2, 2, 3, t.dmma_k, True)


def _chosen_specs(dev):
    specs = set()
    for dtype in (F16, BFLOAT16, F32, F64):
        for m in (1, 7, 16, 17, 64, 65, 512, 4097, 8192):
            for n in (1, 8, 33, 4096, 16384):
                for mma_ok in (True, False):
                    for kmajor in (True, False):
                        config = cfg.choose_config(m, n, 4096, dtype, mma_ok, dev, kmajor)
                        specs.add(cfg.kernel_spec(config, dtype, kmajor))
                        if mma_ok and cfg.wgmma_supported(dev) and dtype in (F16, BFLOAT16):
                            specs.add(cfg.kernel_spec(cfg.choose_wgmma_config(m, n, 4096, dev), dtype, kmajor))
    return specs


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_instantiations_cover_every_choice(dev):
    assert _chosen_specs(dev) <= set(cfg.instantiations(dev))


@pytest.mark.parametrize("tile", cfg.MMA_TILES)
@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_mma_tiles_fit_shared_memory(tile, dev):
    assert tile.smem_bytes() <= dev.max_smem_per_block
    assert tile.blocks_per_sm(dev) >= 1


def _wgmma_id(t):
    return f"{t.bm}x{t.bn}k{t.bk}s{t.stages}p{t.pending}x{t.max_blocks_per_sm}"


@pytest.mark.parametrize("tile", cfg.WGMMA_TILES, ids=_wgmma_id)
def test_wgmma_tiles_fit_shared_memory(tile):
    assert tile.smem_bytes() <= H200.max_smem_per_block
    assert tile.blocks_per_sm(H200) == tile.max_blocks_per_sm
    assert tile.stages - 1 - tile.pending >= 1  # the kernel loads at least one tile ahead


@pytest.mark.parametrize("tile", cfg.TMA_TILES + cfg.TMA_STREAM_TILES, ids=_wgmma_id)
def test_tma_tiles_add_a_producer_warp_and_their_barriers(tile):
    wgmma_tile = cfg.WgmmaTile(tile.bm, tile.bn, tile.stages, tile.max_blocks_per_sm)
    assert tile.threads == wgmma_tile.threads + 32
    assert tile.smem_bytes() == wgmma_tile.smem_bytes() + 16 * tile.stages
    assert tile.smem_bytes() <= H200.max_smem_per_block
    assert tile.blocks_per_sm(H200) == tile.max_blocks_per_sm


@pytest.mark.parametrize("tile", cfg.WGMMA_TILES, ids=_wgmma_id)
def test_every_wgmma_shape_has_a_tma_variant(tile):
    config = cfg.tma_variant(cfg.LinearConfig("wgmma", tile, 3, 4, "slots"))
    assert config.kind == "wgmma_tma" and (config.tile.bm, config.tile.bn) == (tile.bm, tile.bn)
    assert (config.splits, config.raster_group, config.reduction) == (3, 4, "slots")


@pytest.mark.parametrize("m,n", [(64, 8192), (17, 4096), (512, 4096), (8192, 8192)])
def test_tma_default_switch(m, n, monkeypatch):
    """On (TMA_SMALL_M / TMA_LARGE_M, measured): M <= 64 streams through TMA_STREAM_TILE,
    larger M keeps the cp.async kernel's block shape; off, or without tensor maps, the
    cp.async wgmma config; sm_80 never. (With SWAP_SMALL_M, M <= 64 takes the swapped
    kernel first: test_swap_default_switch.)"""
    monkeypatch.setattr(cfg, "SWAP_SMALL_M", False)
    cfg.choose_config.cache_clear()
    try:
        tma = cfg.choose_config(m, n, 4096, BFLOAT16, True, H200, True, tma_ok=True)
        assert tma.kind == "wgmma_tma"
        switch = "TMA_SMALL_M" if m <= cfg.SMALL_M else "TMA_LARGE_M"
        monkeypatch.setattr(cfg, switch, False)
        cfg.choose_config.cache_clear()
        plain = cfg.choose_config(m, n, 4096, BFLOAT16, True, H200, True, tma_ok=True)
        assert plain.kind == "wgmma"
        assert cfg.choose_config(m, n, 4096, BFLOAT16, True, H200, True, tma_ok=False) == plain
        if m <= cfg.SMALL_M:
            assert tma.tile == cfg.TMA_STREAM_TILE
            assert tma.splits * cfg.tile_count(m, n, tma.tile) <= H200.sm_count  # one wave of 1-block SMs
            assert tma.reduction == ("slots" if tma.splits > 1 else "atomic")
        else:
            assert tma == cfg.tma_variant(plain)
        assert cfg.choose_config(m, n, 4096, BFLOAT16, True, A100, True, tma_ok=True).kind == "mma"
    finally:
        cfg.choose_config.cache_clear()


# (dtype, K, N, x address, x row stride, M, weight address, w k stride, w n stride, K-major) -> TMA can read it
TMA_LAYOUTS = [
    ((BFLOAT16, 4096, 4096, 256, 4096, 64, 512, 1, 4096, True), True),  # (N, K).T
    ((F16, 4096, 4096, 256, 4096, 64, 512, 4096, 1, False), True),  # (K, N)
    ((BFLOAT16, 8, 8, 256, 8, 7, 512, 8, 1, False), True),  # one box covers everything
    ((BFLOAT16, 64, 1, 256, 123, 1, 512, 1, 77, True), True),  # single rows: their strides do not matter
    ((BFLOAT16, 64, 64, 256, 72, 65, 512, 64, 1, False), True),  # padded x rows
    ((BFLOAT16, 0, 64, 256, 0, 3, 512, 64, 1, False), False),  # K = 0: no tensor map
    ((BFLOAT16, 64, 64, 264, 64, 3, 512, 64, 1, False), False),  # x base not 16-byte aligned
    ((BFLOAT16, 64, 64, 256, 32, 3, 512, 64, 1, False), False),  # overlapping x rows
    ((BFLOAT16, 64, 64, 256, 64, 3, 512, 1, 68, True), False),  # weight rows 136 bytes apart
    ((F32, 64, 64, 256, 64, 3, 512, 64, 1, False), False),  # 16-bit types only
    ((BFLOAT16, 64, 64, 256, 64, 3, 512, 64, 1, None), False),  # not mma_eligible
]


@pytest.mark.parametrize("args,expected", TMA_LAYOUTS)
def test_tma_eligible(args, expected):
    assert cfg.tma_eligible(*args) is expected


def test_operand_maps_match_the_kernel_boxes():
    x_map, w_map = cfg.operand_maps(cfg.TMA_TILE, BFLOAT16, 300, 520, 264, 264, 264, True)
    assert (x_map.inner, x_map.outer, x_map.stride, x_map.box_inner, x_map.box_outer) == (264, 300, 528, 64, 128)
    assert (w_map.inner, w_map.outer, w_map.stride, w_map.box_inner, w_map.box_outer) == (264, 520, 528, 64, 256)
    _, w_map = cfg.operand_maps(cfg.TMA_64x64, F16, 7, 520, 264, 264, 1040, False)
    assert (w_map.inner, w_map.outer, w_map.stride, w_map.box_inner, w_map.box_outer) == (520, 264, 2080, 64, 64)
    assert all(m.swizzle == 128 for m in (x_map, w_map))


def test_wgmma_blocks_per_sm_leave_room_for_static_shared_memory():
    # 2 x (7 x 16 KB + 1 KB align + 1 KB reserved) is the H200's 228 KB exactly: the split-K
    # flag's static bytes push the second block out (measured: s7 ran at 2.0-2.4 TB/s, s6 at 3.2).
    assert cfg.WgmmaTile(64, 64, 7, max_blocks_per_sm=2).blocks_per_sm(H200) == 1
    assert cfg.WgmmaTile(64, 64, 6, max_blocks_per_sm=2).blocks_per_sm(H200) == 2


@pytest.mark.parametrize("m,promotion", [(1, 128), (64, 128), (65, 256), (8192, 256)])
def test_tma_maps_promote_by_regime(m, promotion):
    for tile, kmajor in ((cfg.TMA_64x64, True), (cfg.SwapTile(64, 16, 8), False)):
        maps = cfg.operand_maps(tile, BFLOAT16, m, 8192, 8192, 8192, 8192, kmajor)
        assert [g.l2_promotion for g in maps] == [promotion, promotion]


def test_pdl_only_for_weight_streams_on_hopper(monkeypatch):
    assert cfg.uses_pdl(1, H200) and cfg.uses_pdl(cfg.PDL_MAX_M, H200)
    assert not cfg.uses_pdl(cfg.PDL_MAX_M + 1, H200) and not cfg.uses_pdl(16, A100)
    monkeypatch.setattr(cfg, "PDL_LAUNCH", False)
    assert not cfg.uses_pdl(16, H200)


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
@pytest.mark.parametrize("smem,static", [(0, 0), (20000, 0), (81920, 1024), (200000, 0), (16384, 4096)])
def test_pdl_smem_keeps_one_wave_grids_at_one_block_an_sm(dev, smem, static):
    padded = cfg.pdl_smem(smem, static, dev.sm_count, dev)
    assert smem <= padded <= max(smem, dev.max_smem_per_block - static)
    assert 2 * (padded + static + cfg.SMEM_RESERVED_PER_BLOCK) > dev.smem_per_sm  # a second block cannot fit
    assert cfg.pdl_smem(smem, static, dev.sm_count + 1, dev) == smem  # more than a wave: as asked


def _swap_id(t):
    return f"swap_n{t.bn}mx{t.mx}s{t.stages}k{t.bk}{'h' if t.l2_hints else ''}"


@pytest.mark.parametrize("m,kmajor", [(1, True), (7, False), (8, True), (9, False), (16, True), (16, False),
                                     (17, True), (64, False)])
def test_swap_default_switch(m, kmajor, monkeypatch):
    """SWAP_SMALL_M on: M <= 64 takes the swapped kernel (x padded to 8, 16 or 64 rows)
    wherever tensor maps describe the operands on compute capability 9.0; off: the mma
    stream tile (M <= 16) or the TMA kernel's 64x64 stream tile."""
    unswapped = "mma" if m <= 16 else "wgmma_tma"
    cfg.choose_config.cache_clear()
    try:
        monkeypatch.setattr(cfg, "SWAP_SMALL_M", False)
        assert cfg.choose_config(m, 8192, 8192, BFLOAT16, True, H200, kmajor, tma_ok=True).kind == unswapped
        monkeypatch.setattr(cfg, "SWAP_SMALL_M", True)
        cfg.choose_config.cache_clear()
        swap = cfg.choose_config(m, 8192, 8192, BFLOAT16, True, H200, kmajor, tma_ok=True)
        assert swap == cfg.choose_swap_config(m, 8192, 8192, H200)
        assert swap.kind == "swap_tma" and swap.tile.mx == (8 if m <= 8 else 16 if m <= 16 else 64)
        assert cfg.kernel_spec(swap, BFLOAT16, kmajor) in cfg.instantiations(H200)
        no_maps = cfg.choose_config(m, 8192, 8192, BFLOAT16, True, H200, kmajor, tma_ok=False).kind
        assert no_maps == ("mma" if m <= 16 else "wgmma")
        assert cfg.choose_config(m, 8192, 8192, BFLOAT16, True, A100, kmajor, tma_ok=True).kind == "mma"
        assert cfg.choose_config(m, 8192, 8192, F32, True, H200, kmajor, tma_ok=True).kind in ("gemv", "tf32x3")
        assert cfg.choose_config(65, 8192, 8192, BFLOAT16, True, H200, kmajor, tma_ok=True).kind != "swap_tma"
    finally:
        cfg.choose_config.cache_clear()


@pytest.mark.parametrize("m,n,k", [(16, 8192, 8192), (1, 8192, 8192), (16, 4096, 4096), (9, 33, 8), (1, 4100, 4104)])
def test_swap_splits_fill_one_wave(m, n, k):
    config = cfg.choose_swap_config(m, n, k, H200)
    tile = config.tile
    blocks = config.splits * cfg.tile_count(m, n, tile)
    assert blocks <= H200.sm_count * tile.blocks_per_sm(H200)
    assert config.splits == cfg.effective_splits(-(-k // tile.bk), config.splits)
    assert config.reduction == ("slots" if config.splits > 1 else "atomic")
    assert tile == cfg.SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64] and tile.l2_hints
    if (n, k) == (8192, 8192):
        assert (tile.bn, config.splits) == (64, 1)  # 128 blocks of 64 columns, one an SM


@pytest.mark.parametrize("tile", cfg.SWAP_TILES, ids=_swap_id)
def test_swap_tiles_fit_and_name_their_kernel(tile):
    assert tile.smem_bytes() <= H200.max_smem_per_block and tile.blocks_per_sm(H200) >= 1
    assert tile.smem_bytes() == tile.stages * (tile.mx + tile.bn) * tile.bk * 2 + 1024 + 16 * tile.stages
    assert (tile.threads, tile.bm) == (2 * tile.bn + 32, tile.mx)
    spec = cfg.kernel_spec(cfg.LinearConfig("swap_tma", tile), BFLOAT16, False)
    assert spec.name == "linear_relu_swap_tma"
    assert spec.template_args == ("__nv_bfloat16", tile.bn, tile.mx, tile.bk, tile.stages, False, tile.l2_hints)
    assert spec in cfg.instantiations(H200)
    assert all(s.name != "linear_relu_swap_tma" for s in cfg.instantiations(A100))


@pytest.mark.parametrize("shape", [(256, 16, 8), (64, 32, 8), (64, 12, 8), (64, 128, 8), (64, 16, 4, 192),
                                   (64, 16, 8, 32)])
def test_swap_tile_refuses_shapes_the_kernel_lacks(shape):
    with pytest.raises(ValueError, match="SwapTile"):
        cfg.SwapTile(*shape)


def test_swap_operand_maps_fetch_only_the_padded_rows():
    tile = cfg.SwapTile(128, 8, 8)
    x_map, w_map = cfg.operand_maps(tile, BFLOAT16, 3, 520, 264, 264, 264, True)
    assert (x_map.inner, x_map.outer, x_map.box_inner, x_map.box_outer) == (264, 3, 64, 8)
    assert (w_map.inner, w_map.outer, w_map.box_inner, w_map.box_outer) == (264, 520, 64, 128)
    _, w_map = cfg.operand_maps(tile, F16, 3, 520, 264, 264, 1040, False)
    assert (w_map.inner, w_map.outer, w_map.stride, w_map.box_inner, w_map.box_outer) == (520, 264, 2080, 64, 64)
    _, w_map = cfg.operand_maps(cfg.SwapTile(64, 16, 4, bk=256), F16, 3, 520, 264, 264, 1040, False)
    assert (w_map.box_inner, w_map.box_outer) == (64, 256)  # an N-major weight box: bk k rows


@pytest.mark.parametrize("tile", cfg.SWAP_TILES, ids=_swap_id)
@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
def test_swap_tiles_fit_their_register_budget(tile, kmajor):
    from cufuse._loader import compile_spec, resource_usage

    usage = resource_usage(compile_spec(cfg.kernel_spec(cfg.LinearConfig("swap_tma", tile), BFLOAT16, kmajor),
                                        "sm_90a").log)
    assert usage["spill_stores"] == 0
    assert tile.blocks_per_sm(H200) * tile.threads * usage["registers"] <= 65536


@pytest.mark.parametrize("kind,tile", [("mma", t) for t in cfg.MMA_TILES] + [("wgmma", t) for t in cfg.WGMMA_TILES]
                         + [("wgmma_tma", t) for t in cfg.TMA_TILES + cfg.TMA_STREAM_TILES],
                         ids=lambda v: v if isinstance(v, str) else
                         _wgmma_id(v) if isinstance(v, cfg.WgmmaTile) else f"{v.bm}x{v.bn}s{v.stages}")
def test_tensor_core_tiles_fit_their_register_budget(kind, tile):
    from cufuse._loader import compile_spec, resource_usage

    spec = cfg.kernel_spec(cfg.LinearConfig(kind, tile), BFLOAT16, False)
    usage = resource_usage(compile_spec(spec, "sm_90a").log)
    assert usage["spill_stores"] == 0
    assert tile.max_blocks_per_sm * tile.threads * usage["registers"] <= 65536


# ----------------------------------------------------------------------------- GPU


@dataclasses.dataclass(frozen=True)
class Case:
    """One GPU check: x of shape lead + (K,), weight (K, N) built by ``layout``."""

    lead: tuple
    k: int
    n: int
    dtype: np.dtype
    layout: str = "kn"  # kn | nk_t | nk_t_padded | odd_column | every_other_k
    bias: str = "contiguous"  # contiguous | none | strided
    x_layout: str = "contiguous"  # contiguous | padded_rows | strided_k
    config: cfg.LinearConfig | None = None

    def __str__(self):
        parts = [f"{'x'.join(map(str, self.lead + (self.k,)))}@{self.k}x{self.n}", self.dtype.name, self.layout]
        if self.bias != "contiguous":
            parts.append(f"bias_{self.bias}")
        if self.x_layout != "contiguous":
            parts.append(self.x_layout)
        if self.config:
            t = self.config.tile
            shape = f"{t.rows}rows" if self.config.kind == "gemv" else f"{t.bm}x{t.bn}"
            if self.config.kind.startswith("wgmma"):
                shape += f"k{t.bk}st{t.stages}p{t.pending}"
            if self.config.kind == "swap_tma":
                shape = f"mx{t.mx}n{t.bn}st{t.stages}"
            if getattr(t, "dmma_k", 0):
                shape += f"pipe_k{t.dmma_k}st{t.stages}"
            parts.append(f"{self.config.kind}{shape}s{self.config.splits}{self.config.reduction[0]}")
        return "-".join(parts)


def _force(tile, splits=1, reduction="atomic"):
    return cfg.LinearConfig("mma", tile, splits, reduction=reduction)


K32_TILE = cfg.MmaTile(128, 128, 32, 2, 2, 4, 2, 0.9)  # rows of 4 chunks: the second swizzle


def _gemv(splits=1, rows=1):
    return cfg.LinearConfig("gemv", cfg.GemvTile(rows), splits)


BF16 = BFLOAT16
TF32X3 = cfg.LinearConfig("tf32x3", cfg.TF32_TILE)
TF32X3_NARROW = cfg.LinearConfig("tf32x3", cfg.TF32_NARROW_TILE)
DMMA = cfg.LinearConfig("dmma", cfg.DMMA_TILE)
# The sweep's k32 float64 tile (bench/sweep_linear.py; K-major weights only: no spills there).
DMMA_K32 = cfg.LinearConfig("dmma", cfg.WideTile(128, 128, 32, 4, 2, 3, 1, 1.0, itemsize=8))


def _wide(tile, splits=1):
    """A float32 (3xTF32) or float64 (DMMA) config with ``splits`` splits of K through slots."""
    return cfg.LinearConfig("tf32x3" if tile.itemsize == 4 else "dmma", tile, splits,
                            reduction="slots" if splits > 1 else "atomic")


CASES = [
    # tensor cores, weight streaming (M <= 16, split-K), both layouts, ragged N
    Case((1,), 4096, 4096, BF16, "nk_t"),
    Case((1,), 4096, 4096, F16, "kn"),
    Case((7,), 4096, 33, BF16, "nk_t", bias="none"),
    Case((3, 5), 4096, 4100, F16, "nk_t"),
    Case((7,), 8, 8, BF16, "kn"),  # one k tile: no split
    # weight-streaming GEMV (M = 1): K-major ragged N and K, row-major with and without split-K
    Case((1,), 4104, 4100, BF16, "nk_t", config=_gemv()),
    Case((1,), 8, 8, F16, "nk_t", bias="none", config=_gemv()),
    Case((1,), 1000, 4104, F16, "kn", config=_gemv(3)),
    Case((1,), 1000, 264, BF16, "kn", bias="strided", config=_gemv()),
    Case((1,), 4096, 4096, BF16, "nk_t_padded", config=_gemv(8)),
    # tensor cores, M in 17..64 (64x64 tile, split-K through slots: wgmma on compute capability 9.0, else mma)
    Case((64,), 4096, 8, BF16, "kn"),
    Case((33,), 4096, 1, F16, "nk_t"),
    Case((64,), 4096, 4096, BF16, "nk_t_padded"),
    # tensor cores, GEMM tiles
    Case((65,), 4096, 4100, BF16, "nk_t"),
    Case((4097,), 4096, 4096, BF16, "kn"),
    Case((4097,), 4096, 4096, F16, "nk_t", bias="none"),  # wgmma on compute capability 9.0
    Case((65,), 1024, 4104, F16, "kn"),  # few tiles: wgmma 64x64 split-K on 9.0, else mma 128x128 split-K
    Case((65,), 1024, 4104, F16, "kn", config=_force(cfg.MEDIUM_TILE, 2, "slots")),  # the latter on any GPU
    Case((300,), 520, 264, BF16, "nk_t", config=_force(cfg.MEDIUM_TILE)),
    Case((300,), 520, 264, F16, "kn", config=_force(cfg.MEDIUM_TILE)),
    Case((200,), 264, 520, F16, "nk_t", config=_force(cfg.LARGE_TILE)),
    Case((200,), 264, 520, BF16, "kn", config=_force(cfg.LARGE_TILE)),
    Case((130,), 1024, 136, BF16, "kn", config=_force(cfg.SMALL_TILE, 3)),
    Case((200,), 264, 520, BF16, "nk_t", config=_force(K32_TILE)),
    Case((200,), 1000, 136, F16, "kn", config=_force(K32_TILE, 2)),
    # split-K through per-split slots (vector stores, last block reduces), ragged tiles
    Case((7,), 4096, 4100, BF16, "nk_t", config=_force(cfg.STREAM_TILE, 4, "slots")),
    Case((3, 5), 1032, 136, F16, "kn", bias="none", config=_force(cfg.STREAM_TILE, 3, "slots")),
    Case((64,), 4096, 264, BF16, "kn", config=_force(cfg.SMALL_TILE, 4, "slots")),
    Case((130,), 1024, 136, F16, "nk_t", bias="strided", config=_force(cfg.SMALL_TILE, 3, "slots")),
    # candidate tiles for M in 17..64
    Case((64,), 2048, 200, BF16, "kn", config=_force(cfg.STREAM64_TILES[0], 2, "slots")),
    Case((40,), 2048, 264, BF16, "nk_t", config=_force(cfg.STREAM64_TILES[1], 3)),
    Case((64,), 2048, 520, BF16, "kn", config=_force(cfg.STREAM64_TILES[2], 4, "slots")),
    Case((65,), 64, 64, F16, "every_other_k", bias="strided"),
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows"),
    # 16-bit operands the tensor-core kernel cannot load: SIMT
    Case((65,), 4100, 4096, F16, "kn"),
    Case((7,), 64, 40, BF16, "odd_column", bias="strided"),
    Case((7,), 1, 1, F16, "kn"),
    Case((5,), 64, 64, BF16, "kn", x_layout="strided_k"),
    # float32 (true float32) and float64: SIMT
    Case((4097,), 256, 4100, F32, "kn"),
    Case((1,), 4096, 4096, F32, "nk_t"),
    Case((3, 5), 33, 8, F32, "odd_column", bias="none"),
    Case((65,), 4100, 33, F64, "nk_t"),
    Case((3, 5), 33, 8, F64, "kn"),
    Case((4097,), 8, 1, F64, "every_other_k"),
    # float32 on tensor cores (3xTF32, through config=): same tolerance as true float32
    Case((4097,), 256, 4100, F32, "kn", config=TF32X3),
    Case((300,), 1000, 264, F32, "nk_t", config=TF32X3),  # ragged M, N and the last k tile
    Case((65,), 4096, 4096, F32, "kn", bias="strided", config=TF32X3_NARROW),  # K = 4096: TF32 alone fails
    Case((65,), 4096, 4096, F32, "nk_t", config=TF32X3),
    Case((3, 5), 36, 8, F32, "nk_t_padded", bias="none", config=TF32X3),
    Case((200,), 520, 136, F32, "every_other_k", config=TF32X3_NARROW),  # weight rows 2N apart
    Case((130,), 260, 72, F32, "kn", x_layout="padded_rows", config=TF32X3),
    Case((), 260, 72, F32, "nk_t", config=TF32X3_NARROW),  # 1-D x
    Case((1,), 4096, 4096, F32, "kn", config=TF32X3),
    # float64 on tensor cores (DMMA, through config=)
    Case((300,), 1000, 264, F64, "kn", config=DMMA),  # ragged M, N and the last k tile
    Case((130,), 4096, 136, F64, "nk_t", bias="strided", config=DMMA),
    Case((3, 5), 34, 8, F64, "nk_t_padded", bias="none", config=DMMA),
    Case((200,), 520, 144, F64, "every_other_k", config=DMMA),
    Case((), 260, 72, F64, "kn", x_layout="padded_rows", config=DMMA),
    Case((200,), 1000, 136, F64, "nk_t", config=DMMA_K32),  # two k16 MMAs per stage, ragged last k tile
    # float64 on linear_relu_dmma (sm_90): ragged M, N and last k tile (full tiles take the
    # unchecked cp.async), both weight layouts, weight rows 2N apart, padded rows, 1-D x,
    # fewer k tiles than stages, every tile full; the m16n8k16 form
    Case((300,), 1000, 264, F64, "kn", config=DMMA_PIPE),
    Case((300,), 1000, 264, F64, "nk_t", config=DMMA_PIPE),
    Case((130,), 4096, 136, F64, "nk_t", bias="strided", config=DMMA_PIPE),
    Case((3, 5), 34, 8, F64, "nk_t_padded", bias="none", config=DMMA_PIPE),
    Case((200,), 520, 144, F64, "every_other_k", config=DMMA_PIPE),
    Case((), 260, 72, F64, "kn", x_layout="padded_rows", config=DMMA_PIPE),
    Case((70,), 6, 24, F64, "kn", config=DMMA_PIPE),
    Case((256,), 4096, 128, F64, "kn", config=DMMA_PIPE),
    Case((300,), 1000, 264, F64, "kn", config=DMMA_PIPE_K16),
    Case((200,), 520, 136, F64, "nk_t", bias="none", config=DMMA_PIPE_K16),
    # float32 with M = 17..64 and float64 with M = 5..64 by default: tiles of 16-64 rows that
    # split K through slots (float64 on sm_90; elsewhere the 128-row DMMA tile); ragged M, N and
    # K, splits whose last k tile is ragged, both layouts, batched x, bias none / strided
    Case((17,), 4100, 264, F32, "kn"),
    Case((3, 11), 1000, 200, F32, "every_other_k", bias="none"),
    Case((40,), 2052, 520, F32, "nk_t"),
    Case((64,), 8192, 136, F32, "kn", bias="strided"),
    Case((20,), 1000, 136, F32, "nk_t_padded", config=_wide(cfg.TF32_M32_TILE, 3)),  # 32 k tiles in 3 splits
    Case((50,), 1000, 264, F32, "kn", config=_wide(cfg.TF32_M64_TILE, 5)),
    Case((128,), 1000, 264, F32, "kn"),  # 128-row tile, split
    Case((5,), 4100, 264, F64, "kn"),
    Case((16,), 1000, 136, F64, "nk_t", bias="none", config=_wide(cfg.DMMA_M16_TILE, 5)),
    Case((9,), 6, 24, F64, "kn", config=_wide(cfg.DMMA_M16_TILE)),  # fewer k tiles than stages
    Case((30,), 2050, 200, F64, "kn"),
    Case((3, 7), 520, 72, F64, "every_other_k"),
    Case((64,), 4096, 520, F64, "nk_t_padded", bias="strided"),
    Case((64,), 4096, 128, F64, "nk_t", config=_wide(cfg.DMMA_M64_TILE, 4)),  # every tile full
    Case((65,), 8192, 136, F64, "kn"),  # 128-row tile, split
    # The weight-streaming kernel: the default for float32 with M <= 4 and float64 with M = 1 (a
    # row-major float32 weight splits K), through config= for 16 rows and float64's 4; ragged N
    # and K, both layouts, batched and 1-D x
    Case((1,), 4100, 4104, F32, "nk_t"),
    Case((3,), 1000, 4100, F32, "kn"),  # 4 rows, split K, N tail of 4 in the last 128-column block
    Case((16,), 8192, 520, F32, "kn", bias="strided"),  # the 16-row 3xTF32 tile by default
    Case((16,), 8192, 520, F32, "kn", bias="strided", config=_gemv(9, rows=16)),
    Case((16,), 4104, 264, F32, "nk_t_padded", config=_gemv(rows=16)),
    Case((3, 5), 1032, 136, F32, "every_other_k", bias="none", config=_gemv(4, rows=16)),  # weight rows 2N apart
    Case((), 260, 72, F32, "nk_t"),
    Case((9,), 1000, 4100, F32, "kn", config=_gemv(1, rows=16)),  # one split: no workspace
    Case((2,), 264, 40, F32, "kn", x_layout="padded_rows", config=_gemv(7, rows=4)),  # ragged last split
    Case((3,), 1004, 136, F32, "kn", config=_gemv(3, rows=4)),  # last split ends inside a warp's run of rows
    Case((2,), 1002, 66, F64, "kn", config=_gemv(rows=4)),  # K ends inside a warp's run of 8 rows
    Case((4,), 1032, 136, F64, "kn", config=_gemv(rows=4)),
    Case((3,), 2050, 202, F64, "nk_t", bias="none", config=_gemv(rows=4)),
    Case((4,), 1032, 136, F64, "kn"),  # the 16-row DMMA tile by default
    Case((16,), 2050, 202, F64, "nk_t", config=_gemv(rows=16)),
    Case((1,), 4096, 4100, F64, "every_other_k", bias="strided"),
    Case((12,), 520, 66, F64, "nk_t_padded", config=_gemv(rows=16)),
    # degenerate
    Case((3,), 0, 4, F16, "kn"),
    Case((3,), 0, 4, F32, "kn"),
    Case((0,), 16, 4, BF16, "kn"),
]


def _random(cp, rng, shape, dtype):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(dtype))


def make_inputs(cp, rng, case: Case):
    k, n, dtype = case.k, case.n, case.dtype
    x_shape = case.lead + (k,)
    if case.x_layout == "padded_rows":
        x = _random(cp, rng, case.lead + (k + 8,), dtype)[..., :k]
    elif case.x_layout == "strided_k":
        x = _random(cp, rng, case.lead + (2 * k,), dtype)[..., ::2]
    else:
        x = _random(cp, rng, x_shape, dtype)
    if case.layout == "kn":
        w = _random(cp, rng, (k, n), dtype)
    elif case.layout == "nk_t":
        w = _random(cp, rng, (n, k), dtype).T
    elif case.layout == "nk_t_padded":
        w = _random(cp, rng, (n, k + 8), dtype)[:, :k].T
    elif case.layout == "odd_column":
        w = _random(cp, rng, (k, n + 3), dtype)[:, 1 : n + 1]
    elif case.layout == "every_other_k":
        w = _random(cp, rng, (2 * k, n), dtype)[::2]
    else:
        raise AssertionError(case.layout)
    b = {"contiguous": lambda: _random(cp, rng, (n,), dtype), "none": lambda: None,
         "strided": lambda: _random(cp, rng, (2 * n,), dtype)[::2]}[case.bias]()
    return x, w, b


def to_float64(cp, a):
    """float64 copy of a CuPy array; bfloat16 widened through its bits (exact, and needs
    no bfloat16 arithmetic from CuPy)."""
    if a.dtype == BFLOAT16:
        return (a.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
    return a.astype(cp.float64)


def oracle(cp, x, w, b):
    """float64 max(x @ w + b, 0) on the GPU, and the per-element tolerance."""
    x64, w64 = to_float64(cp, x), to_float64(cp, w)
    ref = cp.matmul(x64, w64)
    if b is not None:
        ref += to_float64(cp, b)
    ref = cp.maximum(ref, 0.0)
    k = w.shape[0]
    dtype = np.dtype(x.dtype)
    ulp = {F16: 2.0**-10, BFLOAT16: 2.0**-7, F32: 2.0**-23, F64: 2.0**-52}[dtype]
    eps_acc = 2.0**-52 if dtype == F64 else 2.0**-23
    rms = lambda a: float(cp.sqrt(cp.mean(a**2))) if a.size else 0.0
    tol = 2 * ulp * cp.abs(ref) + 8 * eps_acc * max(k, 1) * rms(x64) * rms(w64) + 1e-30
    return ref, tol


def check_case(cp, rng, case: Case) -> str | None:
    """Run one case into a poisoned out; returns a failure description or None."""
    x, w, b = make_inputs(cp, rng, case)
    out = poisoned(cp, case.lead + (case.n,), case.dtype)
    result = fused_linear_relu(x, w, b, out=out, config=case.config)
    if result is not out:
        return "did not return out"
    ref, tol = oracle(cp, x, w, b)
    err = cp.abs(to_float64(cp, out) - ref)
    bad = ~(err <= tol)  # NaN (an unwritten element) counts as bad
    if bool(bad.any()):
        idx = tuple(int(i[0]) for i in cp.nonzero(bad))
        return (f"{case}: {int(bad.sum())} of {out.size} elements off, e.g. at {idx}: got {float(to_float64(cp, out)[idx])}, "
                f"want {float(ref[idx])} (tol {float(tol[idx]):.3g})")
    return None


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64_oracle(cp, rng, case):
    _require_kernel(cp, case)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


WGMMA = cfg.LinearConfig("wgmma", cfg.WGMMA_TILE)


def _wgmma(tile, splits=1):
    return cfg.LinearConfig("wgmma", tile, splits, reduction="slots")


WGMMA_CASES = [  # Hopper kernel: ragged M, N and K; several k tiles
    Case((300,), 520, 264, BF16, "nk_t", config=WGMMA),
    Case((1000,), 1024, 1000, F16, "nk_t_padded", bias="none", config=WGMMA),
    Case((3, 50), 4096, 520, BF16, "nk_t", bias="strided", config=WGMMA),
    # row-major (K, N) weight, read transposed: N-major swizzle atoms
    Case((300,), 520, 264, BF16, "kn", config=WGMMA),
    Case((3, 50), 1024, 520, F16, "kn", bias="strided", config=WGMMA),
    Case((200,), 264, 520, BF16, "every_other_k", bias="none", config=WGMMA),  # weight rows 2N apart
    Case((200,), 4104, 264, BF16, "kn", config=_wgmma(cfg.WGMMA_TILE, 2)),  # split-K, ragged last split
    # the other tiles (m64n128 / m64n64 instructions, one warpgroup), split-K through slots
    Case((300,), 1032, 264, BF16, "kn", config=_wgmma(cfg.WGMMA_128x128)),
    Case((130,), 4096, 136, F16, "nk_t", bias="strided", config=_wgmma(cfg.WGMMA_128x128, 3)),
    Case((64,), 4096, 520, BF16, "kn", config=_wgmma(cfg.WGMMA_64x256, 4)),
    Case((7,), 2056, 264, F16, "nk_t", bias="none", config=_wgmma(cfg.WGMMA_64x256, 3)),
    Case((1,), 1024, 136, BF16, "nk_t", config=_wgmma(cfg.WGMMA_64x128, 2)),
    Case((3, 5), 520, 200, F16, "kn", config=_wgmma(cfg.WGMMA_64x128, 2)),
    Case((40,), 1000, 72, BF16, "kn", bias="strided", config=_wgmma(cfg.WGMMA_64x64)),
    Case((65,), 4096, 8, F16, "nk_t", config=_wgmma(cfg.WGMMA_64x64, 4)),
]


def _require_sm90(cp, kernel="the wgmma kernel"):
    if cp.cuda.Device().compute_capability != "90":
        pytest.skip(f"{kernel} needs compute capability 9.0")


@pytest.mark.parametrize("case", WGMMA_CASES, ids=str)
def test_wgmma_matches_float64_oracle(cp, rng, case):
    _require_sm90(cp)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


def test_wgmma_refuses_a_weight_it_cannot_load(cp, rng):
    _require_sm90(cp)
    x, w, b = make_inputs(cp, rng, Case((8,), 64, 40, BF16, "odd_column"))
    with pytest.raises(ValueError, match="asks for the wgmma kernel"):
        fused_linear_relu(x, w, b, config=WGMMA)


def _tma(tile, splits=1):
    return cfg.LinearConfig("wgmma_tma", tile, splits, reduction="slots")


TMA_CASES = [  # TMA-fed Hopper kernel: ragged M, N and K (zero-filled boxes), both layouts, split-K
    Case((1,), 4104, 33, BF16, "nk_t", config=_tma(cfg.TMA_64x64, 2)),  # M = 1, K tail of 8, N = 33
    Case((7,), 8, 8, F16, "kn", config=_tma(cfg.TMA_64x64)),  # one k tile, box far past N and K
    Case((64,), 4096, 4100, BF16, "nk_t", config=_tma(cfg.TMA_64x64, 2)),
    Case((64,), 4096, 4096, F16, "kn", bias="none", config=_tma(cfg.TMA_64x64, 2)),
    Case((65,), 4104, 264, F16, "kn", bias="none", config=_tma(cfg.TMA_64x128, 3)),  # ragged last split
    Case((1,), 1024, 136, BF16, "nk_t", config=_tma(cfg.TMA_64x128, 2)),
    Case((3, 50), 4096, 520, F16, "kn", config=_tma(cfg.TMA_64x256, 4)),
    Case((300,), 520, 264, BF16, "nk_t_padded", bias="strided", config=_tma(cfg.TMA_128x128)),
    Case((4097,), 520, 4100, BF16, "nk_t", config=_tma(cfg.TMA_TILE)),
    Case((4097,), 1032, 264, F16, "kn", config=_tma(cfg.TMA_TILE)),
    Case((200,), 264, 520, BF16, "every_other_k", bias="none", config=_tma(cfg.TMA_TILE)),  # weight rows 2N apart
    Case((200,), 4104, 264, BF16, "kn", config=_tma(cfg.TMA_TILE, 2)),  # split-K on the 128x256 tile
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows", config=_tma(cfg.TMA_64x64)),
    Case((64,), 8192, 1024, BF16, "kn", config=_tma(cfg.TMA_STREAM_TILES[0])),  # 128 k tiles: the phases wrap
    Case((40,), 4096, 200, F16, "nk_t", config=_tma(cfg.TMA_STREAM_TILES[2], 2)),
]


@pytest.mark.parametrize("case", TMA_CASES, ids=str)
def test_wgmma_tma_matches_float64_oracle(cp, rng, case):
    _require_sm90(cp)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


@pytest.mark.parametrize("case", [Case((8,), 64, 40, BF16, "odd_column"), Case((3,), 0, 8, F16, "kn")], ids=str)
def test_wgmma_tma_refuses_operands_without_a_tensor_map(cp, rng, case):
    _require_sm90(cp)
    x, w, b = make_inputs(cp, rng, case)
    with pytest.raises(ValueError, match="asks for the wgmma_tma kernel"):
        fused_linear_relu(x, w, b, config=_tma(cfg.TMA_64x64))


def test_tma_default_switch_runs_the_tma_kernel(cp, rng, monkeypatch):
    _require_sm90(cp)
    import cufuse.linear as linear_module

    monkeypatch.setattr(cfg, "TMA_SMALL_M", True)
    monkeypatch.setattr(cfg, "TMA_LARGE_M", True)
    monkeypatch.setattr(linear_module, "_plans", {})  # no plan of an earlier default
    cfg.choose_config.cache_clear()
    try:
        for case in (Case((64,), 2048, 520, BF16, "nk_t"), Case((4097,), 264, 4096, F16, "kn")):
            failure = check_case(cp, rng, case)
            assert failure is None, failure
        assert any(plan.maps is not None for plan in linear_module._plans.values())
    finally:
        cfg.choose_config.cache_clear()


def _swap(bn, mx, stages, splits=1):
    """A swapped-operand config; the tiles are SWAP_TILES' (precompiled with the sweep's)."""
    tile = cfg.SwapTile(bn, mx, stages)
    assert tile in cfg.SWAP_TILES
    return cfg.LinearConfig("swap_tma", tile, splits, reduction="slots" if splits > 1 else "atomic")


def _swap_default(m, splits=1):
    """The default swapped tile of an M-row problem (deeper k, L2 hints), with ``splits``."""
    tile = cfg.SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64]
    return cfg.LinearConfig("swap_tma", tile, splits, reduction="slots" if splits > 1 else "atomic")


SWAP_CASES = [  # swapped-operand TMA kernel: M = 1..16, ragged N and K (zero-filled boxes), both layouts, split-K
    Case((1,), 8192, 4100, BF16, "nk_t", config=_swap(64, 8, 16)),  # 128 k tiles: the phases wrap; N tail of 4
    Case((7,), 4104, 33, F16, "nk_t", bias="none", config=_swap(64, 8, 8, 2)),  # K tail of 8, N = 33, split 2
    Case((8,), 8, 8, BF16, "kn", config=_swap(64, 8, 12)),  # one k tile, boxes far past N and K
    Case((9,), 4104, 4104, F16, "kn", config=_swap(128, 16, 8, 3)),  # ragged last split, N tail of 8
    Case((16,), 8192, 4096, BF16, "kn", bias="strided", config=_swap(64, 16, 16)),
    Case((16,), 4096, 4100, BF16, "nk_t", config=_swap(128, 16, 12, 4)),
    Case((3, 5), 1032, 136, F16, "nk_t_padded", config=_swap(64, 16, 12, 2)),  # sliced (N, K + 8) weight view
    Case((1,), 4096, 8, F16, "kn", config=_swap(128, 8, 8)),  # the second warpgroup's columns all past N
    Case((7,), 1024, 200, BF16, "every_other_k", bias="none", config=_swap(64, 8, 16, 2)),  # weight rows 2N apart
    Case((), 4096, 264, BF16, "nk_t", config=_swap(64, 8, 8)),  # 1-D x
    Case((16,), 520, 264, F16, "kn", x_layout="padded_rows", config=_swap(64, 16, 8)),
    Case((16,), 8, 8, F16, "nk_t", config=_swap(128, 16, 12)),
    Case((64,), 4096, 4100, BF16, "nk_t", config=_swap(64, 64, 8)),  # x padded to 64 rows (wip-swap64)
    Case((40,), 1032, 136, F16, "kn", config=_swap(64, 64, 12, 2)),
    Case((64,), 8192, 264, BF16, "kn", bias="strided", config=_swap(128, 64, 8)),
    Case((17,), 520, 72, F16, "nk_t", bias="none", config=_swap(64, 64, 8, 3)),
    # the defaults (256 / 128 k a stage, L2 hints): phases wrap, K tails inside one stage, split-K
    Case((1,), 8192, 4100, BF16, "nk_t", config=_swap_default(1)),  # 32 k tiles over 5 stages, N tail of 4
    Case((5,), 4104, 136, F16, "kn", config=_swap_default(5, 3)),  # K tail of 8 past 16 stages of 256
    Case((16,), 264, 4096, BF16, "nk_t", bias="strided", config=_swap_default(16)),  # 2 k tiles, 8 of 256 real
    Case((11,), 1032, 200, BF16, "every_other_k", config=_swap_default(11, 2)),
    Case((64,), 8192, 4100, F16, "nk_t", config=_swap_default(64)),  # 64 k tiles of 128 over 6 stages
    Case((33,), 4104, 520, BF16, "kn", bias="none", config=_swap_default(33, 4)),  # K tail of 8
    Case((3, 5), 1032, 136, F16, "nk_t_padded", config=_swap_default(15)),
]


@pytest.mark.parametrize("case", SWAP_CASES, ids=str)
def test_swap_tma_matches_float64_oracle(cp, rng, case):
    _require_sm90(cp)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


@pytest.mark.parametrize("case,message", [
    (Case((17,), 64, 64, BF16, "nk_t", config=_swap(64, 16, 8)), "takes at most M = 16 rows, got M = 17"),
    (Case((9,), 64, 64, F16, "kn", config=_swap(64, 8, 8)), "takes at most M = 8 rows, got M = 9"),
    (Case((4,), 33, 64, BF16, "nk_t", config=_swap(64, 8, 8)), "asks for the swap_tma kernel"),
    (Case((4,), 4100, 64, BF16, "kn", config=_swap(64, 8, 8)), "asks for the swap_tma kernel"),
    (Case((4,), 64, 40, BF16, "odd_column", config=_swap(64, 8, 8)), "asks for the swap_tma kernel"),
    (Case((3,), 0, 8, F16, "kn", config=_swap(64, 8, 8)), "asks for the swap_tma kernel"),
    (Case((4,), 1024, 64, BF16, "kn", config=cfg.LinearConfig("swap_tma", cfg.SwapTile(64, 8, 8), 2)),
     "expected reduction='slots'"),
], ids=lambda v: v if isinstance(v, str) else str(v))
def test_swap_tma_refuses_what_it_cannot_run(cp, rng, case, message):
    _require_sm90(cp)
    x, w, b = make_inputs(cp, rng, case)
    with pytest.raises(ValueError, match=re.escape(message)):
        fused_linear_relu(x, w, b, config=case.config)


def test_swap_default_switch_runs_the_swapped_kernel(cp, rng, monkeypatch):
    _require_sm90(cp)
    import cufuse.linear as linear_module

    kinds = []  # the kind of every planned launch
    kernel_spec = cfg.kernel_spec
    monkeypatch.setattr(cfg, "kernel_spec", lambda config, *args: kinds.append(config.kind) or kernel_spec(config, *args))
    monkeypatch.setattr(cfg, "SWAP_SMALL_M", True)
    monkeypatch.setattr(linear_module, "_plans", {})  # no plan of an earlier default
    cfg.choose_config.cache_clear()
    try:
        # M = 1, 16 and 64 on both layouts take it; K = 33 (no tensor map) and M = 65 do not.
        cases = (Case((1,), 4096, 4096, BF16, "nk_t"), Case((16,), 1032, 520, F16, "kn"),
                 Case((64,), 1032, 520, BF16, "kn"), Case((16,), 33, 64, BF16, "kn"),
                 Case((65,), 1024, 64, BF16, "nk_t"))
        for case in cases:
            failure = check_case(cp, rng, case)
            assert failure is None, failure
        assert kinds[:3] == ["swap_tma"] * 3 and "swap_tma" not in kinds[3:], kinds
    finally:
        cfg.choose_config.cache_clear()


def test_wgmma_refuses_split_k_through_atomics(cp, rng):
    _require_sm90(cp)
    x, w, b = make_inputs(cp, rng, Case((8,), 1024, 64, BF16, "kn"))
    with pytest.raises(ValueError, match="expected reduction='slots'"):
        fused_linear_relu(x, w, b, config=cfg.LinearConfig("wgmma", cfg.WGMMA_64x64, 2))


@pytest.mark.parametrize("config,dtype,layout", [
    (TF32X3, F32, "odd_column"), (TF32X3, F16, "kn"), (TF32X3, F64, "kn"),
    (DMMA, F64, "odd_column"), (DMMA, F32, "kn"),
], ids=lambda p: getattr(p, "kind", None) or str(p))
def test_wide_kernels_refuse_operands_they_cannot_take(cp, rng, config, dtype, layout):
    x, w, b = make_inputs(cp, rng, Case((8,), 64, 40, dtype, layout))
    with pytest.raises(ValueError, match=f"asks for the {config.kind} kernel"):
        fused_linear_relu(x, w, b, config=config)


def test_pipelined_dmma_refuses_float32_and_old_devices(cp, rng):
    x, w, b = make_inputs(cp, rng, Case((8,), 64, 64, F32, "kn"))
    with pytest.raises(ValueError, match="pipelined float64 kernel"):
        fused_linear_relu(x, w, b, config=cfg.LinearConfig("tf32x3", DMMA_PIPE.tile))
    if cp.cuda.Device().compute_capability != "90":
        x, w, b = make_inputs(cp, rng, Case((8,), 64, 64, F64, "kn"))
        with pytest.raises(ValueError, match="pipelined float64 kernel"):
            fused_linear_relu(x, w, b, config=DMMA_PIPE)


def test_tf32x3_propagates_nan(cp, rng):
    x = _random(cp, rng, (130, 64), F32)
    w = _random(cp, rng, (64, 72), F32)
    x[3, 5] = np.nan
    out = fused_linear_relu(x, w, config=TF32X3)
    assert bool(cp.isnan(out[3]).all()) and not bool(cp.isnan(out[4]).any())


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("layout", ["kn", "nk_t"])
def test_gemv_wide_propagates_nan_and_inf(cp, rng, dtype, layout):
    x, w, _ = make_inputs(cp, rng, Case((3,), 264, 72, dtype, layout))
    x[0, 5] = np.nan
    x[1] = 0
    x[1, 7] = np.inf
    w[7] = cp.abs(w[7]) + 1  # x[1] @ w = +inf in every column
    out = fused_linear_relu(x, w, config=_gemv(rows=4))
    assert bool(cp.isnan(out[0]).all()) and bool(cp.isposinf(out[1]).all()) and bool(cp.isfinite(out[2]).all())


@pytest.mark.parametrize("case,config,message", [
    (Case((8,), 64, 40, F32, "odd_column"), _gemv(rows=16), "asks for the gemv kernel, which needs 16-byte"),
    (Case((4,), 64, 40, F64, "kn"), _gemv(2, rows=4), "expected splits=1 for the float64 gemv kernel"),
    (Case((5,), 64, 40, F32, "kn"), _gemv(rows=4), "expected a gemv tile of at least M = 5 rows"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_gemv_refuses_what_it_cannot_run(cp, rng, case, config, message):
    x, w, b = make_inputs(cp, rng, case)
    with pytest.raises(ValueError, match=re.escape(message)):
        fused_linear_relu(x, w, b, config=config)


def test_new_out_and_numpy_reference_agree(cp, rng):
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    got = fused_linear_relu(cp.asarray(x), cp.asarray(w), cp.asarray(b))
    assert got.shape == (3, 5, 24) and got.dtype == np.float32
    np.testing.assert_allclose(cp.asnumpy(got), reference.fused_linear_relu(x, w, b), rtol=1e-5, atol=1e-4)


def test_nan_propagates_through_relu(cp, rng):
    x = _random(cp, rng, (65, 64), F16)
    w = _random(cp, rng, (64, 64), F16)
    x[3, 5] = np.nan
    out = fused_linear_relu(x, w)
    assert bool(cp.isnan(out[3]).all()) and not bool(cp.isnan(out[4]).any())


def test_uncollapsible_x_is_refused_not_copied(cp, rng):
    x = _random(cp, rng, (4, 6, 16), F16)[:, ::2]  # rows 0, 2, 4 of each of 4 blocks: no single row stride
    x = x.transpose(1, 0, 2)
    with pytest.raises(ValueError, match="fused_linear_relu: argument 'x'"):
        fused_linear_relu(x, _random(cp, rng, (16, 8), F16))


def test_x_row_above_2_31_elements(cp):
    """64-bit offsets: the last rows of x start past element 2**31."""
    m, k, n = (1 << 31) // 4096 + 70, 4096, 8
    x = cp.empty((m, k), dtype=cp.float16)
    for start in range(0, m, 1 << 16):
        rows = x[start : start + (1 << 16)]
        rows[...] = cp.random.standard_normal(rows.shape, dtype=cp.float32)
    w = cp.random.standard_normal((n, k), dtype=cp.float32).astype(cp.float16).T
    out = poisoned(cp, (m, n), cp.float16)
    fused_linear_relu(x, w, out=out)
    for rows in (slice(0, 64), slice(m - 200, m)):
        ref, tol = oracle(cp, x[rows], w, None)
        assert bool((cp.abs(out[rows].astype(cp.float64) - ref) <= tol).all())
    del x


# One case per kernel for the launch/allocation checks: tensor cores with split-K through
# atomics and through slots, tensor cores direct, SIMT.
LAUNCH_CASES = [
    Case((1,), 4096, 4096, BF16, "nk_t"),
    Case((16,), 4096, 4096, BF16, "kn"),  # split-K through slots
    Case((300,), 520, 264, BF16, "kn", config=_force(cfg.MEDIUM_TILE)),
    Case((65,), 256, 264, F32, "kn"),
    Case((64,), 4096, 520, BF16, "kn", config=_wgmma(cfg.WGMMA_64x256, 4)),  # wgmma, split-K through slots
    Case((64,), 4096, 520, BF16, "nk_t", config=_tma(cfg.TMA_64x64, 2)),  # TMA maps, split-K through slots
    Case((300,), 520, 264, F16, "kn", config=_tma(cfg.TMA_TILE)),
    Case((16,), 4096, 520, BF16, "nk_t", config=_swap(64, 16, 8, 2)),  # swapped TMA kernel, split-K through slots
    Case((130,), 256, 264, F32, "nk_t", config=TF32X3),
    Case((130,), 256, 264, F64, "kn", config=DMMA),
    Case((40,), 2048, 264, F32, "kn", config=_wide(cfg.TF32_M64_TILE, 4)),  # 3xTF32, split-K through slots
    Case((16,), 2048, 264, F64, "nk_t", config=_wide(cfg.DMMA_M16_TILE, 4)),  # float64 slots
]


def _require_kernel(cp, case):
    if case.config is not None and case.config.kind in ("wgmma", "wgmma_tma", "swap_tma"):
        _require_sm90(cp)
    if case.config is not None and getattr(case.config.tile, "dmma_k", 0):
        _require_sm90(cp, "linear_relu_dmma")


def _captured_nodes(cp, fn):
    """The node names of a CUDA graph captured around ``fn()``, and its (verbose) DOT text."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # warm: compile, split-K workspace
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
    dot = graph.debug_dot_str(1)  # cudaGraphDebugDotFlagsVerbose
    return set(re.findall(r'^\s*"([^"]+)"\s*\[', dot, flags=re.MULTILINE)), dot  # node statements


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_one_kernel_launch_per_call(cp, rng, case):
    _require_kernel(cp, case)
    x, w, b = make_inputs(cp, rng, case)
    out = cp.empty(case.lead + (case.n,), dtype=case.dtype)
    nodes, dot = _captured_nodes(cp, lambda: fused_linear_relu(x, w, b, out=out, config=case.config))
    assert len(nodes) == 1 and "linear_relu" in dot, dot


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_no_allocation_besides_out(cp, rng, case):
    class Counter(cp.cuda.MemoryHook):
        name = "cufuse-test-counter"

        def __init__(self):
            self.sizes = []

        def malloc_preprocess(self, **kwargs):
            self.sizes.append(kwargs["size"])

    _require_kernel(cp, case)
    x, w, b = make_inputs(cp, rng, case)
    out = cp.empty(case.lead + (case.n,), dtype=case.dtype)
    call = lambda **kw: fused_linear_relu(x, w, b, config=case.config, **kw)
    call(out=out)  # warm: compile, split-K workspace (documented, reused)
    with Counter() as counter:
        call(out=out)
    assert counter.sizes == []
    with Counter() as counter:
        fresh = call()
    assert len(counter.sizes) == 1 and counter.sizes[0] >= fresh.nbytes


# ---------------------------------------------------------------- programmatic dependent launch
# On compute capability 9.0 every linear kernel is launched with programmatic dependent launch
# (cufuse/_launch.py): its blocks may start while the previous kernel of the stream still runs,
# and must not touch memory before griddepcontrol.wait. A chain of calls in which each call's
# x is the previous call's (poisoned) out fails wherever a kernel reads or writes too early.

CHAIN_CONFIGS = [
    None,  # the default for M = 16
    cfg.LinearConfig("mma", cfg.STREAM_TILE, 2, reduction="slots"),
    cfg.LinearConfig("mma", cfg.STREAM_TILE, 4, reduction="atomic"),
    cfg.LinearConfig("wgmma_tma", cfg.TMA_64x64, 2, reduction="slots"),
    cfg.LinearConfig("wgmma", cfg.WGMMA_64x64, 2, reduction="slots"),
    cfg.LinearConfig("swap_tma", cfg.SwapTile(64, 16, 8), 2, reduction="slots"),
    cfg.LinearConfig("swap_tma", cfg.SwapTile(64, 16, 16)),
    cfg.LinearConfig("swap_tma", cfg.SwapTile(64, 64, 8)),
]


def _chain_id(config):
    return "default" if config is None else f"{config.kind}-mx{getattr(config.tile, 'mx', 0)}-s{config.splits}{config.reduction[0]}"


@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
@pytest.mark.parametrize("config", CHAIN_CONFIGS, ids=_chain_id)
def test_back_to_back_calls_wait_for_the_previous_output(cp, rng, config, kmajor):
    if config is not None and config.kind in ("wgmma", "wgmma_tma", "swap_tma"):
        _require_sm90(cp)
    m, k, steps = 16, 4096, 10

    def scaled(shape, scale):  # He-scaled weights keep the values O(1) along the ReLU chain
        return cp.asarray((rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(BF16))

    weights = [scaled((k, k), math.sqrt(2 / k)) for _ in range(2)]
    weights = [w.T if kmajor else w for w in weights]  # .T: a (N, K) array viewed as (K, N), K-major
    bias = scaled((k,), 0.1)
    chain = [_random(cp, rng, (m, k), BF16)] + [poisoned(cp, (m, k), BF16) for _ in range(steps)]
    cp.cuda.get_current_stream().synchronize()
    for i in range(steps):  # back to back: no synchronisation between the calls
        fused_linear_relu(chain[i], weights[i % 2], bias, out=chain[i + 1], config=config)
    cp.cuda.get_current_stream().synchronize()
    for i in range(steps):
        ref, tol = oracle(cp, chain[i], weights[i % 2], bias)
        err = cp.abs(to_float64(cp, chain[i + 1]) - ref)
        bad = int((~(err <= tol)).sum())
        assert bad == 0, f"step {i}: {bad} of {err.size} elements off the oracle of the previous step's output"


def test_hopper_launches_with_programmatic_dependent_launch(cp, rng, monkeypatch):
    _require_sm90(cp)
    import cufuse.linear as linear_module

    x, w, b = (_random(cp, rng, shape, BF16) for shape in ((16, 256), (256, 264), (264,)))
    for enabled in (True, False):
        monkeypatch.setattr(cfg, "PDL_LAUNCH", enabled)
        linear_module._plans.clear()
        out = poisoned(cp, (16, 264), BF16)
        fused_linear_relu(x, w, b, out=out)
        ref, tol = oracle(cp, x, w, b)
        assert bool((cp.abs(to_float64(cp, out) - ref) <= tol).all())
        plans = list(linear_module._plans.values())
        assert len(plans) == 1 and (plans[0].pdl is not None) == enabled
        if enabled:  # a one-wave grid: one block an SM
            smem_per_sm = cp.cuda.Device().attributes["MaxSharedMemoryPerMultiprocessor"]
            assert 2 * (plans[0].pdl.config.smem + plans[0].kernel.shared_size_bytes + 1024) > smem_per_sm
    linear_module._plans.clear()
    fused_linear_relu(_random(cp, rng, (cfg.PDL_MAX_M + 1, 256), BF16), w, b)  # past the weight streams: plain
    assert [plan.pdl for plan in linear_module._plans.values()] == [None]
    linear_module._plans.clear()
