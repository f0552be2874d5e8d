"""fused_linear (its activations in turn) and fused_gated_linear over a reduced grid that
still reaches every kernel branch, for compute-sanitizer (a script, not collected by pytest):

    compute-sanitizer --tool memcheck python tests/linear/sanitize.py
    compute-sanitizer --tool racecheck python tests/linear/sanitize.py wgmma
    compute-sanitizer --tool synccheck python tests/linear/sanitize.py wgmma_tma

Small shapes (the sanitizer slows kernels a hundredfold) with the same cases and checks as
the GPU tests. An argument keeps the cases whose name contains it ("wgmma": the Hopper
kernels' cases; "swap_tma": the swapped stream's; "pingpong": the ping-pong kernels';
"dmma_pipelined": linear_dmma's;
"gemv"; "gated": the gated kernels'). Exits 1 on any mismatch, 0 when all agree.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cufuse.ops.linear.dmma import DMMA_M16_TILE, DMMA_M32_TILE, DMMA_M64_TILE, DMMA_PIPELINED_TILE, \
    PipelinedDmmaConfig  # noqa: E402
from cufuse.ops.linear.mma import LARGE_TILE, MEDIUM_TILE, SMALL_TILE, STREAM64_TILE, STREAM_TILE  # noqa: E402
from cufuse.ops.linear.mma import GatedMmaConfig  # noqa: E402
from cufuse.ops.linear.pingpong import PINGPONG_128x128, GatedPingPongConfig, PingPongConfig  # noqa: E402
from cufuse.ops.linear.simt import SIMT_LARGE, SIMT_SMALL, GatedSimtConfig, SimtConfig  # noqa: E402
from cufuse.ops.linear.swap_tma import GATED_SWAP_DEFAULT_TILES, GatedSwapConfig  # noqa: E402
from cufuse.ops.linear.wgmma import TMA_64x256, TMA_64x64, TMA_TILE, WGMMA_128x128, WGMMA_64x256, WGMMA_64x64, WGMMA_TILE, \
    GatedTmaConfig, TmaConfig, WgmmaConfig  # noqa: E402
from cufuse.ops.linear.wide import DMMA_TILE, TF32_M16_TILE, TF32_M32_TILE, TF32_M64_TILE, TF32_TILE, DmmaConfig, \
    Tf32x3Config  # noqa: E402
from tests.linear.cases import BF16, F16, F32, F64, Case, check_case, check_gated_case, gemv, mma, swap  # noqa: E402

ACTIVATIONS = ("relu", "gelu", "silu", "gelu_tanh", None)  # case i runs ACTIVATIONS[i % 5]

CASES = [
    Case((1,), 512, 256, BF16, "nk_t"),  # the default stream, split-K, K-major
    Case((7,), 512, 40, F16, "kn"),  # the default stream, split-K, N-major
    Case((3, 5), 512, 33, BF16, "nk_t", bias="none"),  # batched, ragged N
    Case((7,), 8, 8, F16, "kn"),  # one k tile, no split
    Case((40,), 2048, 24, BF16, "kn", bias="strided"),  # 64x64 tiles, split-K through slots
    Case((65,), 136, 72, F16, "nk_t_padded"),  # GEMM path, ragged M
    Case((130,), 200, 136, BF16, "kn", config=mma(SMALL_TILE, 2)),  # split-K over several M tiles
    Case((130,), 200, 136, BF16, "kn", config=mma(SMALL_TILE, 2)),  # split-K through slots
    Case((7,), 1032, 40, F16, "nk_t", config=mma(STREAM_TILE, 3)),
    Case((40,), 1032, 40, BF16, "kn", config=mma(STREAM64_TILE, 2)),
    Case((70,), 1024, 136, F16, "kn", config=mma(MEDIUM_TILE, 2)),
    Case((150,), 136, 264, BF16, "nk_t", config=mma(MEDIUM_TILE)),
    Case((150,), 136, 264, F16, "kn", config=mma(LARGE_TILE)),
    Case((300,), 520, 264, BF16, "nk_t", config=WgmmaConfig(tile=WGMMA_TILE)),  # Hopper kernel
    Case((300,), 520, 264, F16, "kn", config=WgmmaConfig(tile=WGMMA_TILE)),  # Hopper, N-major weight
    Case((64,), 4096, 520, BF16, "kn", config=WgmmaConfig(tile=WGMMA_64x256, splits=4)),  # wgmma split-K through slots
    Case((65,), 4096, 8, F16, "nk_t", config=WgmmaConfig(tile=WGMMA_64x64, splits=4)),  # m64n64, two M tiles, split-K
    Case((300,), 1032, 264, BF16, "kn", config=WgmmaConfig(tile=WGMMA_128x128)),  # m64n128, two warpgroups
    Case((40,), 520, 136, BF16, "kn", x_layout="broadcast_rows"),  # no tensor map: cp.async wgmma on 9.0
    Case((65,), 1032, 72, BF16, "nk_t", config=TmaConfig(tile=TMA_64x64, splits=3)),  # TMA, ragged M/N/K, split-K
    Case((130,), 520, 264, F16, "kn", bias="none", config=TmaConfig(tile=TMA_TILE)),  # TMA, N-major weight boxes
    Case((2100,), 136, 2056, BF16, "kn", config=PingPongConfig(tile=PINGPONG_128x128)),  # ping-pong, 2-3 a block
    Case((300,), 264, 520, F16, "nk_t", bias="none", config=PingPongConfig(tile=PINGPONG_128x128)),  # one a block
    Case((7,), 1032, 72, BF16, "nk_t", config=swap(7, 3)),  # swapped TMA, ragged N/K, split-K
    Case((16,), 520, 136, F16, "kn", bias="none", config=swap(16, 2)),  # swapped, M-major A (tnspA)
    Case((40,), 520, 136, BF16, "kn", config=swap(40, 2)),  # swapped, x padded to 64 rows
    Case((33,), 4104, 136, BF16, "kn", bias="none", config=swap(33, 3)),  # 128 k a stage, ragged K
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows"),
    Case((9,), 33, 17, F16, "kn"),  # K not a multiple of 8: SIMT
    Case((7,), 64, 40, BF16, "odd_column", bias="strided"),  # misaligned weight: SIMT
    Case((5,), 64, 64, BF16, "kn", x_layout="strided_k"),
    Case((7,), 1, 1, F16, "kn"),
    Case((130,), 65, 130, F32, "kn", config=SimtConfig(tile=SIMT_LARGE)),
    Case((3, 5), 33, 8, F32, "nk_t"),
    Case((65,), 40, 33, F64, "every_other_k", bias="none"),
    Case((130,), 68, 136, F32, "kn", config=Tf32x3Config(tile=TF32_TILE)),  # 3xTF32, ragged M, N and last k tile
    Case((3, 50), 36, 72, F32, "nk_t_padded", bias="strided", config=Tf32x3Config(tile=TF32_TILE)),
    Case((130,), 34, 136, F64, "kn", config=DmmaConfig(tile=DMMA_TILE)),  # float64 DMMA, ragged M, N and k tile
    Case((70,), 36, 24, F64, "nk_t", bias="none", config=DmmaConfig(tile=DMMA_TILE)),
    Case((130,), 34, 136, F64, "kn", config=PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE)),  # ragged M, N, k tile
    Case((256,), 64, 64, F64, "nk_t", bias="none", config=PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE)),  # full tiles
    Case((9,), 200, 136, F32, "nk_t", config=Tf32x3Config(tile=TF32_M16_TILE, splits=2)),  # 3xTF32 16-row tile, split
    Case((20,), 200, 136, F32, "kn", config=Tf32x3Config(tile=TF32_M32_TILE, splits=3)),  # 3xTF32 few rows, split, ragged
    Case((40,), 136, 72, F32, "nk_t", bias="none", config=Tf32x3Config(tile=TF32_M64_TILE, splits=2)),
    Case((9,), 200, 72, F64, "kn", config=PipelinedDmmaConfig(tile=DMMA_M16_TILE, splits=3)),  # float64 few rows, split
    Case((30,), 136, 136, F64, "nk_t", config=PipelinedDmmaConfig(tile=DMMA_M32_TILE, splits=2)),
    Case((64,), 72, 64, F64, "kn", bias="none", config=PipelinedDmmaConfig(tile=DMMA_M64_TILE, splits=2)),  # full, split
    Case((3,), 0, 4, F16, "kn"),
    Case((1,), 1032, 40, F32, "nk_t", config=gemv()),  # gemv, K-major, ragged N and K
    Case((1,), 200, 264, F32, "kn", config=gemv(3)),  # gemv, row-major, split-K, ragged split
    Case((3,), 1000, 136, F32, "kn", config=gemv(3, rows=4)),  # 4 rows: split-K, ragged split and N
    Case((3,), 1004, 136, F32, "kn", config=gemv(3, rows=4)),  # the last split ends inside a warp's run of rows
    Case((4,), 264, 40, F32, "nk_t", config=gemv(rows=4)),
    Case((1,), 200, 66, F64, "kn", bias="strided", config=gemv()),  # float64 gemv, row-major
    Case((1,), 264, 24, F64, "nk_t", config=gemv()),
]
GATED_CASES = [
    Case((1,), 520, 256, BF16, "nk_t"),  # the gated stream, split-K
    Case((7,), 1032, 40, F16, "kn", config=GatedMmaConfig(tile=STREAM_TILE, splits=3)),
    Case((40,), 1032, 40, BF16, "kn", config=GatedMmaConfig(tile=STREAM64_TILE, splits=2)),
    Case((130,), 200, 136, BF16, "nk_t", config=GatedMmaConfig(tile=SMALL_TILE, splits=2)),
    Case((150,), 136, 264, F16, "kn"),  # the 64x128 GEMM tile
    Case((70,), 1024, 136, F16, "nk_t", config=GatedMmaConfig(tile=SMALL_TILE, splits=2)),
    Case((9,), 33, 17, F32, "kn"),  # SIMT
    Case((130,), 65, 130, F32, "nk_t", config=GatedSimtConfig(tile=SIMT_SMALL)),
    Case((7,), 64, 40, BF16, "odd_column"),
    Case((20,), 36, 24, F64, "every_other_k"),
    # sm_90a: the gated TMA GEMM and the gated swapped stream (the defaults above on Hopper too)
    Case((130,), 200, 136, BF16, "kn", config=GatedTmaConfig(tile=TMA_TILE, splits=2)),
    Case((70,), 264, 72, F16, "nk_t", config=GatedTmaConfig(tile=TMA_64x256)),
    Case((2100,), 136, 1032, F16, "nk_t", config=GatedPingPongConfig(tile=PINGPONG_128x128)),  # 17 x 17 tiles
    Case((16,), 1032, 72, F16, "kn", config=GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[16], splits=3)),
    Case((40,), 264, 40, BF16, "nk_t", config=GatedSwapConfig(tile=GATED_SWAP_DEFAULT_TILES[64])),
]


def main() -> int:
    import cupy

    hopper = cupy.cuda.Device().compute_capability == "90"
    rng = np.random.default_rng()
    cases = [case for case in CASES if len(sys.argv) < 2 or sys.argv[1] in str(case)]
    def runs_here(case):  # forced Hopper configs on compute capability 9.0 only
        return hopper or not (isinstance(case.config, (WgmmaConfig, TmaConfig, PingPongConfig, PipelinedDmmaConfig)) or
                              "swap_tma" in str(case))

    cases = [case for case in cases if runs_here(case)]
    gated = [case for case in GATED_CASES if (len(sys.argv) < 2 or sys.argv[1] in f"gated {case}") and runs_here(case)]
    failures = [f for f in (check_case(cupy, rng, case, ACTIVATIONS[i % 5]) for i, case in enumerate(cases)) if f]
    failures += [f for f in (check_gated_case(cupy, rng, case, ACTIVATIONS[i % 5]) for i, case in enumerate(gated))
                 if f]
    cases += gated
    cupy.cuda.Device().synchronize()
    for failure in failures:
        print("MISMATCH", failure)
    print(f"sanitize: {len(cases) - len(failures)} of {len(cases)} cases agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
