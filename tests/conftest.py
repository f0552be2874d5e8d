"""Shared test fixtures. GPU tests use the ``cp`` fixture and skip where no GPU is present."""
from __future__ import annotations

import os

import numpy as np
import pytest


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _nvrtc_available() -> bool:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
        return True
    except Exception:
        return False


GPU = _gpu_available()
requires_gpu = pytest.mark.skipif(not GPU, reason="no CUDA GPU present")
# Compiling needs CuPy's NVRTC binding, not a GPU: a CPU-only install (no CuPy) skips these.
NVRTC = _nvrtc_available()
requires_nvrtc = pytest.mark.skipif(not NVRTC, reason="needs CuPy with NVRTC (cufuse's extra cuda13 or cuda12)")


def nvdisasm_path() -> str | None:
    """nvdisasm from PATH or from the nvidia-cuda-nvdisasm wheel (the test extra's), else None."""
    import glob
    import shutil

    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for candidate in sorted(glob.glob(os.path.join(root, "cu*", "bin", "nvdisasm")), reverse=True):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


# Reading SASS (the instruction order ptxas chose) needs NVRTC and nvdisasm, not a GPU.
NVDISASM = nvdisasm_path()
requires_sass = pytest.mark.skipif(not (NVRTC and NVDISASM),
                                   reason="needs NVRTC and nvdisasm (the test extra's nvidia-cuda-nvdisasm)")
# ptxas serialised the wgmmas (spilled accumulators, accumulators written inside a pipeline stage,
# a wait it inserted on a divergent path): no overlap of any kind is left
WGMMA_SERIALISED = ("C7512", "C7515", "C7518")
SETMAXNREG_IGNORED = "C7508"


@pytest.fixture
def cp():
    """The cupy module; skips the test where no GPU is present. Afterwards the memory pool
    returns its cached blocks to the device: the suite runs in parallel workers on one GPU,
    and a worker keeping the gigabytes of its last large test starved another's next
    allocation (an out-of-memory error at 200 MB allocated)."""
    if not GPU:
        pytest.skip("no CUDA GPU present")
    import cupy

    yield cupy
    cupy.get_default_memory_pool().free_all_blocks()


@pytest.fixture
def rng(request):
    """A fresh random generator per test; its seed is printed when the test fails."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed {seed} for {request.node.nodeid}")
    return np.random.default_rng(seed)


def poisoned(cp, shape, dtype):
    """A C-contiguous cupy array with every byte 0xFF: NaN in every float dtype, so an
    element the kernel failed to write shows up in the comparison."""
    arr = cp.empty(shape, dtype=dtype)
    arr.view(cp.uint8).fill(0xFF)
    return arr


def allocations(cp, fn):
    """``(fn(), sizes)``: what fn returned and the byte size of every device allocation it
    made through CuPy's allocator."""
    pool = cp.get_default_memory_pool()
    sizes = []

    def counting(nbytes):
        sizes.append(nbytes)
        return pool.malloc(nbytes)

    cp.cuda.set_allocator(counting)
    try:
        return fn(), sizes
    finally:
        cp.cuda.set_allocator(pool.malloc)


class RecordingKernel:
    """A loaded kernel that records its launches instead of running them (with
    RecordingLaunch): ``launches`` holds (grid, block, args, smem) per launch."""

    num_regs = 64
    shared_size_bytes = 1024
    name = "fake"

    def __init__(self):
        self.launches, self.preferred_shared_memory_carveout = [], None


class RecordingLaunch:
    """Stands in for ``launch.DriverLaunch``: records each launch on its RecordingKernel, the
    arguments as the kernel would receive them (device addresses as ints, ("map", host
    address) for tensor maps, the NumPy scalars as given)."""

    def __init__(self, kernel, grid, block, smem, kinds, pdl=False):
        self.kernel, self.grid, self.block, self.smem, self.kinds, self.pdl = kernel, grid, block, smem, kinds, pdl

    def __call__(self, stream, pointers, maps=()):
        from cufuse._core.launch import MAP, POINTER

        pointers, maps = iter(pointers), iter(maps)
        args = tuple(next(pointers) if kind is POINTER else ("map", next(maps)) if kind is MAP else kind
                     for kind in self.kinds)
        self.kernel.launches.append((self.grid, self.block, args, self.smem))


def fake_gpu_calls(monkeypatch, api, dev):
    """An op's host path without a GPU (CuPy installed): (make_array, kernels, scratch).
    ``make_array(shape, dtype)``: a cupy array over host memory on device 0; ``kernels``: spec ->
    kernel recording its launches; ``scratch``: purpose -> the host buffers handed out. ``api``
    (the op's api module) and the driver see ``dev`` as every device, the driver an empty plan
    cache."""
    cupy = pytest.importorskip("cupy")
    from cufuse._core import driver, plans

    kernels, owners, held = {}, [], {}

    def make_array(shape, dtype):
        nbytes = max(16, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        buffer = np.zeros(nbytes + 16, np.uint8)
        owners.append(buffer)
        memory = cupy.cuda.memory.UnownedMemory(buffer.ctypes.data, buffer.nbytes, buffer, device_id=0)
        return cupy.ndarray(shape, dtype, memptr=cupy.cuda.memory.MemoryPointer(memory, 0))

    def scratch(request, stream):
        if request.purpose not in held:
            held[request.purpose] = tuple(make_array((n,), d) for d, n, _ in request.buffers)
        return held[request.purpose]

    class Stream:
        ptr = 0

    monkeypatch.setattr(plans, "get_kernel", lambda spec, dynamic_smem=0: kernels.setdefault(spec, RecordingKernel()))
    monkeypatch.setattr(plans._launch, "DriverLaunch", RecordingLaunch)
    monkeypatch.setattr(plans, "allow_dynamic_smem", lambda kernel, smem: None)  # PDL launches' padded smem
    monkeypatch.setattr(plans.SCRATCH, "get", scratch)
    if hasattr(api, "device_info"):  # an op that plans outside the driver's bound plans (linear, attention)
        monkeypatch.setattr(api, "device_info", lambda device_id: dev)
    monkeypatch.setattr(driver, "device_info", lambda device_id: dev)
    monkeypatch.setattr(driver, "PLANS", plans.PlanCache())
    monkeypatch.setattr(cupy.cuda.runtime, "getDevice", lambda: 0)
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: Stream())
    return make_array, kernels, held


def pytest_addoption(parser):
    parser.addoption("--update-dispatch", action="store_true",
                     help="rewrite tests/data/dispatch.txt from today's planners (a deliberate dispatch change)")
