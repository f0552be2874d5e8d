"""fused_linear's host path without a GPU (CuPy installed): the first call of a signature plans
and binds, later calls of it run the ``PreparedCall`` (kernels that record their launches,
arrays over host memory; an A100, so no tensor maps or programmatic launch)."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse._core import driver
from cufuse._core.device import A100
from cufuse.ops.linear.plan import plan_linear

from ..conftest import fake_gpu_calls


@pytest.fixture
def fake_gpu(monkeypatch):
    from cufuse.ops.linear import api

    return (api,) + fake_gpu_calls(monkeypatch, api, A100)


def test_prepared_linear_calls_plan_once_and_keep_their_arguments(fake_gpu, monkeypatch):
    api, make_array, kernels, _ = fake_gpu
    x, w, b = make_array((16, 64), np.float32), make_array((64, 40), np.float32), make_array((40,), np.float32)
    out = make_array((16, 40), np.float32)
    built = []
    monkeypatch.setattr(api, "plan_linear", lambda *a, **k: built.append(a) or plan_linear(*a, **k))
    for _ in range(3):
        assert cufuse.fused_linear_relu(x, w, b, out=out) is out
        assert cufuse.fused_linear(x, w, out=out, activation="gelu") is out  # no bias: its own signature
    assert len(built) == 2 and len(driver.PLANS) == 2
    launches = [launch for kernel in kernels.values() for launch in kernel.launches]
    assert len(launches) == 6
    # the bias as its (N,) view on the first call, as given on prepared ones: the same memory
    with_bias = [args for _, _, args, _ in launches if args[2] != 0]
    without = [args for _, _, args, _ in launches if args[2] == 0]
    assert len(with_bias) == 3 and len(without) == 3
    assert all(args[2] == b.data.ptr for args in with_bias)
    for args in with_bias + without:
        assert args[:2] == (x.data.ptr, w.data.ptr) and args[3] == out.data.ptr
    assert all(args[-1] == 1 for args in with_bias) and all(args[-1] == 2 for args in without)  # relu, gelu
    # the prepared signature still refuses an out over x, and other arguments still validate
    over_x = x.reshape(-1)[: 16 * 40].reshape(16, 40)  # C-contiguous, over x's first rows
    with pytest.raises(ValueError, match="overlap"):
        cufuse.fused_linear_relu(x, w, b, out=over_x)
    with pytest.raises(ValueError, match="argument 'activation'"):
        cufuse.fused_linear(x, w, b, out=out, activation="elu")
