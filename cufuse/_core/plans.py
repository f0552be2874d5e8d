"""Launch plans as data, and the one place that turns them into kernel launches.

Every op's variant classes describe a call as a ``Plan``: the kernels, their grids and
shared memory, and their arguments in order, where an argument is a fixed NumPy scalar or
a reference to something that exists only per call (a named input or output, a tensor map
of one, a buffer of the op's reusable scratch, a temporary). A ``Plan`` is pure: the CPU
tests compare plans with a recorded snapshot, and CI lists the kernels plans can name.

``BoundPlan`` is a plan made runnable on one device: kernels loaded, their attributes set,
the argument lists pre-filled, so that a call only fills in its pointers and launches.
Ops keep bound plans in ``PLANS`` under their call signatures (one cache for every op), and
reusable workspaces in ``SCRATCH``, keyed by device, stream and purpose.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import launch as _launch
from . import tma
from .device import resident_blocks_per_sm
from .loader import KernelSpec, allow_dynamic_smem, get_kernel

NULL = np.uint64(0)  # a null pointer argument


@dataclasses.dataclass(frozen=True)
class Scratch:
    """Argument: buffer ``index`` of the plan's ``ScratchRequest``."""

    index: int


@dataclasses.dataclass(frozen=True)
class Temporary:
    """Argument: temporary ``index`` of the plan (allocated per call, freed after it)."""

    index: int


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """Argument: the TMA tensor map (``tma.MapGeometry``) over the call's array ``name``."""

    name: str
    geometry: object


@dataclasses.dataclass(frozen=True)
class ScratchRequest:
    """Reusable workspace of a plan: ``buffers`` of (dtype, element count, zeroed), held per
    (device, stream, ``purpose``) and grown, never shrunk. Kernels that need zeroed buffers
    (arrival counters, atomic accumulators) leave them zeroed, so calls on one stream (which
    never overlap) reuse them without a memset."""

    purpose: str
    buffers: tuple


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch. ``args`` in the kernel's order: strings name the call's arrays
    (None passes a null pointer), ``Scratch`` / ``Temporary`` / ``TensorMap`` refer to the
    plan's buffers, anything else is a fixed NumPy scalar.

    ``whole_carveout``: the kernel's blocks share the SM's whole shared-memory carveout
    (the residency its config counts on). ``resident_blocks``: blocks an SM must hold at once (persistent grids whose blocks wait
    for each other), checked against the compiled kernel. ``pdl``: launched with
    programmatic dependent launch (the kernel calls ``begin_dependent_grid``), its dynamic
    shared memory padded by ``launch.pdl_smem``.
    """

    spec: KernelSpec
    grid: tuple
    block: tuple
    args: tuple
    smem: int = 0
    whole_carveout: bool = False
    resident_blocks: int = 0
    pdl: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """The launches of one call, in order, and the buffers they share."""

    launches: tuple
    scratch: ScratchRequest | None = None
    temporaries: tuple = ()  # (dtype, shape) per Temporary index


class _BoundLaunch:
    """One ``Launch`` with its kernel loaded and its arguments packed for the driver
    (``launch.DriverLaunch``): per call only the device addresses (and tensor maps) change."""

    __slots__ = ("kernel", "grid", "block", "smem", "pdl", "maps", "pointer_sources", "launcher")

    def __init__(self, launch: Launch, dev):
        kernel = get_kernel(launch.spec, dynamic_smem=launch.smem)
        if launch.whole_carveout:
            _launch.use_whole_carveout(kernel)
        if launch.resident_blocks:
            _require_resident(kernel, launch, dev)
        self.maps, self.pointer_sources = [], []
        for arg in launch.args:
            if isinstance(arg, str):
                self.pointer_sources.append((0, arg))
            elif isinstance(arg, Scratch):
                self.pointer_sources.append((1, arg.index))
            elif isinstance(arg, Temporary):
                self.pointer_sources.append((2, arg.index))
            elif isinstance(arg, TensorMap):
                self.maps.append((arg.name, arg.geometry))
            elif not isinstance(arg, np.generic):
                raise TypeError(f"cufuse: launch argument {arg!r} of {launch.spec.expression} is not a NumPy scalar")
        smem = launch.smem
        if launch.pdl:
            smem = _launch.pdl_smem(launch.smem, kernel.shared_size_bytes, int(np.prod(launch.grid)), dev)
            allow_dynamic_smem(kernel, smem)
        self.kernel, self.grid, self.block, self.smem, self.pdl = kernel, launch.grid, launch.block, smem, launch.pdl
        kinds = tuple(_launch.MAP if isinstance(a, TensorMap) else a if isinstance(a, np.generic) else _launch.POINTER
                      for a in launch.args)
        self.launcher = _launch.DriverLaunch(kernel, launch.grid, launch.block, smem, kinds, pdl=launch.pdl)

    def __call__(self, arrays, scratch, temps, stream) -> None:
        sources = (arrays, scratch, temps)
        pointers = []
        for kind, key in self.pointer_sources:
            value = sources[kind][key]
            pointers.append(0 if value is None else value.data.ptr)
        # the map entries stay referenced until the launch has copied their bytes
        maps = [tma.cached_map(geometry, arrays[name].data.ptr) for name, geometry in self.maps]
        self.launcher(stream.ptr, pointers, [address for _, address in maps])


def _require_resident(kernel, launch: Launch, dev) -> None:
    """A persistent grid's blocks wait for each other: all of them must be resident at once."""
    threads = int(np.prod(launch.block))
    held = resident_blocks_per_sm(kernel.num_regs, threads, launch.smem + kernel.shared_size_bytes, dev)
    if held < launch.resident_blocks:
        raise RuntimeError(
            f"cufuse: the persistent kernel {launch.spec.expression} cannot keep {launch.resident_blocks} blocks per "
            f"SM ({kernel.num_regs} registers/thread, {launch.smem + kernel.shared_size_bytes} B shared memory/block)"
        )


