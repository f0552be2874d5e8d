"""Kernel configurations: frozen dataclasses and pure selection functions.

Nothing here touches a GPU: a selection function takes the problem (shape, dtype) and a
``DeviceInfo``, so it is unit-tested on any machine, and CI enumerates every
instantiation the configs can pick (``all_instantiations``) to compile it without a GPU.
Each op keeps its configs in its own module (``softmax``, ``linear``, ``attention``).
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What the configs need to know about a GPU."""

    cc: int  # compute capability, major*10+minor
    sm_count: int
    max_smem_per_block: int  # opt-in dynamic shared memory per block, bytes
    smem_per_sm: int
    l2_bytes: int

    @property
    def max_cluster_size(self) -> int:
        """Largest portable thread-block cluster (Hopper and later)."""
        return 8 if self.cc >= 90 else 1

    @property
    def has_wgmma(self) -> bool:
        return self.cc == 90


# Reference devices for compiling without a GPU (CI) and for tests of the selection rules.
H200 = DeviceInfo(cc=90, sm_count=132, max_smem_per_block=232448, smem_per_sm=233472, l2_bytes=60 * 1024 * 1024)
A100 = DeviceInfo(cc=80, sm_count=108, max_smem_per_block=166912, smem_per_sm=167936, l2_bytes=40 * 1024 * 1024)
REFERENCE_DEVICES = {"sm_90a": H200, "sm_90": H200, "sm_80": A100}


@lru_cache(maxsize=None)
def device_info(device_id: int) -> DeviceInfo:
    """DeviceInfo of a live CuPy device."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return DeviceInfo(
        cc=props["major"] * 10 + props["minor"],
        sm_count=props["multiProcessorCount"],
        max_smem_per_block=props["sharedMemPerBlockOptin"],
        smem_per_sm=props["sharedMemPerMultiprocessor"],
        l2_bytes=props["l2CacheSize"],
    )


def current_device_info() -> DeviceInfo:
    import cupy

    return device_info(cupy.cuda.Device().id)


def selftest_instantiations(dev: DeviceInfo) -> list:
    """The loader's self-test kernel at two tile sizes (``python -m cufuse info`` and the
    loader's GPU test launch it)."""
    from .._loader import KernelSpec

    return [
        KernelSpec("selftest.cu", "scaled_copy", ("float", 128, 4)),
        KernelSpec("selftest.cu", "scaled_copy", ("float", 256, 2)),
    ]


def op_modules():
    """The per-op config modules, each with ``instantiations(dev) -> Iterable[KernelSpec]``."""
    from . import attention, linear, softmax

    return (softmax, linear, attention)


def all_instantiations(dev: DeviceInfo) -> list:
    """Every kernel instantiation the configs can pick on ``dev``, without duplicates."""
    specs = selftest_instantiations(dev)
    for module in op_modules():
        specs.extend(s for s in module.instantiations(dev) if dev.cc >= s.min_cc)
    return list(dict.fromkeys(specs))
