"""How many thread-block clusters of cufuse's cluster kernels the GPU holds at once, against
what the SMs' register, shared-memory and thread budgets would allow (bench/NOTES.md,
softmax v9: every cluster variant measured about half the speed of its one-block twin).

Run: ``python3 bench/probe_cluster_occupancy.py`` (seconds, sm_90). For each kernel: blocks an
SM by its resources (``_resident_blocks_per_sm``), the clusters that would give over 132 SMs,
and the driver's ``cuOccupancyMaxActiveClusters`` (the GPC layout included).
"""
from __future__ import annotations

import ctypes
import importlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from cufuse._configs import current_device_info  # noqa: E402
from cufuse._configs import softmax as S  # noqa: E402
from cufuse._loader import get_kernel  # noqa: E402

softmax_module = importlib.import_module("cufuse.softmax")  # the module (cufuse.softmax is also the function)


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
    cases = []
    for dtype in (np.float16, np.float32):  # issue 3's axis=0: the column strips of 16384 x 4096
        cases.append((f"cols strip 16384x4096 {np.dtype(dtype).name}", S.choose_cols(16384, 4096, dtype, dev, True), dtype))
    cases.append(("rows cluster float64 512 x 4 c8", S.ClusterConfig(512, 4, 8), np.float64))
    cases.append(("rows cluster float32 256 x 8 c4 (v7, lost)", S.ClusterConfig(256, 8, 4), np.float32))
    print(f"{'kernel':48s} {'cluster':>7s} {'threads':>7s} {'smem KB':>8s} {'blocks/SM':>9s} {'ideal':>6s} {'driver':>6s}")
    for name, config, dtype in cases:
        spec = config.spec(dtype, False)
        smem = getattr(config, "smem_bytes", 0)
        kernel = get_kernel(spec.source, spec.name, *spec.template_args, dynamic_smem=smem)
        if config.cluster > dev.max_cluster_size:
            softmax_module._allow_non_portable_cluster(kernel)
        softmax_module._use_whole_carveout(kernel)
        threads = 32 * config.slices if isinstance(config, S.ColsConfig) else config.threads
        per_sm = softmax_module._resident_blocks_per_sm(kernel, threads, smem, dev)
        ideal = dev.sm_count * per_sm // config.cluster
        driver = max_active_clusters(kernel, config.cluster, threads, smem)
        print(f"{name:48s} {config.cluster:7d} {threads:7d} {smem / 1024:8.1f} {per_sm:9d} {ideal:6d} {driver:6d}")


if __name__ == "__main__":
    main()
