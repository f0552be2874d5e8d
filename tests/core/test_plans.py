"""cufuse._core.plans: plans as data, how a bound plan fills in a call's arguments, the one
plan cache and the scratch pool (CPU, with fake kernels; the GPU tests of every op launch
real ones)."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse._core import plans
from cufuse._core.device import H200
from cufuse._core.loader import KernelSpec
from cufuse._core.plans import NULL, BoundPlan, Launch, Plan, PlanCache, Scratch, ScratchRequest, TensorMap, Temporary

from ..conftest import GPU, RecordingKernel, RecordingLaunch

SPEC = KernelSpec("common/selftest.cu", "scaled_copy", ("float", 128, 4))


class FakeKernel(RecordingKernel):
    num_regs = 40
    shared_size_bytes = 16


class FakeArray:
    def __init__(self, ptr):
        self.data = type("Data", (), {"ptr": ptr})()


class Stream:
    ptr = 7


@pytest.fixture
def fake_runtime(monkeypatch):
    """Kernels that record their launches, a fake stream and scratch (addresses 1000, 1001),
    temporaries at 2000, 2001, ... in allocation order."""
    kernels = {}
    monkeypatch.setattr(plans, "get_kernel", lambda spec, dynamic_smem=0: kernels.setdefault(spec, FakeKernel()))
    monkeypatch.setattr(plans._launch, "DriverLaunch", RecordingLaunch)
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: Stream())
    allocated = []
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype: allocated.append((shape, dtype)) or FakeArray(
        2000 + len(allocated) - 1))
    held = {}
    monkeypatch.setattr(plans.SCRATCH, "get",
                        lambda request, stream: held.setdefault(request, (FakeArray(1000), FakeArray(1001))))
    return kernels


def test_a_call_fills_names_scratch_and_temporaries_in_kernel_order(fake_runtime):
    scalars = (np.int64(5), np.float32(0.5))
    launch = Launch(SPEC, (3,), (128,), ("x", "bias", "out") + scalars + (Scratch(1), Temporary(0), NULL), smem=64)
    plan = Plan((launch,), ScratchRequest("test", ((np.float32, 10, False), (np.uint32, 2, True))),
                temporaries=((np.float32, (2, 3)),))
    bound = BoundPlan(plan, H200)
    x, out = FakeArray(100), FakeArray(200)
    bound({"x": x, "bias": None, "out": out})
    (grid, block, args, smem), = fake_runtime[SPEC].launches
    assert (grid, block, smem) == ((3,), (128,), 64)
    assert args[:3] == (100, 0, 200) and args[3:5] == scalars  # no bias: a null pointer
    assert args[5] == 1001 and args[6] == 2000 and args[7] is NULL


def test_two_launches_share_the_temporaries(fake_runtime):
    other = KernelSpec("common/selftest.cu", "scaled_copy", ("float", 256, 2))
    first = Launch(SPEC, (1,), (32,), ("q", Temporary(0)))
    second = Launch(other, (1,), (32,), (Temporary(0), "out"))
    BoundPlan(Plan((first, second), temporaries=((np.float32, (4,)),)), H200)({"q": FakeArray(1), "out": FakeArray(2)})
    assert fake_runtime[SPEC].launches[0][2][1] == fake_runtime[other].launches[0][2][0] == 2000


def test_arguments_must_be_names_references_or_numpy_scalars(fake_runtime):
    with pytest.raises(TypeError, match="not a NumPy scalar"):
        BoundPlan(Plan((Launch(SPEC, (1,), (32,), ("x", 3)),)), H200)


def test_persistent_grids_are_checked_against_the_compiled_kernel(fake_runtime):
    """40 registers x 256 threads: 6 blocks an SM by registers; asking for 7 is refused."""
    BoundPlan(Plan((Launch(SPEC, (1,), (256,), ("x",), resident_blocks=6),)), H200)
    with pytest.raises(RuntimeError, match="cannot keep 7 blocks per SM"):
        BoundPlan(Plan((Launch(SPEC, (1,), (256,), ("x",), resident_blocks=7),)), H200)


def test_whole_carveout_is_set(fake_runtime):
    BoundPlan(Plan((Launch(SPEC, (1,), (32,), ("x",), whole_carveout=True),)), H200)
    assert fake_runtime[SPEC].preferred_shared_memory_carveout == 100


def test_pdl_launches_pass_pointers_and_maps_in_order(fake_runtime, monkeypatch):
    monkeypatch.setattr(plans, "allow_dynamic_smem", lambda kernel, smem: None)
    monkeypatch.setattr(plans.tma, "cached_map", lambda geometry, address: ("bytes", 1000 + address))
    args = (TensorMap("x", "gx"), "weight", "bias", "out", NULL, NULL, np.int64(9))
    launch = Launch(SPEC, (4,), (160,), args, smem=1000, pdl=True)
    bound = BoundPlan(Plan((launch,)), H200)
    bound({"x": FakeArray(10), "weight": FakeArray(20), "bias": None, "out": FakeArray(30)})
    (grid, block, launched, smem), = fake_runtime[SPEC].launches
    assert launched == (("map", 1010), 20, 0, 30, NULL, NULL, np.int64(9)) and bound.launches[0].launcher.pdl
    # four blocks on 132 SMs: the grid asks for more than half an SM's shared memory
    assert smem > H200.smem_per_sm // 2 - 2048


def test_plain_launches_keep_their_shared_memory(fake_runtime):
    bound = BoundPlan(Plan((Launch(SPEC, (4,), (160,), ("x",), smem=1000),)), H200)
    bound({"x": FakeArray(10)})
    (_, _, args, smem), = fake_runtime[SPEC].launches
    assert args == (10,) and smem == 1000 and not bound.launches[0].launcher.pdl


def test_plan_cache_is_bounded():
    cache = PlanCache(capacity=3)
    for key in range(3):
        cache.put(key, key)
    assert len(cache) == 3 and cache.get(1) == 1
    cache.put("next", 4)
    assert len(cache) == 1 and cache.get(1) is None and cache.get("next") == 4


@pytest.mark.skipif(not GPU, reason="no CUDA GPU present")
def test_scratch_grows_and_is_kept_per_stream_and_purpose():
    import cupy

    pool = plans.ScratchPool()
    small = ScratchRequest("p", ((np.float32, 10, False), (np.int32, 3, True)))
    large = ScratchRequest("p", ((np.float32, 100, False), (np.int32, 2, True)))
    stream = cupy.cuda.get_current_stream()
    first = pool.get(small, stream)
    assert pool.get(small, stream) is first and int(first[1].sum()) == 0
    grown = pool.get(large, stream)
    assert grown[0].size == 100 and grown[1].size == 3 and int(grown[1].sum()) == 0
    assert pool.get(small, stream) is grown
    assert pool.get(ScratchRequest("q", small.buffers), stream) is not grown
    with cupy.cuda.Stream() as other:
        assert pool.get(small, other) is not grown
