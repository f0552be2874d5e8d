"""How many thread-block clusters of cufuse's cluster kernels the GPU holds at once, against
what the SMs' register, shared-memory and thread budgets would allow (docs/softmax.md,
"Stashed clusters": every cluster variant measured about half the speed of its one-block twin).

Run: ``python3 experiments/softmax/probe_cluster_occupancy.py`` (seconds, sm_90). For each
kernel: blocks an SM by its resources (``resident_blocks_per_sm``), the clusters that would
give over the SMs, and the driver's ``cuOccupancyMaxActiveClusters`` (the GPC layout included).
It measured the (since deleted) column strips in clusters of 16: 21 / 14 clusters
(float16 / float32) against 24 / 16 by the SMs' budgets.
"""
from __future__ import annotations

import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

from cufuse._core import launch as core_launch  # noqa: E402
from cufuse._core.device import current_device_info, resident_blocks_per_sm  # noqa: E402
from cufuse._core.loader import get_kernel  # noqa: E402
from cufuse.ops.softmax.cols import ColsConfig, ColsVecConfig  # noqa: E402
from cufuse.ops.softmax.plan import plan_softmax  # noqa: E402
from cufuse.ops.softmax.rows import ClusterConfig, StashedRowsConfig  # noqa: E402


class LaunchConfig(ctypes.Structure):  # the driver's CUlaunchConfig
    _fields_ = [(name, ctypes.c_uint) for name in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "smem")] + [
        ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def max_active_clusters(kernel, cluster: int, threads: int, smem: int) -> int:
    driver = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_int(0)
    config = LaunchConfig(cluster * 1024, 1, 1, threads, 1, 1, smem, None, None, 0)
    status = driver.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(kernel.kernel.ptr), ctypes.byref(config))
    return count.value if status == 0 else -status


def main():
    dev = current_device_info()
    cases = [  # (name, config, dtype, shape, axes)
        ("rows stashed float32 256 x 8 + 3 c8", StashedRowsConfig(threads=256, vecs=8, stash_tiles=3, blocks_per_sm=2,
                                                                  cluster=8), np.float32, (128, 262144), (1,)),
        ("rows cluster float64 512 x 4 c8", ClusterConfig(threads=512, vecs=4, cluster=8), np.float64, (1024, 16384),
         (1,)),
        ("rows cluster float32 256 x 8 c4 (v7, lost)", ClusterConfig(threads=256, vecs=8, cluster=4), np.float32,
         (2048, 32768), (1,)),
        ("cols float16 c4", ColsConfig(slices=16, unroll=12, cluster=4), np.float16, (16384, 4096), (0,)),
        ("cols vec float32 256 l8 c8", ColsVecConfig(threads=256, col_lanes=8, unroll=4, cluster=8), np.float32,
         (16384, 4096), (0,)),
    ]
    print(f"{'kernel':48s} {'cluster':>7s} {'threads':>7s} {'smem KB':>8s} {'blocks/SM':>9s} {'ideal':>6s} {'driver':>6s}")
    for name, config, dtype, shape, axes in cases:
        strides = (shape[1], 1)
        (launch,) = plan_softmax(shape, strides, np.dtype(dtype), axes, False, dev, config).launches
        kernel = get_kernel(launch.spec, dynamic_smem=launch.smem)
        core_launch.use_whole_carveout(kernel)
        threads, smem = launch.block[0], launch.smem
        per_sm = resident_blocks_per_sm(kernel.num_regs, threads, smem + kernel.shared_size_bytes, dev)
        ideal = dev.sm_count * per_sm // config.cluster
        driver = max_active_clusters(kernel, config.cluster, threads, smem)
        print(f"{name:48s} {config.cluster:7d} {threads:7d} {smem / 1024:8.1f} {per_sm:9d} {ideal:6d} {driver:6d}")


if __name__ == "__main__":
    main()
