"""The Hopper kernels of fused_linear_relu on the GPU (compute capability 9.0): the cp.async
wgmma kernel (every tile, and the default path for operands no tensor map can describe), the
TMA-fed wgmma kernel, the ping-pong kernel and the swapped TMA stream, against the float64
oracle."""
from __future__ import annotations

import pytest

from cufuse.ops.linear import fused_linear_relu
from cufuse.ops.linear.pingpong import PINGPONG_128x128, PingPongConfig, PingPongTile
from cufuse.ops.linear.wgmma import TMA_128x128, TMA_64x128, TMA_64x256, TMA_64x64, TMA_TILE, WGMMA_128x128, \
    WGMMA_64x128, WGMMA_64x256, WGMMA_64x64, WGMMA_TILE, TmaConfig, WgmmaConfig

from .cases import BF16, F16, Case, check_case, current_plan, make_inputs, require_sm90, swap

WGMMA_CASES = [  # ragged M, N and K; several k tiles; both weight layouts
    Case((300,), 520, 264, BF16, "nk_t", config=WgmmaConfig(tile=WGMMA_TILE)),
    Case((1000,), 1024, 1000, F16, "nk_t_padded", bias="none", config=WgmmaConfig(tile=WGMMA_TILE)),
    Case((3, 50), 4096, 520, BF16, "nk_t", bias="strided", config=WgmmaConfig(tile=WGMMA_TILE)),
    # row-major (K, N) weight, read transposed: N-major swizzle atoms
    Case((300,), 520, 264, BF16, "kn", config=WgmmaConfig(tile=WGMMA_TILE)),
    Case((3, 50), 1024, 520, F16, "kn", bias="strided", config=WgmmaConfig(tile=WGMMA_TILE)),
    Case((200,), 264, 520, BF16, "every_other_k", bias="none", config=WgmmaConfig(tile=WGMMA_TILE)),  # rows 2N apart
    Case((200,), 4104, 264, BF16, "kn", config=WgmmaConfig(tile=WGMMA_TILE, splits=2)),  # split-K, ragged last split
    # the other tiles (m64n128 / m64n64 instructions, one warpgroup), split-K through slots
    Case((300,), 1032, 264, BF16, "kn", config=WgmmaConfig(tile=WGMMA_128x128)),
    Case((130,), 4096, 136, F16, "nk_t", bias="strided", config=WgmmaConfig(tile=WGMMA_128x128, splits=3)),
    Case((64,), 4096, 520, BF16, "kn", config=WgmmaConfig(tile=WGMMA_64x256, splits=4)),
    Case((7,), 2056, 264, F16, "nk_t", bias="none", config=WgmmaConfig(tile=WGMMA_64x256, splits=3)),
    Case((1,), 1024, 136, BF16, "nk_t", config=WgmmaConfig(tile=WGMMA_64x128, splits=2)),
    Case((3, 5), 520, 200, F16, "kn", config=WgmmaConfig(tile=WGMMA_64x128, splits=2)),
    Case((40,), 1000, 72, BF16, "kn", bias="strided", config=WgmmaConfig(tile=WGMMA_64x64)),
    Case((65,), 4096, 8, F16, "nk_t", config=WgmmaConfig(tile=WGMMA_64x64, splits=4)),
]

TMA_CASES = [  # ragged M, N and K (zero-filled boxes), both layouts, split-K
    Case((1,), 4104, 33, BF16, "nk_t", config=TmaConfig(tile=TMA_64x64, splits=2)),  # M = 1, K tail of 8, N = 33
    Case((7,), 8, 8, F16, "kn", config=TmaConfig(tile=TMA_64x64)),  # one k tile, box far past N and K
    Case((64,), 4096, 4100, BF16, "nk_t", config=TmaConfig(tile=TMA_64x64, splits=2)),
    Case((64,), 4096, 4096, F16, "kn", bias="none", config=TmaConfig(tile=TMA_64x64, splits=2)),
    Case((64,), 8192, 1024, BF16, "kn", config=TmaConfig(tile=TMA_64x64)),  # 128 k tiles: the phases wrap
    Case((65,), 4104, 264, F16, "kn", bias="none", config=TmaConfig(tile=TMA_64x128, splits=3)),  # ragged last split
    Case((1,), 1024, 136, BF16, "nk_t", config=TmaConfig(tile=TMA_64x128, splits=2)),
    Case((40,), 4096, 200, F16, "nk_t", config=TmaConfig(tile=TMA_64x128, splits=2)),
    Case((3, 50), 4096, 520, F16, "kn", config=TmaConfig(tile=TMA_64x256, splits=4)),
    Case((300,), 520, 264, BF16, "nk_t_padded", bias="strided", config=TmaConfig(tile=TMA_128x128)),
    Case((4097,), 520, 4100, BF16, "nk_t", config=TmaConfig(tile=TMA_TILE)),
    Case((4097,), 1032, 264, F16, "kn", config=TmaConfig(tile=TMA_TILE)),
    Case((200,), 264, 520, BF16, "every_other_k", bias="none", config=TmaConfig(tile=TMA_TILE)),  # weight rows 2N apart
    Case((200,), 4104, 264, BF16, "kn", config=TmaConfig(tile=TMA_TILE, splits=2)),  # split-K on the 128x256 tile
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows", config=TmaConfig(tile=TMA_64x64)),
]

