"""The default selection (pure): every branch is reached by the shapes the GPU tests use,
and every kernel it picks is among the instantiations CI compiles."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse._core.device import A100, H200
from cufuse.ops.logsumexp import select
from cufuse.ops.logsumexp.plan import plan_logsumexp
from cufuse.ops.logsumexp.problem import make_problem
from cufuse.ops.logsumexp.variants import ColsConfig, RowsConfig

# (shape, element strides, axes, what the default picks) on the H200
BRANCHES = [
    ((4096, 3), (3, 1), (1,), RowsConfig(256, 1, 2)),  # rows not aligned: a masked head vector
    ((4096, 4), (4, 1), (1,), RowsConfig(256, 1, 1)),
    ((4096, 20), (20, 1), (1,), RowsConfig(256, 2, 4)),
    ((4096, 100), (100, 1), (1,), RowsConfig(256, 8, 4)),
    ((4096, 1000), (1000, 1), (1,), RowsConfig(256, 256, 4, 1)),
    ((20000, 2000), (2000, 1), (1,), RowsConfig(256, 32, 4)),
    ((64, 5000), (5000, 1), (1,), RowsConfig(256, 256, 4, 2)),
    ((8, 300001), (300001, 1), (1,), RowsConfig(256, 256, 4, 74)),
    ((1000, 64), (64, 1), (0,), ColsConfig(8, 8, 8)),
    ((64, 4096), (1, 64), (1,), ColsConfig(8, 8, 32)),  # the last axis of a transposed view
    ((5, 40), (40, 1), (0,), ColsConfig(8, 8, 1)),
    ((6, 50), (100, 2), (1,), RowsConfig(256, 4, 4)),  # x[:, ::2]: strided rows
]


@pytest.mark.parametrize("shape, strides, axes, config", BRANCHES)
def test_each_branch(shape, strides, axes, config):
    problem = make_problem(shape, strides, None, np.dtype(np.float32), axes, True)
    assert select.choose(problem, H200) == config
    plan = plan_logsumexp(shape, strides, None, np.dtype(np.float32), axes, True, H200)
    assert (plan.scratch is not None) == (config.parts > 1)


@pytest.mark.parametrize("dev", [H200, A100])
def test_every_choice_is_compiled(dev):
    compiled = set(select.instantiations(dev))
    for dtype in (np.float16, np.float32, np.float64):
        for shape, strides, axes, _ in BRANCHES:
            for b_strides in (None, strides):
                plan = plan_logsumexp(shape, strides, b_strides, np.dtype(dtype), axes, False, dev)
                assert plan.launches[0].spec in compiled


def test_scattered_axes_take_the_copy_path():
    assert plan_logsumexp((4, 5, 6), (30, 6, 1), None, np.dtype(np.float32), (0, 2), True, H200) is None


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="logsumexp: argument 'config'"):
        plan_logsumexp((4, 5), (5, 1), None, np.dtype(np.float32), (1,), True, H200, RowsConfig(256, 8, 4, 2))
    with pytest.raises(ValueError, match="logsumexp: argument 'config'"):
        plan_logsumexp((4, 5), (5, 1), None, np.dtype(np.float32), (1,), True, H200, ColsConfig(8, 8))
