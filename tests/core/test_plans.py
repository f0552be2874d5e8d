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

from ..conftest import GPU

SPEC = KernelSpec("common/selftest.cu", "scaled_copy", ("float", 128, 4))


class FakeKernel:
    num_regs = 40
    shared_size_bytes = 16

    def __init__(self):
        self.calls, self.preferred_shared_memory_carveout = [], None

    def __call__(self, grid, block, args, shared_mem=0):
        self.calls.append((grid, block, args, shared_mem))


class FakeArray:
    def __init__(self, ptr):
        self.data = type("Data", (), {"ptr": ptr})()


class Stream:
    ptr = 7


@pytest.fixture
def fake_runtime(monkeypatch):
    """Kernels that record their calls, a fake stream and scratch, no temporaries' allocation."""
    kernels = {}
    monkeypatch.setattr(plans, "get_kernel", lambda spec, dynamic_smem=0: kernels.setdefault(spec, FakeKernel()))
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: Stream())
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype: ("temporary", shape, np.dtype(dtype)))
    held = {}
    monkeypatch.setattr(plans.SCRATCH, "get", lambda request, stream: held.setdefault(request, ("s0", "s1")))
    return kernels


def test_a_call_fills_names_scratch_and_temporaries_in_kernel_order(fake_runtime):
    scalars = (np.int64(5), np.float32(0.5))
    launch = Launch(SPEC, (3,), (128,), ("x", "bias", "out") + scalars + (Scratch(1), Temporary(0), NULL), smem=64)
    plan = Plan((launch,), ScratchRequest("test", ((np.float32, 10, False), (np.uint32, 2, True))),
                temporaries=((np.float32, (2, 3)),))
    bound = BoundPlan(plan, H200)
    x, out = FakeArray(100), FakeArray(200)
    bound({"x": x, "bias": None, "out": out})
    (grid, block, args, smem), = fake_runtime[SPEC].calls
    assert (grid, block, smem) == ((3,), (128,), 64)
    assert args[0] is x and args[1] is NULL and args[2] is out and args[3:5] == scalars
    assert args[5] == "s1" and args[6] == ("temporary", (2, 3), np.dtype(np.float32)) and args[7] is NULL


def test_two_launches_share_the_temporaries(fake_runtime):
    other = KernelSpec("common/selftest.cu", "scaled_copy", ("float", 256, 2))
    first = Launch(SPEC, (1,), (32,), ("q", Temporary(0)))
    second = Launch(other, (1,), (32,), (Temporary(0), "out"))
    BoundPlan(Plan((first, second), temporaries=((np.float32, (4,)),)), H200)({"q": FakeArray(1), "out": FakeArray(2)})
    assert fake_runtime[SPEC].calls[0][2][1] is fake_runtime[other].calls[0][2][0]


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
    launched = []

    class FakePdl:
        def __init__(self, kernel, grid, block, smem, kinds):
            self.smem, self.kinds = smem, kinds

        def __call__(self, stream, pointers, maps=()):
            launched.append((self, stream, list(pointers), list(maps)))

    monkeypatch.setattr(plans._launch, "PdlLaunch", FakePdl)
    monkeypatch.setattr(plans, "allow_dynamic_smem", lambda kernel, smem: None)
    monkeypatch.setattr(plans.tma, "cached_map", lambda geometry, address: ("arg", "bytes", 1000 + address))
    args = (TensorMap("x", "gx"), "weight", "bias", "out", NULL, NULL, np.int64(9))
    launch = Launch(SPEC, (4,), (160,), args, smem=1000, pdl=True)
    BoundPlan(Plan((launch,)), H200)({"x": FakeArray(10), "weight": FakeArray(20), "bias": None, "out": FakeArray(30)})
    (pdl, stream, pointers, maps), = launched
    assert stream == Stream.ptr and pointers == [20, 0, 30] and maps == [1010]
    assert pdl.kinds[0] == plans._launch.MAP and pdl.kinds[1:4] == (plans._launch.POINTER,) * 3
    assert pdl.kinds[4] is NULL and pdl.kinds[6] == np.int64(9)
    # four blocks on 132 SMs: the grid asks for more than half an SM's shared memory
    assert pdl.smem > H200.smem_per_sm // 2 - 2048


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
