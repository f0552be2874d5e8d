"""CPU tests of the linear variants: operand eligibility, tensor maps, tile budgets, kernel
specs, every variant's ``check`` (the errors a ``config=`` gets) and ``plan`` (arguments in
the kernels' order, split-K scratch, programmatic dependent launch)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from cufuse._core import launch as core_launch
from cufuse._core.device import A100, H200, SMEM_RESERVED_PER_BLOCK
from cufuse._core.plans import NULL, Scratch, TensorMap
from cufuse.ops.linear import select
from cufuse.ops.linear.dmma import DMMA_FEW_ROW_TILES, DMMA_PIPELINED_TILE, DMMA_M16_TILE, PipelinedDmmaConfig
from cufuse.ops.linear.gemv import GemvConfig, GemvTile
from cufuse.ops.linear.mma import GEMM_TILES, MEDIUM_TILE, STREAM64_TILE, STREAM_TILE, MmaConfig
from cufuse.ops.linear.operands import mma_eligible, operand_maps, rows_view, tma_eligible
from cufuse.ops.linear.plan import plan_linear
from cufuse.ops.linear.swap_tma import SWAP_DEFAULT_TILES, SwapConfig, SwapTile
from cufuse.ops.linear.wgmma import TMA_64x64, TMA_TILE, TMA_TILES, WGMMA_TILES, TmaConfig, WgmmaConfig, \
    WgmmaGemmTile
from cufuse.ops.linear.wide import DMMA_TILE, TF32_FEW_ROW_TILES, TF32_TILE, DmmaConfig, Tf32x3Config

from .cases import BF16, F16, F32, F64

BASE = 0x10000000


def plan(m, k, n, dtype, *, w="kn", dev=H200, config=None, x_offset=0, bias_stride=1, lead=None):
    """plan_linear of a C-contiguous x (M, K) (or ``lead`` + (K,)) and a weight (K, N) stored
    row-major ("kn") or as a transposed (N, K) array ("nk_t")."""
    dtype = np.dtype(dtype)
    x_shape = (lead or (m,)) + (k,)
    x_strides = tuple(int(np.prod(x_shape[i + 1:])) for i in range(len(x_shape)))
    w_strides = (n, 1) if w == "kn" else (1, k)
    return plan_linear(x_shape, x_strides, BASE + x_offset * dtype.itemsize, (k, n), w_strides, BASE, bias_stride,
                       None, dtype, dev, config)


def _eligible(dtype, k, n, w_strides, w_offset=0, x_row_stride=None, x_ptr=0):
    itemsize = np.dtype(dtype).itemsize
    return mma_eligible(dtype, k, n, x_ptr, x_row_stride or k, 1, 8, 256 + w_offset * itemsize, *w_strides)


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
    assert _eligible(F32, 68, 40, (1, 68)) is True  # float32: 4-float chunks (K % 4 suffices)
    assert _eligible(F32, 64, 34, (34, 1)) is None
    assert _eligible(F64, 64, 40, (40, 1)) is False  # float64: 2-double chunks
    assert _eligible(F64, 63, 40, (40, 1)) is None


# (dtype, K, N, x address, x row stride, M, weight address, w k stride, w n stride, K-major) -> TMA can read it
TMA_LAYOUTS = [
    ((BF16, 4096, 4096, 256, 4096, 64, 512, 1, 4096, True), True),  # (N, K).T
    ((F16, 4096, 4096, 256, 4096, 64, 512, 4096, 1, False), True),  # (K, N)
    ((BF16, 8, 8, 256, 8, 7, 512, 8, 1, False), True),  # one box covers everything
    ((BF16, 64, 1, 256, 123, 1, 512, 1, 77, True), True),  # single rows: their strides do not matter
    ((BF16, 64, 64, 256, 72, 65, 512, 64, 1, False), True),  # padded x rows
    ((BF16, 0, 64, 256, 0, 3, 512, 64, 1, False), False),  # K = 0: no tensor map
    ((BF16, 64, 64, 256, 0, 3, 512, 64, 1, False), False),  # x rows broadcast (row stride 0)
    ((BF16, 64, 64, 264, 64, 3, 512, 64, 1, False), False),  # x base not 16-byte aligned
    ((BF16, 64, 64, 256, 32, 3, 512, 64, 1, False), False),  # overlapping x rows
    ((BF16, 64, 64, 256, 64, 3, 512, 1, 68, True), False),  # weight rows 136 bytes apart
    ((F32, 64, 64, 256, 64, 3, 512, 64, 1, False), False),  # 16-bit types only
    ((BF16, 64, 64, 256, 64, 3, 512, 64, 1, None), False),  # not mma_eligible
]


@pytest.mark.parametrize("args,expected", TMA_LAYOUTS)
def test_tma_eligible(args, expected):
    assert tma_eligible(*args) is expected


def test_operand_maps_match_the_kernel_boxes():
    x_map, w_map = operand_maps(BF16, 300, 520, 264, 264, 264, True, 128, 256, 256)
    assert (x_map.inner, x_map.outer, x_map.stride, x_map.box_inner, x_map.box_outer) == (264, 300, 528, 64, 128)
    assert (w_map.inner, w_map.outer, w_map.stride, w_map.box_inner, w_map.box_outer) == (264, 520, 528, 64, 256)
    assert all(g.swizzle == 128 for g in (x_map, w_map))
    # The TMA plans: an N-major weight's box is BK k rows; the swapped kernel's x box is its mx rows.
    w_map = plan(7, 264, 520, F16, config=TmaConfig(tile=TMA_64x64)).launches[0].args[1].geometry
    assert (w_map.inner, w_map.outer, w_map.stride, w_map.box_inner, w_map.box_outer) == (520, 264, 1040, 64, 64)
    swap = SwapConfig(tile=SwapTile(bn=64, mx=8, stages=4, bk=256))
    maps = [a.geometry for a in plan(3, 264, 520, F16, config=swap).launches[0].args if isinstance(a, TensorMap)]
    assert (maps[0].outer, maps[0].box_outer) == (3, 8) and (maps[1].inner, maps[1].box_outer) == (520, 256)


@pytest.mark.parametrize("m,promotion", [(1, 128), (64, 128), (65, 256), (8192, 256)])
def test_tma_maps_promote_by_regime(m, promotion):
    for config, w in ((TmaConfig(tile=TMA_64x64), "nk_t"), (SwapConfig(tile=SWAP_DEFAULT_TILES[64]), "kn")):
        if m <= 64 or isinstance(config, TmaConfig):
            maps = [a.geometry for a in plan(m, 8192, 8192, BF16, w=w, config=config).launches[0].args
                    if isinstance(a, TensorMap)]
            assert [g.l2_promotion for g in maps] == [promotion, promotion]


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_tiles_fit_their_devices(dev):
    for tile in GEMM_TILES + (STREAM_TILE, STREAM64_TILE):
        assert tile.smem_bytes() <= dev.max_smem_per_block and tile.blocks_per_sm(dev) >= 1
    for tile in (TF32_TILE, DMMA_TILE) + TF32_FEW_ROW_TILES:
        assert tile.smem_bytes() <= dev.max_smem_per_block
    assert TF32_TILE.blocks_per_sm(dev) == DMMA_TILE.blocks_per_sm(dev) == 1  # 8 warps an SM
    assert all(2 <= t.blocks_per_sm(H200) <= t.max_blocks_per_sm for t in TF32_FEW_ROW_TILES + DMMA_FEW_ROW_TILES)


def test_hopper_tiles_fit_and_leave_room_for_static_shared_memory():
    for tile in WGMMA_TILES + TMA_TILES:
        assert tile.smem_bytes() <= H200.max_smem_per_block and tile.blocks_per_sm(H200) == tile.max_blocks_per_sm
        assert tile.stages - 1 - tile.pending >= 1  # the cp.async kernel loads at least one tile ahead
    for tile in TMA_TILES:  # a producer warp and 2 x stages mbarriers more than the cp.async tile
        plain = WgmmaGemmTile(bm=tile.bm, bn=tile.bn, stages=tile.stages, max_blocks_per_sm=tile.max_blocks_per_sm)
        assert tile.threads == plain.threads + 32 and tile.smem_bytes() == plain.smem_bytes() + 16 * tile.stages
    # 2 x (7 x 16 KB + 1 KB align + 1 KB reserved) is the H200's 228 KB exactly: the split-K
    # flag's static bytes push the second block out (measured: s7 2.0-2.4 TB/s, s6 3.2).
    assert WgmmaGemmTile(bm=64, bn=64, stages=7, max_blocks_per_sm=2).blocks_per_sm(H200) == 1
    assert WgmmaGemmTile(bm=64, bn=64, stages=6, max_blocks_per_sm=2).blocks_per_sm(H200) == 2
    for tile in SWAP_DEFAULT_TILES.values():
        assert tile.smem_bytes() == tile.stages * (tile.mx + tile.bn) * tile.bk * 2 + 1024 + 16 * tile.stages
        assert tile.smem_bytes() <= H200.max_smem_per_block and tile.blocks_per_sm(H200) >= 1
        assert (tile.threads, tile.bm) == (2 * tile.bn + 32, tile.mx)


def test_pipelined_dmma_tile_shape():
    t = DMMA_PIPELINED_TILE  # cuBLAS's: BK 16, 4 warps of 64x32, two blocks an SM
    assert (t.bk, t.itemsize, t.threads, t.max_blocks_per_sm, t.dmma_k) == (16, 8, 128, 2, 8)
    assert t.smem_bytes() == t.stages * (t.bm + t.bn) * 16 * 8 == 73728 and t.blocks_per_sm(H200) == 2
    assert (t.threads // (t.bk // 2)) % 4 == 0 and (t.threads // (t.bn // 2)) % 4 == 0  # whole cp.async passes
    spec = PipelinedDmmaConfig(tile=t).spec(F64, True)
    assert (spec.name, spec.template_args, spec.min_cc) == ("linear_dmma", (128, 64, 2, 2, 3, 8, True), 90)


@pytest.mark.parametrize("shape", [dict(bn=256, mx=16, stages=8), dict(bn=64, mx=32, stages=8),
                                   dict(bn=64, mx=12, stages=8),
                                   dict(bn=64, mx=128, stages=8), dict(bn=64, mx=16, stages=4, bk=192)])
def test_swap_tile_refuses_shapes_the_kernel_lacks(shape):
    with pytest.raises(ValueError, match="SwapTile"):
        SwapTile(**shape)


def test_spec_names_and_sources():
    specs = {s.name: s for s in select.instantiations(H200)}
    assert {name: s.source for name, s in specs.items()} == {
        "linear_simt": "linear/simt.cu", "linear_gemv": "linear/gemv.cu", "linear_wide": "linear/wide.cu",
        "linear_dmma": "linear/dmma.cu", "linear_mma": "linear/mma.cu", "linear_wgmma": "linear/wgmma.cu",
        "linear_wgmma_tma": "linear/wgmma_tma.cu", "linear_swap_tma": "linear/swap_tma.cu",
        "gated_linear_mma": "linear/mma.cu", "gated_linear_simt": "linear/simt.cu",
        "gated_linear_wgmma_tma": "linear/wgmma_tma.cu", "gated_linear_swap_tma": "linear/swap_tma.cu",
        "linear_pingpong_tma": "linear/pingpong_tma.cu", "gated_linear_pingpong_tma": "linear/pingpong_tma.cu"}
    spec = SwapConfig(tile=SWAP_DEFAULT_TILES[16]).spec(BF16, False)
    assert spec.template_args == ("__nv_bfloat16", 64, 16, 256, 5, False, True)
    assert all(s.name not in ("linear_swap_tma", "linear_dmma") for s in select.instantiations(A100))


@pytest.mark.parametrize("args,config,dev,message", [
    ((8, 64, 40, F32), MmaConfig(tile=MEDIUM_TILE), H200, "asks for the mma kernel, which these operands' dtype"),
    ((8, 64, 40, BF16), WgmmaConfig(tile=WGMMA_TILES[0]), A100,
     "asks for the wgmma kernel, which needs compute capability 9.0"),
    ((3, 0, 8, F16), TmaConfig(tile=TMA_64x64), H200,
     "asks for the wgmma_tma kernel, which needs operands a TMA tensor map"),
    ((17, 64, 64, BF16), SwapConfig(tile=SwapTile(bn=64, mx=16, stages=8)), H200,
     "takes at most M = 16 rows, got M = 17"),
    ((9, 64, 64, F16), SwapConfig(tile=SwapTile(bn=64, mx=8, stages=8)), H200, "takes at most M = 8 rows, got M = 9"),
    ((4, 64, 40, F16), GemvConfig(tile=GemvTile(rows=1)), H200,
     "asks for the gemv kernel, which takes float32 or float64"),
    ((4, 64, 40, F64), GemvConfig(tile=GemvTile(rows=1), splits=2), H200,
     "expected splits=1 for the float64 gemv kernel"),
    ((5, 64, 40, F32), GemvConfig(tile=GemvTile(rows=4)), H200, "expected a gemv tile of at least M = 5 rows, got 4"),
    ((8, 64, 40, F16), Tf32x3Config(tile=TF32_TILE), H200, "asks for the tf32x3 kernel, which needs float32 operands"),
    ((8, 64, 40, F32), DmmaConfig(tile=DMMA_TILE), H200, "asks for the dmma kernel, which needs float64 operands"),
    ((8, 64, 64, F32), Tf32x3Config(tile=DMMA_PIPELINED_TILE), H200, "expected a tf32x3 config on a float32 WideTile"),
    ((8, 64, 64, F64), PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE), A100, "pipelined float64 kernel"),
    ((8, 64, 64, F32), PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE), H200, "pipelined float64 kernel"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_configs_refuse_what_their_kernel_cannot_run(args, config, dev, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan(*args, dev=dev, config=config)
    with pytest.raises(TypeError, match="argument 'config' expected None or one of MmaConfig"):
        plan(8, 64, 64, F16, config="mma")


def test_operands_without_aligned_rows_refuse_the_16_byte_kernels():
    for config in (MmaConfig(tile=MEDIUM_TILE), WgmmaConfig(tile=WGMMA_TILES[0]), TmaConfig(tile=TMA_TILE),
                   SwapConfig(tile=SWAP_DEFAULT_TILES[8])):
        with pytest.raises(ValueError, match=f"asks for the {config.kind} kernel"):
            plan(8, 64, 64, BF16, x_offset=1, config=config)  # misaligned x
    with pytest.raises(ValueError, match="asks for the gemv kernel, which needs 16-byte aligned rows"):
        plan(1, 66, 64, F32, config=GemvConfig(tile=GemvTile(rows=1)))


def test_uncollapsible_x_and_empty_outputs():
    with pytest.raises(ValueError, match="fused_linear: argument 'x' expected leading axes"):
        plan_linear((4, 3, 16), (100, 32, 1), BASE, (16, 8), (8, 1), BASE, 1, None, F16, H200)
    assert rows_view((2, 1, 5, 16), (80, 80, 16, 1)) == (10, 16, 1)
    assert rows_view((16,), (2,)) == (1, 16, 2)
    assert plan(0, 16, 4, BF16).launches == () and plan(3, 16, 0, F32).launches == ()
    assert len(plan(3, 0, 4, F16).launches) == 1  # K = 0: bias + ReLU only


def test_plan_arguments_follow_the_kernels_order():
    launch = plan(4096, 4096, 4096, BF16, dev=A100).launches[0]  # mma, unsplit
    assert launch.args[:6] == ("x", "weight", "bias", "out", NULL, NULL) and not launch.pdl
    assert [type(a) for a in launch.args[6:]] == [np.int64] * 6 + [np.int32] * 4
    split = plan(16, 8192, 8192, BF16, dev=A100)  # the mma stream, split through slots
    launch = split.launches[0]
    assert launch.args[4:6] == (Scratch(0), Scratch(1)) and launch.grid[2] > 1
    assert split.scratch.purpose == "linear-split-slots" and split.scratch.buffers[1][0] == np.int32
    tma = plan(16, 8192, 8192, BF16).launches[0]  # the swapped TMA stream: maps, no strides
    assert isinstance(tma.args[0], TensorMap) and tma.args[0].name == "x" and tma.args[1].name == "weight"
    assert tma.args[2:6] == ("bias", "out", NULL, NULL) and len(tma.args) == 6 + 7 and tma.pdl
    simt = plan(7, 33, 17, F16).launches[0]  # no workspace arguments at all
    assert simt.args[:4] == ("x", "weight", "bias", "out") and len(simt.args) == 4 + 10
    assert plan(7, 33, 17, F16, bias_stride=None).launches[0].args[4 + 7] == np.int64(0)
    dmma = plan(16, 8192, 8192, F64, config=PipelinedDmmaConfig(tile=DMMA_M16_TILE, splits=3))
    assert dmma.scratch.buffers[0][1] == 2 * 128 * 3 * 16 * 64  # two float32 cells a double
    gemv = plan(1, 8192, 8192, F32)  # row-major float32 gemv: split through slots of M x N cells
    splits = gemv.launches[0].grid[1]
    assert gemv.scratch.purpose == "linear-split-slots" and gemv.scratch.buffers[0][1] == splits * 8192 > 8192


def test_pdl_only_for_weight_streams_on_hopper():
    assert plan(1, 256, 264, BF16).launches[0].pdl and plan(64, 256, 264, F32).launches[0].pdl
    assert not plan(65, 256, 264, BF16).launches[0].pdl and not plan(16, 256, 264, BF16, dev=A100).launches[0].pdl


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
@pytest.mark.parametrize("smem,static", [(0, 0), (20000, 0), (81920, 1024), (200000, 0), (16384, 4096)])
def test_pdl_smem_keeps_one_wave_grids_at_one_block_an_sm(dev, smem, static):
    padded = core_launch.pdl_smem(smem, static, dev.sm_count, dev)
    assert smem <= padded <= max(smem, dev.max_smem_per_block - static)
    assert 2 * (padded + static + SMEM_RESERVED_PER_BLOCK) > dev.smem_per_sm  # a second block cannot fit
    assert core_launch.pdl_smem(smem, static, dev.sm_count + 1, dev) == smem  # more than a wave: as asked
