"""What the kernels' selection rules need to know about a GPU, and the occupancy arithmetic
they share. Pure apart from ``device_info``, which reads a live device's properties."""
from __future__ import annotations

import dataclasses
from functools import lru_cache

# Hardware limits of sm_80 / sm_90 per SM.
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
# Shared memory the hardware keeps of an SM's carveout for every resident block (sm_80+).
SMEM_RESERVED_PER_BLOCK = 1024


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """The properties the selection rules read."""

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
    def has_pdl(self) -> bool:
        """Programmatic dependent launch (griddepcontrol, the launch attribute): 9.0 and later."""
        return self.cc >= 90

    @property
    def has_wgmma(self) -> bool:
        """Warpgroup MMA and TMA kernels are built for sm_90a, which runs on 9.0 only."""
        return self.cc == 90


# Reference devices: CI compiles for them without a GPU, the CPU tests select for them.
H200 = DeviceInfo(cc=90, sm_count=132, max_smem_per_block=232448, smem_per_sm=233472, l2_bytes=60 * 1024 * 1024)
A100 = DeviceInfo(cc=80, sm_count=108, max_smem_per_block=166912, smem_per_sm=167936, l2_bytes=40 * 1024 * 1024)
REFERENCE_DEVICES = {"sm_90a": H200, "sm_90": H200, "sm_80": A100}


@lru_cache(maxsize=None)
def device_info(device_id: int) -> DeviceInfo:
    """The DeviceInfo of a live CuPy device."""
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


def resident_blocks_per_sm(registers_per_thread: int, threads: int, block_smem: int, dev: DeviceInfo) -> int:
    """Blocks of a compiled kernel an SM holds at once: registers (allocated in units of 8 a
    thread), shared memory (``block_smem``: static plus dynamic bytes; the whole carveout, plus
    the hardware's reserve a block) and threads."""
    registers = -(-registers_per_thread // 8) * 8 * threads
    smem = block_smem + SMEM_RESERVED_PER_BLOCK
    return min(REGISTERS_PER_SM // registers, dev.smem_per_sm // smem, THREADS_PER_SM // threads, BLOCKS_PER_SM)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
