"""CPU tests of fused_linear's activations and fused_gated_linear: the NumPy path's exact
float64 formulas, argument errors, the gated selection, its plans' arguments in the kernels'
order and the variants that refuse the other function's problems."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cufuse
from cufuse import reference
from cufuse._core.device import A100, H200
from cufuse._core.plans import NULL, Scratch, TensorMap
from cufuse.ops.linear import fused_gated_linear, fused_linear, fused_linear_relu, select
from cufuse.ops.linear.mma import SMALL_TILE, STREAM64_TILE, STREAM_TILE, GatedMmaConfig, MmaConfig
from cufuse.ops.linear.operands import ACTIVATION_CODES, check_bias_shape
from cufuse.ops.linear.pingpong import GatedPingPongConfig, PingPongConfig
from cufuse.ops.linear.plan import plan_gated, plan_linear
from cufuse.ops.linear.simt import SIMT_SMALL, GatedSimtConfig, SimtConfig
from cufuse.ops.linear.swap_tma import GATED_SWAP_DEFAULT_TILES, SWAP_DEFAULT_TILES, GatedSwapConfig, GatedSwapTile, \
    SwapConfig
from cufuse.ops.linear.wgmma import GATED_TMA_TILES, TMA_128x128, TMA_64x64, TMA_TILE, GatedTmaConfig, TmaConfig

from .cases import BF16, F16, F32, F64

BASE = 0x10000000
EXACT = {  # the float64 formulas, element by element with math's functions
    None: lambda v: v,
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
    "gelu_tanh": lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1 + math.exp(-v)) if v > -700 else 0.0 * v,
}


@pytest.mark.parametrize("activation", list(EXACT), ids=str)
def test_numpy_path_is_the_exact_float64_formula(rng, activation):
    x = rng.standard_normal((7, 40)) * 4  # values out to the tails
    w, b = rng.standard_normal((40, 24)), rng.standard_normal(24)
    got = fused_linear(x, w, b, activation=activation)
    pre = x @ w + b
    want = np.vectorize(EXACT[activation])(pre)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)  # the tails cancel: absolute
    gated = fused_gated_linear(x, w, w[:, ::-1], activation=activation)
    np.testing.assert_allclose(gated, np.vectorize(EXACT[activation])(x @ w) * (x @ w[:, ::-1]), rtol=1e-12,
                               atol=1e-12)


def test_activation_special_values():
    v = np.array([-np.inf, -1e300, -40.0, 0.0, 40.0, np.inf, np.nan])
    for name in reference.ACTIVATIONS:
        out = reference.apply_activation(name, v)
        assert np.isnan(out[-1]) and out[-2] == np.inf
        assert out[0] == (-np.inf if name is None else 0.0)
        assert abs(out[1]) <= (np.inf if name is None else 0.0)


def test_fused_linear_relu_is_fused_linear_with_relu(rng):
    x, w = rng.standard_normal((5, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    assert np.array_equal(fused_linear_relu(x, w, 1.5), fused_linear(x, w, 1.5, activation="relu"))
    assert np.array_equal(fused_linear(x, w), fused_linear(x, w, activation=None))  # the default: plain linear
    assert cufuse.fused_linear is fused_linear and cufuse.fused_gated_linear is fused_gated_linear


@pytest.mark.parametrize("activation", ["tanh", "ReLU", 1, ("relu",), ["gelu"]])
def test_bad_activation_names_function_and_argument(rng, activation):
    x, w = rng.standard_normal((2, 4)), rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match="fused_linear: argument 'activation' expected one of None"):
        fused_linear(x, w, activation=activation)
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'activation'"):
        fused_gated_linear(x, w, w, activation=activation)


def test_gated_argument_errors(rng):
    x, w = rng.standard_normal((2, 4)), rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'w_up' expected the shape of w_gate"):
        fused_gated_linear(x, w, w[:, :2])
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'w_gate' expected shape \\(4, N\\)"):
        fused_gated_linear(x, w.T, w.T)
    with pytest.raises(TypeError, match="fused_gated_linear: argument 'w_up' expected dtype float64"):
        fused_gated_linear(x, w, w.astype(np.float32))
    with pytest.raises(TypeError, match="fused_gated_linear: argument 'config' expected None or one of "
                                        "GatedTmaConfig, GatedPingPongConfig, GatedSwapConfig, GatedMmaConfig, "
                                        "GatedSimtConfig"):
        fused_gated_linear(x, w, w, config=MmaConfig(tile=STREAM_TILE))


@pytest.mark.parametrize("shape,full", [((24,), True), ((1, 24), True), ((), False), ((1,), False), ((1, 1), False)])
def test_bias_shape_rule(shape, full):
    assert check_bias_shape("f", shape, 24) is full


@pytest.mark.parametrize("shape", [(2, 24), (23,), (24, 1), (2, 1, 24)])
def test_bias_shape_rule_refuses_row_dependent_biases(shape):
    with pytest.raises(ValueError, match=r"f: argument 'bias' expected shape \(24,\), \(1, 24\)"):
        check_bias_shape("f", shape, 24)


def gated(m, k, n, dtype, *, w="kn", up=None, dev=H200, config=None, activation="silu"):
    dtype = np.dtype(dtype)
    strides = {"kn": (n, 1), "nk_t": (1, k), "odd": (n + 3, 1)}
    return plan_gated((m, k), (k, 1), BASE, (k, n), strides[w], BASE, strides[up or w], BASE, None, dtype, dev,
                      config, activation=ACTIVATION_CODES[activation])


@pytest.mark.parametrize("m,tile", [(1, STREAM_TILE), (16, STREAM_TILE), (17, STREAM64_TILE), (64, STREAM64_TILE)])
def test_gated_small_m_streams_both_weights_on_tensor_cores(m, tile):
    config = select.choose(gated_problem(m, 4096, 11008, BF16, A100), A100)
    assert type(config) is GatedMmaConfig and config.tile == tile


@pytest.mark.parametrize("w", ["kn", "nk_t"])
@pytest.mark.parametrize("m,mx", [(1, 8), (8, 8), (9, 16), (16, 16), (17, 64), (64, 64)])
def test_gated_small_m_on_hopper_is_the_gated_swapped_stream(m, mx, w):
    config = select.choose(gated_problem(m, 4096, 11008, BF16, H200, w), H200)
    assert config == GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[mx], splits=config.splits)
    # ceil(11008 / 64) = 172 blocks of 64 output columns already cover the SMs: no split
    assert config.splits == 1
    few = select.choose(gated_problem(m, 4096, 1024, BF16, H200, w), H200)
    assert few.splits > 1  # 16 blocks: split K until the SMs are covered


@pytest.mark.parametrize("w", ["kn", "nk_t"])
@pytest.mark.parametrize("m", [65, 128, 512, 4096, 16384])
def test_gated_gemms_on_hopper_run_the_gated_tma_kernels(m, w):
    for n in (1024, 4096, 11008, 14336, 28672):
        config = select.choose(gated_problem(m, 4096, n, BF16, H200, w), H200)
        # the linear rules on the 2N columns, on the same tile shape (the gated kernels' tiles are
        # a subset of the linear ones: a linear ping-pong choice beat them all)
        linear = select.choose(_linear_problem(m, 4096, 2 * n, BF16, H200, w), H200)
        if type(linear) is PingPongConfig:
            assert config == GatedPingPongConfig(tile=linear.tile), (m, n, config, linear)
        elif type(config) is not GatedPingPongConfig:
            assert type(config) is GatedTmaConfig and config.tile in GATED_TMA_TILES, (m, n, config)
            if type(linear) is TmaConfig and linear.tile in GATED_TMA_TILES:
                assert (config.tile, config.splits) == (linear.tile, linear.splits), (m, n, config, linear)


def test_gated_hopper_kernels_need_tensor_maps_over_both_weights():
    choose = select.choose
    mixed = gated_problem(128, 4096, 4096, BF16, H200, "kn", "nk_t")  # layouts differ: SIMT
    assert type(choose(mixed, H200)) is GatedSimtConfig
    broadcast = _gated_with_x_rows(128, 0)  # x rows broadcast (stride 0): no tensor map, mma
    assert not broadcast.tma_ok and broadcast.tensor_ok
    assert type(choose(broadcast, H200)) is GatedMmaConfig
    assert type(choose(_gated_with_x_rows(16, 0), H200)) is GatedMmaConfig


def _gated_with_x_rows(m, ldx):
    from cufuse.ops.linear.operands import gated_problem as make

    return make(m, ldx, 1, BASE, 4096, 4096, (4096, 1), BASE, (4096, 1), BASE, None, BF16, H200, 4,
                "fused_gated_linear")


def _linear_problem(m, k, n, dtype, dev, w="kn"):
    from cufuse.ops.linear.operands import linear_problem

    strides = {"kn": (n, 1), "nk_t": (1, k)}
    return linear_problem(m, k, 1, BASE, k, n, strides[w], BASE, None, None, np.dtype(dtype), dev)


def gated_problem(m, k, n, dtype, dev, w="kn", up=None):
    from cufuse.ops.linear.operands import gated_problem as make

    strides = {"kn": (n, 1), "nk_t": (1, k), "odd": (n + 3, 1)}
    return make(m, k, 1, BASE, k, n, strides[w], BASE, strides[up or w], BASE, None, np.dtype(dtype), dev, 4,
                "fused_gated_linear")


def test_gated_selection_by_dtype_and_layout():
    choose = select.choose
    assert type(choose(gated_problem(4096, 4096, 11008, F16, H200), H200)) is GatedPingPongConfig
    assert type(choose(gated_problem(4096, 4096, 11008, F16, H200, "nk_t"), H200)) is GatedPingPongConfig
    assert type(choose(gated_problem(300, 4096, 4096, F16, H200, "nk_t"), H200)) is GatedTmaConfig  # 192 tiles
    assert type(choose(gated_problem(4096, 4096, 11008, F16, A100, "nk_t"), A100)) is GatedMmaConfig
    for problem in (gated_problem(64, 4096, 4096, F32, H200), gated_problem(64, 4096, 4096, F64, H200),
                    gated_problem(64, 4096, 4096, F16, H200, "kn", "nk_t"),  # layouts differ
                    gated_problem(64, 4096, 4096, BF16, H200, "odd")):  # rows not 16-byte aligned
        assert type(choose(problem, H200)) is GatedSimtConfig
    big = choose(gated_problem(4096, 4096, 11008, BF16, A100), A100)
    assert big == GatedMmaConfig(tile=SMALL_TILE)
    few = choose(gated_problem(128, 4096, 1024, BF16, A100), A100)  # few tiles: split K
    assert few.splits > 1
    hopper_few = choose(gated_problem(128, 4096, 1024, BF16, H200), H200)
    assert type(hopper_few) is GatedTmaConfig and hopper_few.splits > 1


def test_gated_plan_arguments_follow_the_kernels_order():
    split = gated(16, 8192, 4096, BF16, dev=A100)  # the mma stream (H200: the gated TMA stream)
    launch = split.launches[0]
    assert launch.args[:6] == ("x", "w_gate", "w_up", "out", Scratch(0), Scratch(1)) and launch.grid[2] > 1
    # m, n, k, ldx, ldw gate, ldw up; k tiles a split, raster group, paired store, activation
    assert [type(a) for a in launch.args[6:]] == [np.int64] * 6 + [np.int32] * 4
    assert launch.args[-1] == ACTIVATION_CODES["silu"] and launch.args[10] == 4096
    assert launch.grid[0] == 4096 * 2 // STREAM_TILE.bn  # the tiles of 2N columns
    assert split.scratch.purpose == "linear-split-slots"
    simt = gated(7, 33, 17, F32, w="kn", up="nk_t", activation="gelu").launches[0]
    assert simt.args[:4] == ("x", "w_gate", "w_up", "out") and len(simt.args) == 4 + 11
    assert simt.args[4:13] == (7, 17, 33, 33, 1, 17, 1, 1, 33) and simt.args[-1] == ACTIVATION_CODES["gelu"]
    unsplit = gated(4096, 4096, 4096, F16, dev=A100).launches[0]
    assert unsplit.args[4:6] == (NULL, NULL)


@pytest.mark.parametrize("w", ["kn", "nk_t"])
def test_gated_tma_plans_map_x_and_both_weights(w):
    k, n = 4104, 520
    for config, x_rows, w_rows in ((GatedTmaConfig(tile=TMA_TILE, splits=2), 128, 128),
                                   (GatedTmaConfig(tile=TMA_128x128), 128, 64),
                                   (GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[16], splits=3), 16, 64)):
        m = 16 if type(config) is GatedSwapConfig else 300
        launch = gated(m, k, n, BF16, w=w, config=config).launches[0]
        maps = launch.args[:3]
        assert [type(a) for a in maps] == [TensorMap] * 3 and [a.name for a in maps] == ["x", "w_gate", "w_up"]
        assert (maps[0].geometry.box_inner, maps[0].geometry.box_outer) == (64, x_rows)
        for weight in maps[1:]:
            g = weight.geometry
            # K-major: boxes of BN / 2 rows of 64 k; N-major: 64 n x BK k rows
            assert (g.inner, g.outer, g.box_inner, g.box_outer) == ((k, n, 64, w_rows) if w == "nk_t" else
                                                                    (n, k, 64, config.tile.bk))
        assert launch.args[3:6] == (("out", Scratch(0), Scratch(1)) if config.splits > 1 else ("out", NULL, NULL))
        assert launch.grid[0] == (1 if m <= 64 else 3) * -(-2 * n // config.tile.bn)  # tiles of BN / 2 columns
        assert launch.block[0] == config.tile.threads and launch.args[-1] == ACTIVATION_CODES["silu"]
        # m, n, k, k tiles a split, raster group[, paired store], activation: no strides, no bias
        scalars = launch.args[6:]
        assert tuple(scalars[:3]) == (m, n, k) and all(type(a) is np.int64 for a in scalars[:3])
        assert all(type(a) is np.int32 for a in scalars[3:])
        assert len(scalars) == 3 + 2 + (0 if type(config) is GatedSwapConfig else 1) + 1


def test_gated_hopper_configs_refuse_what_they_cannot_run():
    problem = gated_problem(300, 4096, 4096, BF16, H200)
    with pytest.raises(ValueError, match="asks for the gated_wgmma_tma kernel, which takes the tiles of 128x256, "
                                         "128x128, 64x256, got 64x64"):
        GatedTmaConfig(tile=TMA_64x64).check(problem, H200)
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'config' asks for the wgmma_tma kernel, which "
                                         "runs fused_linear only"):
        TmaConfig(tile=TMA_TILE).check(problem, H200)
    with pytest.raises(ValueError, match="fused_linear: argument 'config' asks for the gated_wgmma_tma kernel, which "
                                         "runs fused_gated_linear only"):
        GatedTmaConfig(tile=TMA_TILE).check(_linear_problem(300, 4096, 4096, BF16, H200), H200)
    with pytest.raises(ValueError, match="asks for the gated_wgmma_tma kernel, which needs compute capability 9.0"):
        GatedTmaConfig(tile=TMA_TILE).check(gated_problem(300, 4096, 4096, BF16, A100), A100)
    with pytest.raises(ValueError, match="asks for the gated_swap_tma kernel with x rows padded to 16, which takes at "
                                         "most M = 16 rows, got M = 300"):
        GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[16]).check(problem, H200)
    with pytest.raises(ValueError, match="asks for the gated_swap_tma kernel, which takes a GatedSwapTile"):
        GatedSwapConfig(tile=SWAP_DEFAULT_TILES[16]).check(gated_problem(16, 4096, 4096, BF16, H200), H200)
    with pytest.raises(ValueError, match="asks for the swap_tma kernel, which takes a SwapTile"):
        SwapConfig(tile=GATED_SWAP_DEFAULT_TILES[16]).check(_linear_problem(16, 4096, 4096, BF16, H200), H200)
    with pytest.raises(ValueError, match="GatedSwapTile: bn 128"):
        GatedSwapTile(bn=64, mx=16, stages=4)
    with pytest.raises(ValueError, match="needs operands a TMA tensor map can describe"):
        GatedTmaConfig(tile=TMA_128x128).check(_gated_with_x_rows(128, 0), H200)


def test_linear_plans_carry_the_activation():
    for name, code in ACTIVATION_CODES.items():
        for m, dtype in ((1, BF16), (16, F32), (300, F64), (7, F16)):
            launch = plan_linear((m, 264), (264, 1), BASE, (264, 72), (72, 1), BASE, 1, None, np.dtype(dtype), H200,
                                 activation=code).launches[0]
            assert launch.args[-1] == np.int32(code)


def test_variants_refuse_the_other_functions_problems():
    problem = gated_problem(16, 256, 64, BF16, H200)
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'config' asks for the mma kernel, which runs "
                                         "fused_linear only"):
        MmaConfig(tile=STREAM_TILE).check(problem, H200)
    with pytest.raises(ValueError, match="asks for the simt kernel, which runs fused_linear only"):
        SimtConfig(tile=SIMT_SMALL).check(problem, H200)
    with pytest.raises(ValueError, match="fused_linear: argument 'config' asks for the gated_simt kernel, which runs "
                                         "fused_gated_linear only"):
        plan_linear((4, 16), (16, 1), BASE, (16, 8), (8, 1), BASE, None, None, np.dtype(F32), H200,
                    GatedSimtConfig(tile=SIMT_SMALL))
    with pytest.raises(ValueError, match="asks for the gated_mma kernel, which these operands' dtype"):
        GatedMmaConfig(tile=STREAM_TILE).check(gated_problem(16, 256, 64, F32, H200), H200)


@pytest.mark.parametrize("dev", [H200, A100], ids=["h200", "a100"])
def test_gated_instantiations_cover_the_gated_selection(dev):
    specs = set(select.instantiations(dev))
    for m in (1, 16, 17, 64, 65, 128, 512, 4096):
        for n in (64, 1024, 4096, 14336):
            for dtype in (F16, BF16, F32, F64):
                for w in ("kn", "nk_t"):
                    config = select.choose(gated_problem(m, 4096, n, dtype, dev, w), dev)
                    assert config.spec(np.dtype(dtype), w == "nk_t") in specs, (m, n, dtype, w, config)
