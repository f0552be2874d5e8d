"""fused_linear_relu on the GPU against the float64 oracle: every default dispatch branch of
the mma, 3xTF32, DMMA, gemv and SIMT kernels (ragged tiles, both weight layouts, strided
views, bias none / strided, batched and 1-D x), forced configs through ``config=``, NaN and
infinity patterns, and the NumPy path. The Hopper-only kernels: test_gpu_hopper.py."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse import reference
from cufuse.ops.linear import fused_linear_relu
from cufuse.ops.linear.dmma import DMMA_M16_TILE, DMMA_M64_TILE, DMMA_PIPELINED_TILE, PipelinedDmmaConfig
from cufuse.ops.linear.mma import LARGE_TILE, MEDIUM_TILE, SMALL_TILE, STREAM64_TILE, STREAM_TILE
from cufuse.ops.linear.wide import DMMA_TILE, TF32_M32_TILE, TF32_M64_TILE, TF32_TILE, DmmaConfig, Tf32x3Config

from ..conftest import poisoned
from .cases import BF16, F16, F32, F64, Case, check_case, gemv, make_inputs, mma, oracle, random, require_kernel

TF32X3 = Tf32x3Config(tile=TF32_TILE)
DMMA = DmmaConfig(tile=DMMA_TILE)  # float64 on linear_wide (the sm_80 default), through config= anywhere
DMMA_PIPE = PipelinedDmmaConfig(tile=DMMA_PIPELINED_TILE)

CASES = [
    # tensor cores, weight streaming (M <= 16, split-K), both layouts, ragged N
    Case((1,), 4096, 4096, BF16, "nk_t"),
    Case((1,), 4096, 4096, F16, "kn"),
    Case((7,), 4096, 33, BF16, "nk_t", bias="none"),
    Case((3, 5), 4096, 4100, F16, "nk_t"),
    Case((7,), 8, 8, BF16, "kn"),  # one k tile: no split
    # tensor cores, M in 17..64 (64x64 tiles split through slots: wgmma on 9.0, else mma)
    Case((64,), 4096, 8, BF16, "kn"),
    Case((33,), 4096, 1, F16, "nk_t"),
    Case((64,), 4096, 4096, BF16, "nk_t_padded"),
    # tensor cores, GEMM tiles
    Case((65,), 4096, 4100, BF16, "nk_t"),
    Case((4097,), 4096, 4096, BF16, "kn"),
    Case((4097,), 4096, 4096, F16, "nk_t", bias="none"),
    Case((65,), 1024, 4104, F16, "kn"),  # few tiles: wgmma 64x64 split-K on 9.0, else mma 128x128 split-K
    Case((65,), 1024, 4104, F16, "kn", config=mma(MEDIUM_TILE, 2)),  # the latter on any GPU
    Case((300,), 520, 264, BF16, "nk_t", config=mma(MEDIUM_TILE)),
    Case((300,), 520, 264, F16, "kn", config=mma(MEDIUM_TILE)),
    Case((200,), 264, 520, F16, "nk_t", config=mma(LARGE_TILE)),
    Case((200,), 264, 520, BF16, "kn", config=mma(LARGE_TILE)),
    Case((130,), 1024, 136, BF16, "kn", config=mma(SMALL_TILE, 3)),
    # split-K through per-split slots, ragged tiles
    Case((7,), 4096, 4100, BF16, "nk_t", config=mma(STREAM_TILE, 4)),
    Case((3, 5), 1032, 136, F16, "kn", bias="none", config=mma(STREAM_TILE, 3)),
    Case((1,), 4104, 520, F16, "kn", config=mma(STREAM_TILE, 5)),
    Case((64,), 4096, 264, BF16, "kn", config=mma(SMALL_TILE, 4)),
    Case((130,), 1024, 136, F16, "nk_t", bias="strided", config=mma(SMALL_TILE, 3)),
    Case((64,), 2048, 200, BF16, "kn", config=mma(STREAM64_TILE, 2)),  # the sm_80 M = 17..64 tile
    Case((40,), 2048, 264, BF16, "nk_t", config=mma(STREAM64_TILE, 3)),
    Case((65,), 64, 64, F16, "every_other_k", bias="strided"),
    Case((65,), 64, 64, BF16, "kn", x_layout="padded_rows"),
    # 16-bit operands the tensor-core kernels cannot load: SIMT
    Case((65,), 4100, 4096, F16, "kn"),
    Case((7,), 64, 40, BF16, "odd_column", bias="strided"),
    Case((7,), 1, 1, F16, "kn"),
    Case((5,), 64, 64, BF16, "kn", x_layout="strided_k"),
    # float32 (true float32) and float64 operands the tensor cores cannot load: SIMT
    Case((4097,), 256, 4099, F32, "nk_t_padded", x_layout="strided_k"),
    Case((3, 5), 33, 8, F32, "odd_column", bias="none"),
    Case((65,), 4100, 33, F64, "nk_t", x_layout="strided_k"),
    Case((3, 5), 33, 8, F64, "kn"),
    Case((4097,), 8, 1, F64, "every_other_k"),
    Case((1,), 4096, 4100, F64, "every_other_k", bias="strided"),
    # float32 on tensor cores (3xTF32): the same tolerance as true float32
    Case((4097,), 256, 4100, F32, "kn"),
    Case((300,), 1000, 264, F32, "nk_t"),  # ragged M, N and the last k tile
    Case((65,), 4096, 4096, F32, "kn", bias="strided", config=TF32X3),  # K = 4096: TF32 alone fails
    Case((65,), 4096, 4096, F32, "nk_t", config=TF32X3),
    Case((3, 5), 36, 8, F32, "nk_t_padded", bias="none", config=TF32X3),
    Case((200,), 520, 136, F32, "every_other_k", config=TF32X3),  # weight rows 2N apart
    Case((130,), 260, 72, F32, "kn", x_layout="padded_rows", config=TF32X3),
    Case((), 260, 72, F32, "nk_t", config=TF32X3),  # 1-D x
    # float64 on linear_wide (DMMA, the sm_80 default) and on linear_dmma (sm_90): ragged
    # M, N and last k tile (full tiles take linear_dmma's unchecked cp.async), both layouts,
    # weight rows 2N apart, padded rows, 1-D x (the generated cases below); for linear_dmma
    # also fewer k tiles than stages and every tile full
    Case((300,), 1000, 264, F64, "nk_t", config=DMMA_PIPE),
    Case((70,), 6, 24, F64, "kn", config=DMMA_PIPE),
    Case((256,), 4096, 128, F64, "kn", config=DMMA_PIPE),
    *(dataclasses.replace(case, config=config) for config in (DMMA, DMMA_PIPE) for case in (
        Case((300,), 1000, 264, F64, "kn"),
        Case((130,), 4096, 136, F64, "nk_t", bias="strided"),
        Case((3, 5), 34, 8, F64, "nk_t_padded", bias="none"),
        Case((200,), 520, 144, F64, "every_other_k"),
        Case((), 260, 72, F64, "kn", x_layout="padded_rows"))),
    # float32 with M = 5..64 and float64 with M = 2..64 by default: tiles of 16-64 rows that
    # split K through slots (float64 on sm_90; elsewhere the 128-row DMMA tile); ragged M, N and
    # K, splits whose last k tile is ragged, both layouts, batched x, bias none / strided
    Case((17,), 4100, 264, F32, "kn"),
    Case((3, 11), 1000, 200, F32, "nk_t_padded", bias="none"),
    Case((40,), 2052, 520, F32, "nk_t"),
    Case((64,), 8192, 136, F32, "kn", bias="strided"),
    Case((16,), 8192, 520, F32, "kn", bias="strided"),
    Case((20,), 1000, 136, F32, "nk_t_padded", config=Tf32x3Config(tile=TF32_M32_TILE, splits=3)),  # 32 k tiles in 3 splits
    Case((50,), 1000, 264, F32, "kn", config=Tf32x3Config(tile=TF32_M64_TILE, splits=5)),
    Case((128,), 1000, 264, F32, "kn"),  # 128-row tile, split
    Case((5,), 4100, 264, F64, "kn"),
    Case((4,), 1032, 136, F64, "kn"),
    Case((16,), 1000, 136, F64, "nk_t", bias="none", config=PipelinedDmmaConfig(tile=DMMA_M16_TILE, splits=5)),
    Case((9,), 6, 24, F64, "kn", config=PipelinedDmmaConfig(tile=DMMA_M16_TILE)),  # fewer k tiles than stages
    Case((30,), 2050, 200, F64, "kn"),
    Case((3, 7), 520, 72, F64, "nk_t"),
    Case((64,), 4096, 520, F64, "nk_t_padded", bias="strided"),
    Case((64,), 4096, 128, F64, "nk_t", config=PipelinedDmmaConfig(tile=DMMA_M64_TILE, splits=4)),  # every tile full
    Case((65,), 8192, 136, F64, "kn"),  # 128-row tile, split
    # the weight stream: float32 M <= 4 and float64 M = 1 by default (a row-major float32
    # weight splits K); ragged N and K, both layouts, batched and 1-D x
    Case((1,), 4100, 4104, F32, "nk_t"),
    Case((3,), 1000, 4100, F32, "kn"),  # 4 rows, split K, N tail of 4 in the last 128-column block
    Case((), 260, 72, F32, "nk_t"),
    Case((1,), 8, 8, F32, "nk_t", bias="none"),
    Case((1,), 1000, 264, F32, "kn", bias="strided"),
    Case((2,), 264, 40, F32, "kn", x_layout="padded_rows", config=gemv(7, rows=4)),  # ragged last split
    Case((3,), 1004, 136, F32, "kn", config=gemv(3, rows=4)),  # last split ends inside a warp's run of rows
    Case((1,), 1000, 4104, F32, "kn", config=gemv(3)),
    Case((1,), 4096, 4096, F32, "nk_t_padded", config=gemv(8)),  # K-major: the splits are ignored
    Case((1,), 1002, 66, F64, "kn"),  # K ends inside a warp's run of 8 rows
    Case((1,), 2050, 202, F64, "nk_t", bias="none"),
    # degenerate
    Case((3,), 0, 4, F16, "kn"),
    Case((3,), 0, 4, F32, "kn"),
    Case((0,), 16, 4, BF16, "kn"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64_oracle(cp, rng, case):
    require_kernel(cp, case)
    failure = check_case(cp, rng, case)
    assert failure is None, failure


def test_new_out_and_numpy_reference_agree(cp, rng):
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    got = fused_linear_relu(cp.asarray(x), cp.asarray(w), cp.asarray(b))
    assert got.shape == (3, 5, 24) and got.dtype == np.float32
    np.testing.assert_allclose(cp.asnumpy(got), reference.fused_linear_relu(x, w, b), rtol=1e-5, atol=1e-4)


def test_nan_propagates_through_relu(cp, rng):
    x = random(cp, rng, (65, 64), F16)
    w = random(cp, rng, (64, 64), F16)
    x[3, 5] = np.nan
    out = fused_linear_relu(x, w)
    assert bool(cp.isnan(out[3]).all()) and not bool(cp.isnan(out[4]).any())


def test_tf32x3_propagates_nan(cp, rng):
    x = random(cp, rng, (130, 64), F32)
    w = random(cp, rng, (64, 72), F32)
    x[3, 5] = np.nan
    out = fused_linear_relu(x, w, config=TF32X3)
    assert bool(cp.isnan(out[3]).all()) and not bool(cp.isnan(out[4]).any())


@pytest.mark.parametrize("dtype,rows", [(F32, 4), (F64, 1)])
@pytest.mark.parametrize("layout", ["kn", "nk_t"])
def test_weight_stream_propagates_nan_and_inf(cp, rng, dtype, rows, layout):
    x, w, _ = make_inputs(cp, rng, Case((rows,), 264, 72, dtype, layout))
    w[7] = cp.abs(w[7]) + 1  # a row of x that is +inf at k = 7 and 0 elsewhere gives +inf in every column
    x[0] = 0
    x[0, 7] = np.inf
    out = fused_linear_relu(x, w, config=gemv(rows=rows))
    assert bool(cp.isposinf(out[0]).all())
    if rows > 1:
        x[1, 5] = np.nan
        out = fused_linear_relu(x, w, config=gemv(rows=rows))
        assert bool(cp.isnan(out[1]).all()) and bool(cp.isfinite(out[2]).all())


def test_uncollapsible_x_is_refused_not_copied(cp, rng):
    x = random(cp, rng, (4, 6, 16), F16)[:, ::2]  # rows 0, 2, 4 of each of 4 blocks: no single row stride
    x = x.transpose(1, 0, 2)
    with pytest.raises(ValueError, match="fused_linear_relu: argument 'x'"):
        fused_linear_relu(x, random(cp, rng, (16, 8), F16))


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