PINGPONG_64x256 = PingPongTile(bm=64, bn=256, stages=5)
PINGPONG_CASES = [  # the persistent grid: fewer tiles than blocks, 1-4 tiles a block, ragged M, N and K
    Case((300,), 520, 264, BF16, "nk_t", config=PingPongConfig(tile=PINGPONG_128x128)),  # 9 tiles: warpgroup 1 idles
    Case((7,), 8, 8, F16, "kn", config=PingPongConfig(tile=PINGPONG_128x128)),  # one k tile, fewer than pending + 1
    Case((4097,), 1032, 264, F16, "kn", bias="none", config=PingPongConfig(tile=PINGPONG_128x128)),  # 99 tiles
    # 33 x 9 = 297 tiles: 2-3 a block, so warpgroup 0 takes two tiles where warpgroup 1 takes one
    Case((4097,), 4100, 1032, BF16, "nk_t", config=PingPongConfig(tile=PINGPONG_128x128)),
    # 16 x 33 = 528 tiles, 4 a block; 65 k tiles a tile: the ring's stages and phases shift tile to tile
    Case((2000,), 4100, 4104, BF16, "kn", bias="strided", config=PingPongConfig(tile=PINGPONG_128x128)),
    Case((3, 700), 520, 2056, F16, "nk_t_padded", config=PingPongConfig(tile=PINGPONG_128x128)),
    Case((200,), 264, 520, BF16, "every_other_k", bias="none", config=PingPongConfig(tile=PINGPONG_128x128)),
    Case((2100,), 520, 4104, F16, "kn", x_layout="padded_rows", config=PingPongConfig(tile=PINGPONG_128x128)),
    Case((4097,), 1032, 4100, BF16, "kn", config=PingPongConfig(tile=PINGPONG_64x256)),  # 65 x 17 tiles
    Case((300,), 520, 264, F16, "nk_t", bias="strided", config=PingPongConfig(tile=PINGPONG_64x256)),
]

SWAP_CASES = [  # the swapped stream's tiles (256 / 128 k a stage, L2 hints): M = 1..64, ragged N and K
    Case((1,), 8192, 4100, BF16, "nk_t", config=swap(1)),  # 32 k tiles over 5 stages, N tail of 4
    Case((7,), 4104, 33, F16, "nk_t", bias="none", config=swap(7, 2)),  # K tail of 8, N = 33, split 2
    Case((8,), 8, 8, BF16, "kn", config=swap(8)),  # one k tile, boxes far past N and K
    Case((1,), 4096, 8, F16, "kn", config=swap(1)),
    Case((), 4096, 264, BF16, "nk_t", config=swap(1)),  # 1-D x
    Case((5,), 4104, 136, F16, "kn", config=swap(5, 3)),  # K tail of 8 past 16 stages of 256
    Case((7,), 1024, 200, BF16, "every_other_k", bias="none", config=swap(7, 2)),  # weight rows 2N apart
    Case((9,), 4104, 4104, F16, "kn", config=swap(9, 3)),  # ragged last split, N tail of 8
    Case((16,), 264, 4096, BF16, "nk_t", bias="strided", config=swap(16)),  # 2 k tiles, 8 of 256 real
    Case((16,), 8192, 4096, BF16, "kn", bias="strided", config=swap(16)),
    Case((16,), 4096, 4100, BF16, "nk_t", config=swap(16, 4)),
    Case((16,), 520, 264, F16, "kn", x_layout="padded_rows", config=swap(16)),
    Case((16,), 8, 8, F16, "nk_t", config=swap(16)),
    Case((11,), 1032, 200, BF16, "every_other_k", config=swap(11, 2)),
    Case((3, 5), 1032, 136, F16, "nk_t_padded", config=swap(15)),  # sliced (N, K + 8) weight view
    Case((17,), 520, 72, F16, "nk_t", bias="none", config=swap(17, 3)),
    Case((33,), 4104, 520, BF16, "kn", bias="none", config=swap(33, 4)),  # K tail of 8
    Case((40,), 1032, 136, F16, "kn", config=swap(40, 2)),
    Case((64,), 8192, 4100, F16, "nk_t", config=swap(64)),  # 64 k tiles of 128 over 6 stages
    Case((64,), 8192, 264, BF16, "kn", bias="strided", config=swap(64)),
]


