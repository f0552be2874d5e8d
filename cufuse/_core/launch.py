"""Kernel launches through the driver's ``cuLaunchKernelEx``, optionally with programmatic
dependent launch (PDL, compute capability 9.0 and later).

Every bound plan launches its kernels here (``DriverLaunch``): the scalar arguments are packed
once when the plan is bound and only the device addresses change per call. CuPy's
``RawKernel`` call converts every argument on every call: ~20 us for the 37 arguments of an
attention kernel on the H200's host, which made every small decode call host-bound
(``experiments/attention/profile_host.py``).

Back to back in one stream, the next kernel normally starts only after the previous one
has drained and its completion has travelled back to the front end: on the H200 ~1.5 us
between two ~35 us weight streams (experiments/linear/probe_launch_gap.py: kernels and gaps from a CUPTI
timeline, the same for cuBLASLt's kernels). Launched with the programmatic-stream-
serialisation attribute, a kernel's blocks may start as soon as every block of the previous
grid has run ``griddepcontrol.launch_dependents`` (or exited), on the SMs the previous grid
leaves free, and meet the dependency in ``griddepcontrol.wait``, which returns once that grid
has completed and its memory is visible. Every kernel launched here must therefore call
``begin_dependent_grid()`` (kernels/common/common.cuh) before its first global memory access: it
lets the next PDL kernel start (so that one overlaps this one's tail), then waits.

The driver is called through ctypes (as ``tma`` calls the tensor-map encoder). A
``DriverLaunch`` packs a kernel's arguments once: the scalars at construction, the pointers
and tensor maps per call into its own buffers, under a lock (a plan may be shared between
threads; the driver copies the parameters during the call).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID (cuda.h, CUDA 12 and 13)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, 4 pad bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int32),
                ("value_rest", ctypes.c_char * 60)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3), ("smem", ctypes.c_uint32),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint32)]


_SCALAR_TYPES = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64,
                 np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.float32): ctypes.c_float,
                 np.dtype(np.float64): ctypes.c_double}
POINTER, MAP = "pointer", "map"  # the kinds of per-call arguments

_driver = None


def _launch_kernel_ex():
    global _driver
    if _driver is None:
        fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        fn.restype = ctypes.c_int
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        _driver = fn
    return _driver


def scalar_argument(value):
    """The ctypes value of a NumPy scalar kernel argument (its C type from its dtype)."""
    ctype = _SCALAR_TYPES.get(np.dtype(type(value)))
    if ctype is None:
        raise TypeError(f"cufuse: no kernel argument type for {type(value).__name__}")
    return ctype(value)


def _dim3(dims) -> ctypes.Array:
    """A grid or block of 1 to 3 dims as CUDA's three (missing dims are 1)."""
    return (ctypes.c_uint32 * 3)(*(tuple(dims) + (1,) * (3 - len(dims))))


class DriverLaunch:
    """One kernel's launch: ``kinds`` names each argument, POINTER (a device address, given
    per call), MAP (the address of a 128-byte tensor map on the host, per call) or a NumPy
    scalar (fixed). ``pdl``: with the programmatic-stream-serialisation attribute.
    ``__call__(stream, pointers, maps)`` takes the per-call values in argument order."""

    __slots__ = ("function", "config", "attribute", "params", "pointers", "map_slots", "scalars", "lock", "name")

    def __init__(self, kernel, grid, block, smem: int, kinds, pdl: bool = False):
        self.function = ctypes.c_void_p(kernel.kernel.ptr)
        self.name = kernel.name if hasattr(kernel, "name") else "kernel"
        if pdl:
            self.attribute = _LaunchAttribute(PROGRAMMATIC_STREAM_SERIALIZATION, b"", 1, b"")
            attributes, count = ctypes.pointer(self.attribute), 1
        else:
            self.attribute, attributes, count = None, None, 0
        self.config = _LaunchConfig(_dim3(grid), _dim3(block), smem, None, attributes, count)
        self.params = (ctypes.c_void_p * len(kinds))()
        pointer_count = sum(kind is POINTER for kind in kinds)
        self.pointers = (ctypes.c_uint64 * max(pointer_count, 1))()  # the device addresses, in argument order
        self.map_slots, self.scalars = [], []
        slot = 0
        for index, kind in enumerate(kinds):
            if kind is POINTER:
                self.params[index] = ctypes.addressof(self.pointers) + 8 * slot
                slot += 1
            elif kind is MAP:
                self.map_slots.append(index)
            else:
                value = scalar_argument(kind)
                self.scalars.append(value)  # kept alive: params holds its address
                self.params[index] = ctypes.addressof(value)
        self.lock = threading.Lock()

    def __call__(self, stream: int, pointers, maps=()):
        """Launch on ``stream`` with the device addresses ``pointers`` and the host
        addresses of the tensor maps ``maps``, both in argument order."""
        with self.lock:
            for slot, value in enumerate(pointers):
                self.pointers[slot] = value
            for index, address in zip(self.map_slots, maps):
                self.params[index] = address
            self.config.stream = stream
            status = _launch_kernel_ex()(ctypes.addressof(self.config), self.function, self.params, None)
        if status != 0:
            raise RuntimeError(f"cufuse: cuLaunchKernelEx failed with CUresult {status} ({self.name})")


def use_whole_carveout(kernel) -> None:
    """Let the kernel's blocks share the SM's whole shared-memory carveout: the residency its
    config counts on (the driver may otherwise pick a smaller carveout)."""
    kernel.preferred_shared_memory_carveout = 100


def pdl_smem(smem: int, static_smem: int, blocks: int, dev) -> int:
    """The dynamic shared memory of a PDL launch of ``blocks`` blocks that need ``smem``
    dynamic and ``static_smem`` static bytes. Once every block of a grid has started, the
    next PDL grid's blocks take every free block slot at once; a grid of at most one block
    per SM would leave the second slot of each SM to them, and they pile up two on some
    SMs (measured: the two-an-SM mma stream at M = 16 lost 6-8 % with PDL, the one-an-SM
    kernels gained). Such a grid therefore asks for more than half an SM's shared memory."""
    from .device import SMEM_RESERVED_PER_BLOCK

    if blocks > dev.sm_count:
        return smem
    half = dev.smem_per_sm // 2 + 1 - SMEM_RESERVED_PER_BLOCK - static_smem
    return max(smem, min(half, dev.max_smem_per_block - static_smem))
