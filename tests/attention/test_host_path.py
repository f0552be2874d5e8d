"""attention's host path over fake GPU arrays (tests/conftest.py fake_gpu_calls): the first call
of a signature validates, plans and binds, later calls run its ``PreparedCall``; grouped heads
come back in their grouped shapes, on both paths, and an out over an input is still refused."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse._core import driver
from cufuse._core.device import H200
from cufuse._core.plans import PreparedCall

from ..conftest import fake_gpu_calls


@pytest.fixture
def fake_gpu(monkeypatch):
    """fake_gpu_calls on an H200, with new arrays (outputs) over host memory."""
    from cufuse.ops.attention import api

    fake = fake_gpu_calls(monkeypatch, api, H200)  # skips without CuPy
    import cupy

    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=np.float64: fake[0](shape, dtype))
    return (api,) + fake


def test_prepared_attention_calls_plan_once(fake_gpu, monkeypatch):
    api, make_array, kernels, _ = fake_gpu
    q, k, v = make_array((2, 8, 1, 64), np.float16), make_array((2, 2, 300, 64), np.float16), \
        make_array((2, 2, 300, 64), np.float16)
    out = make_array((2, 8, 1, 64), np.float16)
    built = []
    original = api.plan_attention
    monkeypatch.setattr(api, "plan_attention", lambda *a: built.append(a) or original(*a))
    for _ in range(3):
        assert cufuse.attention(q, k, v, enable_gqa=True, out=out) is out
        result, lse = cufuse.attention(q, k, v, enable_gqa=True, causal=True, return_lse=True)
        assert result.shape == (2, 8, 1, 64) and lse.shape == (2, 8, 1) and lse.dtype == np.float32
    assert len(built) == 2 and sum(isinstance(e, PreparedCall) for e in driver.PLANS._plans.values()) == 2
    forwards = [args for kernel in kernels.values() for _, _, args, _ in kernel.launches
                if args[:3] == (q.data.ptr, k.data.ptr, v.data.ptr)]
    assert len(forwards) == 6  # every call launches its forward kernel on the caller's arrays
    with pytest.raises(ValueError, match="argument 'out' must not overlap input 'q'"):
        cufuse.attention(q, k, v, enable_gqa=True, out=q)
