"""fused_linear_relu over a reduced grid that still reaches every kernel branch, for
compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/sanitize_linear.py
    compute-sanitizer --tool racecheck python tests/sanitize_linear.py wgmma
    compute-sanitizer --tool synccheck python tests/sanitize_linear.py wgmma_tma

Small shapes (the sanitizer slows kernels a hundredfold) with the same cases and checks
as tests/test_linear.py. An argument keeps the cases whose name contains it ("wgmma": the
Hopper kernel's cases; "swap_tma": the swapped-operand kernel's; "pipe_k": linear_relu_dmma's).
Exits 1 on any mismatch, 0 when all agree.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_linear import BF16, DMMA, DMMA_K32, DMMA_PIPE, DMMA_PIPE_K16, F16, F32, F64, TF32X3, TF32X3_NARROW, Case, _force, _gemv, _wide, _swap, _swap_default, _tma, _wgmma, check_case  # noqa: E402
from cufuse._configs import linear as cfg  # noqa: E402

CASES = [
    Case((1,), 512, 256, BF16, "nk_t"),  # stream tile, split-K, K-major
    Case((7,), 512, 40, F16, "kn"),  # stream tile, split-K, N-major
    Case((3, 5), 512, 33, BF16, "nk_t", bias="none"),  # batched, ragged N
    Case((7,), 8, 8, F16, "kn"),  # one k tile, no split
    Case((40,), 2048, 24, BF16, "kn", bias="strided"),  # 64x64 tile, split-K through slots
    Case((65,), 136, 72, F16, "nk_t_padded"),  # GEMM path, ragged M
    Case((130,), 200, 136, BF16, "kn", config=_force(cfg.SMALL_TILE, 2)),  # split-K over several M tiles
    Case((130,), 200, 136, BF16, "kn", config=_force(cfg.SMALL_TILE, 2, "slots")),  # split-K through slots
    Case((7,), 1032, 40, F16, "nk_t", config=_force(cfg.STREAM_TILE, 3, "slots")),
    Case((300,), 520, 264, BF16, "nk_t", config=cfg.LinearConfig("wgmma", cfg.WGMMA_TILE)),  # Hopper kernel
    Case((300,), 520, 264, F16, "kn", config=cfg.LinearConfig("wgmma", cfg.WGMMA_TILE)),  # Hopper, N-major weight
    Case((64,), 4096, 520, BF16, "kn", config=_wgmma(cfg.WGMMA_64x256, 4)),  # wgmma split-K through slots
    Case((65,), 4096, 8, F16, "nk_t", config=_wgmma(cfg.WGMMA_64x64, 4)),  # m64n64, two M tiles, split-K
    Case((300,), 1032, 264, BF16, "kn", config=_wgmma(cfg.WGMMA_128x128)),  # m64n128, two warpgroups
    Case((65,), 1032, 72, BF16, "nk_t", config=_tma(cfg.TMA_64x64, 3)),  # TMA, ragged M/N/K, split-K
    Case((130,), 520, 264, F16, "kn", bias="none", config=_tma(cfg.TMA_TILE)),  # TMA, N-major weight boxes
    Case((7,), 1032, 72, BF16, "nk_t", config=_swap(64, 8, 8, 3)),  # swapped TMA, ragged N/K, split-K
    Case((16,), 520, 136, F16, "kn", bias="none", config=_swap(128, 16, 8, 2)),  # swapped, M-major A (tnspA)
    Case((40,), 520, 136, BF16, "kn", config=_swap(64, 64, 8, 2)),  # swapped, x padded to 64 rows
    Case((5,), 1032, 72, F16, "nk_t", config=_swap_default(5, 2)),  # swapped defaults: 256 k a stage, hints
    Case((33,), 4104, 136, BF16, "kn", bias="none", config=_swap_default(33, 3)),  # 128 k a stage, ragged K
    Case((70,), 1024, 136, F16, "kn"),  # few tiles: wgmma 64x64 split-K on 9.0, else mma 128x128 split-K
    Case((70,), 1024, 136, F16, "kn", config=_force(cfg.MEDIUM_TILE, 2, "slots")),  # the latter on any GPU
    Case((150,), 136, 264, BF16, "nk_t", config=_force(cfg.MEDIUM_TILE)),
    Case((150,), 136, 264, F16, "kn", config=_force(cfg.LARGE_TILE)),
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows"),
    Case((9,), 33, 17, F16, "kn"),  # K not a multiple of 8: SIMT
    Case((7,), 64, 40, BF16, "odd_column", bias="strided"),  # misaligned weight: SIMT
    Case((5,), 64, 64, BF16, "kn", x_layout="strided_k"),
    Case((7,), 1, 1, F16, "kn"),
    Case((130,), 65, 130, F32, "kn", config=cfg.LinearConfig("simt", cfg.SIMT_LARGE)),
    Case((3, 5), 33, 8, F32, "nk_t"),
    Case((65,), 40, 33, F64, "every_other_k", bias="none"),
    Case((130,), 68, 136, F32, "kn", config=TF32X3),  # 3xTF32, row-major weight, ragged M, N and last k tile
    Case((3, 50), 36, 72, F32, "nk_t_padded", bias="strided", config=TF32X3_NARROW),  # 3xTF32, K-major
    Case((130,), 34, 136, F64, "kn", config=DMMA),  # float64 DMMA, row-major weight, ragged M, N and k tile
    Case((70,), 36, 24, F64, "nk_t", bias="none", config=DMMA),  # float64 DMMA, K-major weight
    Case((70,), 72, 24, F64, "nk_t", config=DMMA_K32),  # float64 DMMA k32 tile, ragged last k tile
    Case((130,), 34, 136, F64, "kn", config=DMMA_PIPE),  # linear_relu_dmma (sm_90): ragged M, N, k tile
    Case((256,), 64, 64, F64, "nk_t", bias="none", config=DMMA_PIPE),  # full tiles: unchecked cp.async
    Case((70,), 72, 24, F64, "nk_t", config=DMMA_PIPE_K16),  # its m16n8k16 form
    Case((9,), 200, 136, F32, "nk_t", config=_wide(cfg.TF32_M16_TILE, 2)),  # 3xTF32 16-row tile, split
    Case((20,), 200, 136, F32, "kn", config=_wide(cfg.TF32_M32_TILE, 3)),  # 3xTF32 few rows, split, ragged
    Case((40,), 136, 72, F32, "nk_t", bias="none", config=_wide(cfg.TF32_M64_TILE, 2)),
    Case((9,), 200, 72, F64, "kn", config=_wide(cfg.DMMA_M16_TILE, 3)),  # float64 few rows, split, ragged
    Case((30,), 136, 136, F64, "nk_t", config=_wide(cfg.DMMA_M32_TILE, 2)),
    Case((64,), 72, 64, F64, "kn", bias="none", config=_wide(cfg.DMMA_M64_TILE, 2)),  # full tiles, split
    Case((3,), 0, 4, F16, "kn"),
    Case((1,), 1032, 40, BF16, "nk_t", config=_gemv()),  # GEMV, K-major, ragged N and K
    Case((1,), 200, 264, F16, "kn", config=_gemv(3)),  # GEMV, row-major, split-K, ragged split
    Case((1,), 64, 24, BF16, "kn", bias="none", config=_gemv()),
    Case((3,), 1000, 136, F32, "kn", config=_gemv(3, rows=4)),  # float32 GEMV: split-K, ragged split and N
    Case((16,), 264, 40, F32, "nk_t", config=_gemv(rows=16)),  # float32 GEMV, K-major, 4 columns a warp
    Case((9,), 200, 66, F64, "kn", bias="strided", config=_gemv(rows=16)),  # float64 GEMV, row-major
    Case((2,), 264, 24, F64, "nk_t", config=_gemv(rows=4)),
    Case((3,), 1004, 136, F32, "kn", config=_gemv(3, rows=4)),  # the last split ends inside a warp's run of rows
]


def main() -> int:
    import cupy

    rng = np.random.default_rng()
    cases = [case for case in CASES if len(sys.argv) < 2 or sys.argv[1] in str(case)]
    failures = [f for f in (check_case(cupy, rng, case) for case in cases) if f]
    cupy.cuda.Device().synchronize()
    for failure in failures:
        print("MISMATCH", failure)
    print(f"sanitize_linear: {len(cases) - len(failures)} of {len(cases)} cases agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
