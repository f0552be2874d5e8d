"""fused_linear's activations and fused_gated_linear on the GPU against the float64 oracle, on
every kernel family (the launch tests' one case per kernel and split-K case), with inputs large
enough to reach the activations' tails; bitwise reproducibility of every dispatch path."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import reference
from cufuse.ops.linear import fused_gated_linear, fused_linear, fused_linear_relu
from cufuse.ops.linear.mma import SMALL_TILE, STREAM64_TILE, STREAM_TILE, GatedMmaConfig
from cufuse.ops.linear.pingpong import PINGPONG_128x128, GatedPingPongConfig, PingPongTile
from cufuse.ops.linear.simt import SIMT_SMALL, GatedSimtConfig
from cufuse.ops.linear.swap_tma import GATED_SWAP_DEFAULT_TILES, GatedSwapConfig, GatedSwapTile
from cufuse.ops.linear.wgmma import TMA_128x128, TMA_64x256, TMA_TILE, GatedTmaConfig

from ..conftest import poisoned
from .cases import BF16, F16, F32, F64, Case, check_case, check_gated_case, gated_inputs, make_inputs, random, \
    require_kernel
from .test_gpu_launch import LAUNCH_CASES, _captured_nodes

ACTIVATIONS = (None, "gelu", "gelu_tanh", "silu")  # "relu": test_gpu_oracle.py


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_activation_matches_float64_oracle(cp, rng, case, activation):
    require_kernel(cp, case)
    failure = check_case(cp, rng, case, activation, scale=3.0)  # |x @ w| up to hundreds: the tails
    assert failure is None, failure


@pytest.mark.parametrize("activation", ACTIVATIONS + ("relu",), ids=str)
def test_infinities_take_the_activations_limits(cp, rng, activation):
    """True float32 (SIMT): a row of x that is -inf (+inf) at one k against a positive weight
    row gives -inf (+inf) before the activation: 0 (+inf) after, as reference.apply_activation."""
    x = random(cp, rng, (5, 33), F32)
    w = cp.abs(random(cp, rng, (33, 8), F32)) + 1
    x[0], x[1] = 0, 0
    x[0, 7], x[1, 7] = -np.inf, np.inf
    out = fused_linear(x, w, activation=activation)
    want = reference.apply_activation(activation, np.array([-np.inf, np.inf]))
    assert bool((out[0] == float(want[0])).all()) and bool((out[1] == float(want[1])).all())
    assert bool(cp.isfinite(out[2:]).all())


def test_bad_activation_is_refused(cp, rng):
    x, w = random(cp, rng, (4, 16), F16), random(cp, rng, (16, 8), F16)
    with pytest.raises(ValueError, match="fused_linear: argument 'activation'"):
        fused_linear(x, w, activation="tanh")
    with pytest.raises(ValueError, match="fused_gated_linear: argument 'activation'"):
        fused_gated_linear(x, w, w, activation="swish")


REPRODUCIBLE_CASES = LAUNCH_CASES + [
    Case((64,), 8192, 8192, F32, "kn"),  # float32 split-K once differed between calls
    Case((16,), 8192, 4096, F64, "kn"),  # float64 split-K once differed between calls
    Case((1,), 8192, 4096, F32, "kn"),  # the float32 weight stream's split
    Case((1,), 8192, 4096, BF16, "kn", x_layout="padded_rows"),
    Case((48,), 8192, 1024, BF16, "nk_t"),
]


@pytest.mark.parametrize("case", REPRODUCIBLE_CASES, ids=str)
def test_same_call_gives_the_same_bits(cp, rng, case):
    """Split-K partials meet in a fixed order: two identical calls return identical bits."""
    require_kernel(cp, case)
    x, w, b = make_inputs(cp, rng, case)
    outs = [poisoned(cp, case.lead + (case.n,), case.dtype) for _ in range(3)]
    for out in outs:
        fused_linear(x, w, b, activation="gelu", out=out, config=case.config)
    bits = [out.view(cp.uint16 if case.dtype.itemsize == 2 else cp.uint32 if case.dtype.itemsize == 4 else cp.uint64)
            for out in outs]
    assert all(bool(cp.array_equal(bits[0], other)) for other in bits[1:])


def gated_swap(m, splits=1):
    """The default gated stream tile of an M-row problem, with ``splits``."""
    return GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64], splits=splits)


# The gated form: every default branch (on Hopper the gated TMA stream and GEMM; elsewhere the
# mma stream, 64-row stream and GEMM tiles; SIMT for the rest), forced tiles and splits, ragged
# M, N and K, both weight layouts, batched and 1-D x.
GATED_CASES = [
    Case((1,), 4096, 4096, BF16, "nk_t"),
    Case((7,), 4096, 33, BF16, "nk_t"),
    Case((16,), 4096, 4104, F16, "kn"),
    Case((64,), 4096, 4096, BF16, "kn"),
    Case((40,), 2048, 264, F16, "nk_t_padded"),
    Case((300,), 520, 264, F16, "nk_t"),
    Case((4097,), 1024, 1024, BF16, "kn"),
    Case((), 264, 72, BF16, "kn"),
    Case((3, 5), 1032, 136, F16, "kn", config=GatedMmaConfig(tile=STREAM_TILE, splits=3)),
    Case((64,), 2048, 200, BF16, "kn", config=GatedMmaConfig(tile=STREAM64_TILE, splits=2)),
    Case((130,), 1024, 136, BF16, "nk_t", config=GatedMmaConfig(tile=SMALL_TILE, splits=3)),
    Case((200,), 264, 520, F16, "kn", config=GatedMmaConfig(tile=SMALL_TILE)),
    Case((200,), 264, 520, BF16, "nk_t", config=GatedMmaConfig(tile=SMALL_TILE, splits=2)),
    Case((65,), 100, 40, F32, "kn"),  # SIMT from here
    Case((7,), 64, 40, BF16, "odd_column"),
    Case((33,), 300, 72, F64, "nk_t"),
    Case((3, 7), 256, 300, F32, "every_other_k", config=GatedSimtConfig(tile=SIMT_SMALL)),
    Case((4097,), 256, 300, F32, "nk_t"),
    # the gated TMA GEMM (sm_90a): every tile, both layouts, ragged M / N / K (zero-filled boxes)
    Case((300,), 520, 264, BF16, "nk_t", config=GatedTmaConfig(tile=TMA_TILE)),
    Case((4097,), 1032, 264, F16, "kn", config=GatedTmaConfig(tile=TMA_TILE)),
    Case((200,), 4104, 264, BF16, "kn", config=GatedTmaConfig(tile=TMA_TILE, splits=2)),  # split-K, ragged last split
    Case((200,), 264, 520, BF16, "every_other_k", config=GatedTmaConfig(tile=TMA_TILE)),  # weight rows 2N apart
    Case((130,), 4096, 136, F16, "nk_t", config=GatedTmaConfig(tile=TMA_128x128, splits=3)),
    Case((300,), 520, 264, BF16, "nk_t_padded", config=GatedTmaConfig(tile=TMA_128x128)),
    Case((3, 50), 4096, 520, F16, "kn", config=GatedTmaConfig(tile=TMA_64x256, splits=4)),
    Case((65,), 4104, 264, F16, "kn", config=GatedTmaConfig(tile=TMA_64x256, splits=3)),
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows", config=GatedTmaConfig(tile=TMA_128x128)),
    Case((100,), 8, 8, F16, "kn", config=GatedTmaConfig(tile=TMA_64x256)),  # one k tile, boxes far past N and K
    Case((1,), 1024, 136, BF16, "nk_t", config=GatedTmaConfig(tile=TMA_64x256, splits=2)),
    # the gated ping-pong GEMM (sm_90a): warpgroup 1 idle, 1-5 tiles a block, ragged M / N / K
    Case((300,), 520, 264, BF16, "nk_t", config=GatedPingPongConfig(tile=PINGPONG_128x128)),
    Case((4097,), 1032, 1032, F16, "kn", config=GatedPingPongConfig(tile=PINGPONG_128x128)),  # 33 x 17 tiles
    Case((2000,), 4100, 520, BF16, "every_other_k", config=GatedPingPongConfig(tile=PINGPONG_128x128)),
    Case((100,), 8, 8, F16, "kn", config=GatedPingPongConfig(tile=PINGPONG_128x128)),  # one k tile
    Case((2100,), 264, 1032, F16, "nk_t_padded",
         config=GatedPingPongConfig(tile=PingPongTile(bm=64, bn=256, stages=5))),
    # the gated swapped stream (sm_90a): every padding, both layouts, ragged N and K, split-K
    Case((1,), 8192, 4100, BF16, "nk_t", config=gated_swap(1)),  # 64 k tiles over 6 stages, N tail of 4
    Case((7,), 4104, 33, F16, "nk_t", config=gated_swap(7, 2)),  # K tail of 8, N = 33, split 2
    Case((8,), 8, 8, BF16, "kn", config=gated_swap(8)),  # one k tile, boxes far past N and K
    Case((), 4096, 264, BF16, "nk_t", config=gated_swap(1)),  # 1-D x
    Case((9,), 4104, 4104, F16, "kn", config=gated_swap(9, 3)),  # ragged last split, N tail of 8
    Case((16,), 264, 4096, BF16, "every_other_k", config=gated_swap(16)),
    Case((3, 5), 1032, 136, F16, "nk_t_padded", config=gated_swap(15)),  # sliced (N, K + 8) weight view
    Case((16,), 520, 264, F16, "kn", x_layout="padded_rows", config=gated_swap(16)),
    Case((33,), 4104, 520, BF16, "kn", config=gated_swap(33, 4)),
    Case((64,), 8192, 4100, F16, "nk_t", config=gated_swap(64)),
    Case((5,), 1032, 136, BF16, "kn", config=GatedSwapConfig(tile=GatedSwapTile(bn=128, mx=8, stages=3, bk=256),
                                                             splits=2)),
    Case((12,), 2056, 200, BF16, "kn", config=GatedSwapConfig(tile=GatedSwapTile(bn=128, mx=16, stages=4, bk=64))),
]


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", None, "relu"], ids=str)
@pytest.mark.parametrize("case", GATED_CASES, ids=str)
def test_gated_matches_float64_oracle(cp, rng, case, activation):
    require_kernel(cp, case)
    failure = check_gated_case(cp, rng, case, activation)
    assert failure is None, failure


@pytest.mark.parametrize("gate_layout,up_layout", [("kn", "nk_t"), ("nk_t", "every_other_k")])
def test_gated_weights_of_different_layouts(cp, rng, gate_layout, up_layout):
    failure = check_gated_case(cp, rng, Case((20,), 264, 72, BF16, gate_layout), up_layout=up_layout)
    assert failure is None, failure


@pytest.mark.parametrize("case", [c for c in GATED_CASES if c.config is None][:8] +
                         [c for c in GATED_CASES if getattr(c.config, "splits", 1) > 2], ids=str)
def test_gated_is_one_reproducible_launch(cp, rng, case):
    require_kernel(cp, case)
    x, w_gate, w_up = gated_inputs(cp, rng, case)
    outs = [cp.empty(case.lead + (case.n,), dtype=case.dtype) for _ in range(3)]
    launch = lambda out: fused_gated_linear(x, w_gate, w_up, out=out, config=case.config)  # noqa: E731
    nodes, dot = _captured_nodes(cp, lambda: launch(outs[0]))
    assert len(nodes) == 1 and "gated_linear" in dot, dot
    for out in outs[1:]:
        launch(out)
    assert all(bool(cp.array_equal(outs[0].view(cp.uint16), out.view(cp.uint16))) for out in outs[1:])


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
def test_activation_is_one_launch(cp, rng, activation):
    case = Case((16,), 4096, 4096, BF16, "kn")
    x, w, b = make_inputs(cp, rng, case)
    out = cp.empty((16, 4096), dtype=BF16)
    nodes, dot = _captured_nodes(cp, lambda: fused_linear(x, w, b, activation=activation, out=out))
    assert len(nodes) == 1, dot


def test_gated_numpy_path_and_gpu_agree(cp, rng):
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    w_gate, w_up = (rng.standard_normal((40, 24)).astype(np.float32) for _ in range(2))
    got = fused_gated_linear(cp.asarray(x), cp.asarray(w_gate), cp.asarray(w_up), activation="gelu")
    np.testing.assert_allclose(cp.asnumpy(got), fused_gated_linear(x, w_gate, w_up, activation="gelu"), rtol=1e-5,
                               atol=1e-4)
    relu = fused_linear_relu(cp.asarray(x), cp.asarray(w_gate))
    assert bool(cp.array_equal(relu, fused_linear(cp.asarray(x), cp.asarray(w_gate), activation="relu")))
    plain = fused_linear(cp.asarray(x), cp.asarray(w_gate))  # the default: no activation
    np.testing.assert_allclose(cp.asnumpy(plain), reference.fused_linear(x, w_gate, activation=None), rtol=1e-5,
                               atol=1e-4)
    assert bool((plain < 0).any())