@pytest.mark.parametrize("case", WGMMA_CASES + TMA_CASES + PINGPONG_CASES + SWAP_CASES, ids=str)
def test_hopper_kernels_match_float64_oracle(cp, rng, case):
    require_sm90(cp)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


# The defaults on compute capability 9.0, with the kernel each must run: the swapped stream
# for M <= 64 and the TMA kernels beyond wherever tensor maps describe the operands (the
# ping-pong one once its tiles give every block two); the
# cp.async wgmma kernel for operands no tensor map can describe (x rows broadcast with row
# stride 0, K = 0), the mma stream for M <= 16 without maps.
DEFAULT_CASES = [
    (Case((1,), 4096, 4096, BF16, "nk_t"), "linear_swap_tma"),
    (Case((16,), 1032, 520, F16, "kn"), "linear_swap_tma"),
    (Case((64,), 1032, 520, BF16, "kn"), "linear_swap_tma"),
    (Case((65,), 1024, 64, BF16, "nk_t"), "linear_wgmma_tma"),
    (Case((4097,), 264, 4096, F16, "kn"), "linear_wgmma_tma"),
    (Case((2048,), 1024, 2056, BF16, "nk_t"), "linear_pingpong_tma"),  # 272 tiles: two a block
    (Case((16,), 33, 64, BF16, "kn"), "linear_simt"),  # K = 33: no 16-byte rows
    (Case((16,), 4096, 520, BF16, "kn", x_layout="broadcast_rows"), "linear_mma"),
    (Case((64,), 4096, 4096, BF16, "kn", x_layout="broadcast_rows"), "linear_wgmma"),
    (Case((200,), 4096, 4096, F16, "nk_t", x_layout="broadcast_rows"), "linear_wgmma"),
    # K = 0 (bias + ReLU only) as views of wider arrays: the strides keep their unit k stride
    (Case((17,), 0, 264, BF16, "nk_t_padded", x_layout="padded_rows"), "linear_wgmma"),
    (Case((130,), 0, 4096, F16, "nk_t_padded", x_layout="padded_rows"), "linear_wgmma"),
]


@pytest.mark.parametrize("case,kernel", DEFAULT_CASES, ids=lambda v: v if isinstance(v, str) else str(v))
def test_hopper_defaults_run_their_kernel(cp, rng, case, kernel):
    require_sm90(cp)
    x, w, b = make_inputs(cp, rng, case)
    assert current_plan(x, w, b).launches[0].spec.name == kernel
    failure = check_case(cp, rng, case)
    assert failure is None, failure


@pytest.mark.parametrize("case,config,message", [
    (Case((8,), 64, 40, BF16, "odd_column"), WgmmaConfig(tile=WGMMA_TILE), "asks for the wgmma kernel"),
    (Case((8,), 64, 40, BF16, "odd_column"), TmaConfig(tile=TMA_64x64), "asks for the wgmma_tma kernel"),
    (Case((3,), 0, 8, F16, "kn"), TmaConfig(tile=TMA_64x64), "asks for the wgmma_tma kernel"),
    (Case((17,), 64, 64, BF16, "nk_t"), swap(16), "takes at most M = 16 rows, got M = 17"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_hopper_kernels_refuse_operands_they_cannot_load(cp, rng, case, config, message):
    require_sm90(cp)
    x, w, b = make_inputs(cp, rng, case)
    with pytest.raises(ValueError, match=message):
        fused_linear_relu(x, w, b, config=config)