class BoundPlan:
    """A ``Plan`` ready to launch on one device: ``plan(arrays)`` launches every kernel on the
    current stream with the call's arrays (a dict by name)."""

    __slots__ = ("plan", "launches")

    def __init__(self, plan: Plan, dev):
        self.plan = plan
        self.launches = tuple(_BoundLaunch(launch, dev) for launch in plan.launches)

    def __call__(self, arrays) -> None:
        import cupy

        stream = cupy.cuda.get_current_stream()
        scratch = SCRATCH.get(self.plan.scratch, stream) if self.plan.scratch is not None else ()
        temps = tuple(cupy.empty(shape, dtype=dtype) for dtype, shape in self.plan.temporaries)
        for launch in self.launches:
            launch(arrays, scratch, temps, stream)


def gpu_signature(*arrays):
    """What a call's arrays contribute to its prepared-call key (``PreparedCall``): shape,
    strides, dtype, address modulo 16 (every alignment a plan can depend on) and device of each;
    None unless every one is a CuPy ndarray (other inputs take the op's full path, which converts
    and validates them). A few microseconds: it runs on every call."""
    ndarray = _cupy_ndarray()
    signature = []
    for array in arrays:
        if type(array) is not ndarray:
            return None
        data = array.data
        signature.append((array.shape, array.strides, array.dtype, data.ptr & 15, data.device_id))
    return tuple(signature)


@functools.cache
def _cupy_ndarray():
    """cupy.ndarray, or a class no argument is an instance of where CuPy is missing (looked up
    once: a cached call runs no Python frame)."""
    try:
        from cupy import ndarray
    except ImportError:
        return type("NoCupy", (), {})
    return ndarray


