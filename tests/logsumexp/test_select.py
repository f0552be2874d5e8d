"""The default selection (pure): every branch is reached by the shapes the GPU tests use,
and every kernel it picks is among the instantiations CI compiles."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse._core.device import A100, H200
from cufuse.ops.logsumexp import select
from cufuse.ops.logsumexp.plan import plan_logsumexp
from cufuse.ops.logsumexp.problem import make_problem
from cufuse.ops.logsumexp.variants import ColsConfig, ColsShortConfig, ColsShortVecConfig, RowsConfig

# (shape, element strides, axes, what the default picks) on the H200
BRANCHES = [
    ((4096, 3), (3, 1), (1,), RowsConfig(threads=256, group=1, vecs=2)),  # rows not aligned: a masked head vector
    ((4096, 4), (4, 1), (1,), RowsConfig(threads=256, group=1, vecs=1)),
    ((4096, 20), (20, 1), (1,), RowsConfig(threads=256, group=2, vecs=4)),
    ((4096, 100), (100, 1), (1,), RowsConfig(threads=256, group=8, vecs=4)),
    ((4096, 1000), (1000, 1), (1,), RowsConfig(threads=256, group=256, vecs=4, parts=1)),
    ((20000, 2000), (2000, 1), (1,), RowsConfig(threads=256, group=32, vecs=4)),
    ((64, 5000), (5000, 1), (1,), RowsConfig(threads=256, group=256, vecs=4, parts=2)),
    ((8, 300001), (300001, 1), (1,), RowsConfig(threads=256, group=256, vecs=4, parts=74)),
    ((1000, 64), (64, 1), (0,), ColsConfig(slices=8, unroll=8, parts=8)),
    ((64, 4096), (1, 64), (1,), ColsConfig(slices=8, unroll=8, parts=32)),  # the last axis of a transposed view
    ((17, 40), (40, 1), (0,), ColsConfig(slices=8, unroll=8, parts=1)),
    ((6, 50), (100, 2), (1,), RowsConfig(threads=256, group=4, vecs=4)),  # x[:, ::2]: strided rows
    # columns of up to 16: a thread a 16-byte vector of rows where they are aligned, else a row
    ((2, 4096), (4096, 1), (0,), ColsShortVecConfig(threads=128, max_length=4, blocks_per_sm=12)),
    ((5, 40), (40, 1), (0,), ColsShortVecConfig(threads=128, max_length=8, blocks_per_sm=8)),
    ((16, 1000), (1000, 1), (0,), ColsShortVecConfig(threads=128, max_length=16, blocks_per_sm=4)),
    ((3, 7, 64), (7 * 64, 64, 1), (1,), ColsShortVecConfig(threads=128, max_length=8, blocks_per_sm=8)),  # a short middle axis
    ((4096, 3), (1, 4096), (1,), ColsShortVecConfig(threads=128, max_length=4, blocks_per_sm=12)),  # the last axis of a transposed view
    ((6, 4097), (4097, 1), (0,), ColsShortConfig(threads=256, max_length=16)),  # rows off the vector
    ((3, 7, 64), (7 * 64 + 1, 64, 1), (1,), ColsShortConfig(threads=256, max_length=16)),  # an outer stride off it
    ((4099, 3), (1, 4099), (1,), ColsShortConfig(threads=256, max_length=16)),
]


@pytest.mark.parametrize("shape, strides, axes, config", BRANCHES)
def test_each_branch(shape, strides, axes, config):
    problem = make_problem(shape, strides, None, np.dtype(np.float32), axes, True)
    assert select.choose(problem, H200) == config
    plan = plan_logsumexp(shape, strides, None, np.dtype(np.float32), axes, True, H200)
    assert (plan.scratch is not None) == (getattr(config, "parts", 1) > 1)


@pytest.mark.parametrize("dev", [H200, A100])
def test_every_choice_is_compiled(dev):
    compiled = set(select.instantiations(dev))
    for dtype in (np.float16, np.float32, np.float64):
        for shape, strides, axes, _ in BRANCHES:
            for b_strides in (None, strides):
                plan = plan_logsumexp(shape, strides, b_strides, np.dtype(dtype), axes, False, dev)
                assert plan.launches[0].spec in compiled


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_short_columns_by_layout(dtype):
    """Rows of up to 16 elements in the column layout: the vector rung that holds the row
    (4, 8, 16; the weighted rungs bounded for their a and b registers) where every vector of
    VS adjacent rows is aligned -- a's base, the run of adjacent rows, sl and so multiples of
    VS -- else a thread a row; 17 elements leave both."""
    dtype = np.dtype(dtype)
    vs = 16 // dtype.itemsize

    def chosen(shape, strides, axes, base_aligned=True, b_strides=None):
        return select.choose(make_problem(shape, strides, b_strides, dtype, axes, base_aligned), H200)

    for length, rung, bound, weighted_bound in ((1, 4, 12, 8), (2, 4, 12, 8), (4, 4, 12, 8), (5, 8, 8, 5), (8, 8, 8, 5),
                                                 (9, 16, 4, 3), (16, 16, 4, 3)):
        shape, strides = (length, 64 * vs), (64 * vs, 1)
        assert chosen(shape, strides, (0,)) == ColsShortVecConfig(threads=128, max_length=rung, blocks_per_sm=bound)
        assert chosen(shape, strides, (0,), b_strides=(0, 1)) == ColsShortVecConfig(threads=128, max_length=rung,
                                                                                    blocks_per_sm=weighted_bound)
        assert chosen(shape, strides, (0,), base_aligned=False) == ColsShortConfig(threads=256, max_length=16)
        assert chosen((length, 64 * vs + 1), (64 * vs + 1, 1), (0,)) == ColsShortConfig(threads=256, max_length=16)  # rows off the vector
    assert chosen((4096, 2), (1, 4096), (1,)) == ColsShortVecConfig(threads=128, max_length=4, blocks_per_sm=12)  # adjacent rows on the outer axis
    assert chosen((4096 + 1, 2), (1, 4096 + 1), (1,)) == ColsShortConfig(threads=256, max_length=16)
    assert isinstance(chosen((17, 64 * vs), (64 * vs, 1), (0,)), ColsConfig)
    plan = plan_logsumexp((2, 4194304), (4194304, 1), None, dtype, (0,), True, H200)
    (launch,) = plan.launches
    assert launch.spec.name == "logsumexp_cols_short_vec" and launch.block == (128,)
    assert launch.grid == (4194304 // vs // 128,) and plan.scratch is None


def test_scattered_axes_take_the_copy_path():
    assert plan_logsumexp((4, 5, 6), (30, 6, 1), None, np.dtype(np.float32), (0, 2), True, H200) is None


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="logsumexp: argument 'config'"):
        plan_logsumexp((4, 5), (5, 1), None, np.dtype(np.float32), (1,), True, H200,
                       RowsConfig(threads=256, group=8, vecs=4, parts=2))
    with pytest.raises(ValueError, match="logsumexp: argument 'config'"):
        plan_logsumexp((4, 5), (5, 1), None, np.dtype(np.float32), (1,), True, H200, ColsConfig(slices=8, unroll=8))
    with pytest.raises(ValueError, match="holds rows of up to 8 elements, got 9"):
        plan_logsumexp((9, 64), (64, 1), None, np.dtype(np.float32), (0,), True, H200,
                       ColsShortVecConfig(threads=128, max_length=8, blocks_per_sm=8))
    with pytest.raises(ValueError, match="every 16-byte vector of adjacent rows aligned"):
        plan_logsumexp((4, 64), (64, 1), None, np.dtype(np.float32), (0,), False, H200,
                       ColsShortVecConfig(threads=128, max_length=8, blocks_per_sm=8))
    with pytest.raises(ValueError, match="adjacent rows are adjacent in memory"):
        plan_logsumexp((4, 5), (5, 1), None, np.dtype(np.float32), (1,), True, H200,
                       ColsShortConfig(threads=256, max_length=16))
