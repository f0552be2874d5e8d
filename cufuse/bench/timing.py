"""CUDA-event timing shared by ``python -m cufuse.bench`` and the pytest-benchmark suite.

Rules (DESIGN.md): warm up first, time with CUDA events, take the median of many runs,
and rotate among enough input sets that the working set is several times the L2, so
no run is served from the cache.
"""
from __future__ import annotations

import math
import statistics

DEFAULT_L2_BYTES = 60 * 1024 * 1024


def rotation_count(bytes_per_set: int, *, l2_bytes: int = DEFAULT_L2_BYTES, factor: int = 4, cap: int = 64) -> int:
    """How many input sets to rotate through so they span ``factor`` times the L2."""
    if bytes_per_set <= 0:
        return 1
    return max(2, min(cap, math.ceil(factor * l2_bytes / bytes_per_set)))


def time_cuda(fn, arg_sets, *, warmup: int = 3, repeat: int = 30) -> float:
    """Median milliseconds of ``fn(*args)``, cycling ``args`` through ``arg_sets``.

    Each call is bracketed by its own pair of CUDA events on the current stream.
    """
    import cupy

    arg_sets = list(arg_sets)
    for i in range(max(warmup, 1)):
        fn(*arg_sets[i % len(arg_sets)])
    stream = cupy.cuda.get_current_stream()
    starts = [cupy.cuda.Event() for _ in range(repeat)]
    stops = [cupy.cuda.Event() for _ in range(repeat)]
    for i in range(repeat):
        args = arg_sets[i % len(arg_sets)]
        starts[i].record(stream)
        fn(*args)
        stops[i].record(stream)
    stops[-1].synchronize()
    return statistics.median(cupy.cuda.get_elapsed_time(a, b) for a, b in zip(starts, stops))


def copy_ceiling_tbps(nbytes: int, *, repeat: int = 30) -> float:
    """Measured device-to-device copy bandwidth (bytes read + bytes written) for ``nbytes``."""
    import cupy

    nbytes = max(int(nbytes), 1 << 20)
    count = rotation_count(2 * nbytes)
    pairs = [(cupy.empty(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8)) for _ in range(count)]
    for src, _ in pairs:
        src.fill(1)
    ms = time_cuda(lambda src, dst: dst.data.copy_from_device_async(src.data, nbytes), pairs, repeat=repeat)
    return 2 * nbytes / (ms * 1e-3) / 1e12


def gemm_ceiling_tflops(dtype, n: int = 8192, *, repeat: int = 10) -> float:
    """Measured ``cupy.matmul`` rate (cuBLAS) on random n x n x n operands of ``dtype``."""
    import cupy

    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    b = rng.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    c = cupy.empty((n, n), dtype=dtype)
    ms = time_cuda(lambda: cupy.matmul(a, b, out=c), [()], repeat=repeat)
    return 2 * n**3 / (ms * 1e-3) / 1e12