class PreparedCall:
    """A validated call signature, ready to run again: the op's full path (validation,
    selection, binding) ran once for it, and every fact it checked is in the key (the
    arrays' ``gpu_signature``, a given ``out``'s too, and the other arguments with their
    types), so a later call of the same key only checks that a given ``out`` does not
    overlap an input, allocates the other outputs and launches. ``outputs`` are the results
    in order, (name, shape, dtype, order) each (``order``: as ``new_array``'s); the one named
    "out" is the caller's when given. An
    input given as None (an absent optional argument, e.g. no bias) is passed to the kernels
    as None on every call; the call then takes only the others."""

    __slots__ = ("bound", "device", "inputs", "absent", "extents", "outputs")

    def __init__(self, bound: BoundPlan, arrays: dict, outputs: tuple):
        present = {name: array for name, array in arrays.items() if array is not None}
        self.bound, self.inputs, self.outputs = bound, tuple(present), outputs
        self.absent = {name: None for name, array in arrays.items() if array is None}
        self.device = next(iter(present.values())).device.id
        self.extents = tuple(_byte_extent(array) for array in present.values())

    def __call__(self, arrays, out):
        """The results of the call's ``arrays`` (the present inputs, in order) into ``out``
        (None: none given), or None when ``out`` overlaps an input's byte range (the full path
        then decides, and raises where it must)."""
        import cupy

        if out is not None:
            start = out.data.ptr
            end = start + out.nbytes
            for array, (low, high) in zip(arrays, self.extents):
                base = array.data.ptr
                if base + low < end and start < base + high:
                    return None
        if cupy.cuda.runtime.getDevice() != self.device:
            with cupy.cuda.Device(self.device):
                return self._launch(arrays, out)
        return self._launch(arrays, out)

    def _launch(self, arrays, out):
        named = dict(zip(self.inputs, arrays))
        if self.absent:
            named.update(self.absent)
        results = []
        for name, shape, dtype, order in self.outputs:
            result = out if out is not None and name == "out" else new_array(shape, dtype, order)
            named[name] = result
            results.append(result)
        self.bound(named)
        return tuple(results) if len(results) > 1 else results[0]


def new_array(shape, dtype, order=None):
    """A new CuPy array of ``shape``: C-contiguous (``order`` None), or dense with its axes in
    memory in ``order`` (slowest first), as a transposed view."""
    import cupy

    if order is None:
        return cupy.empty(shape, dtype=dtype)
    return cupy.empty(tuple(shape[d] for d in order), dtype=dtype).transpose(tuple(np.argsort(order)))


def _byte_extent(array) -> tuple:
    """(low, high): the byte range an array's elements span, relative to its data pointer
    (empty for an empty array)."""
    if array.size == 0:
        return 0, 0
    low = sum(min(0, stride * (n - 1)) for n, stride in zip(array.shape, array.strides))
    high = sum(max(0, stride * (n - 1)) for n, stride in zip(array.shape, array.strides))
    return low, high + array.itemsize


class PlanCache:
    """Bound plans by call signature, for every op (each op prefixes its keys with its
    name). Bounded: emptied when full, so a program cycling through shapes cannot grow it
    without limit."""

    def __init__(self, capacity: int = 8192):
        self.capacity = capacity
        self._plans: dict = {}

    def get(self, key):
        return self._plans.get(key)

    def prepared(self, key):
        """The ``PreparedCall`` under ``key``, or None (also for an unhashable key: a bad
        argument the full path will reject)."""
        try:
            return self._plans.get(key)
        except TypeError:
            return None

    def put(self, key, value):
        if len(self._plans) >= self.capacity:
            self._plans.clear()
        self._plans[key] = value
        return value

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


class ScratchPool:
    """Reusable workspaces per (device, stream, purpose), grown on demand (see
    ``ScratchRequest``). Calls on one stream are ordered, so they never share a workspace
    concurrently."""

    def __init__(self):
        self._held: dict = {}

    def get(self, request: ScratchRequest, stream) -> tuple:
        import cupy

        key = (cupy.cuda.runtime.getDevice(), stream.ptr, request.purpose)
        held = self._held.get(key)
        if held is None or any(array.size < count for array, (_, count, _) in zip(held, request.buffers)):
            buffers = []
            for index, (dtype, count, zeroed) in enumerate(request.buffers):
                size = max(count, held[index].size if held else 0)
                buffers.append(cupy.zeros(size, dtype=dtype) if zeroed else cupy.empty(size, dtype=dtype))
            held = self._held[key] = tuple(buffers)
        return held

    def clear(self) -> None:
        self._held.clear()


PLANS = PlanCache()
SCRATCH = ScratchPool()
