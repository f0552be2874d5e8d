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


def repeat_for_budget(probe_ms: float, budget_ms: float, *, min_repeat: int = 5, max_repeat: int = 50) -> int:
    """How many timed runs of a ``probe_ms`` call fit in about ``budget_ms``, clamped."""
    return int(min(max_repeat, max(min_repeat, budget_ms / max(probe_ms, 1e-3))))


def time_cuda_budget(fn, arg_sets, *, budget_ms: float = 250.0) -> float:
    """``time_cuda`` with the repeat count chosen from a short probe, so that a big shape
    is timed a few times and a small one many times within about ``budget_ms``."""
    arg_sets = list(arg_sets)
    probe_ms = time_cuda(fn, arg_sets, warmup=2, repeat=3)
    return time_cuda(fn, arg_sets, warmup=1, repeat=repeat_for_budget(probe_ms, budget_ms))


def copy_sets(nbytes: int) -> list:
    """Rotating ``(src, dst)`` byte buffers for timing a device copy of ``nbytes``."""
    import cupy

    nbytes = max(int(nbytes), 1 << 20)
    pairs = [(cupy.empty(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8))
             for _ in range(rotation_count(2 * nbytes))]
    for src, _ in pairs:
        src.fill(1)
    return pairs


def device_copy(src, dst) -> None:
    """The copy ceiling's operation: ``src`` to ``dst`` on the current stream."""
    dst.data.copy_from_device_async(src.data, src.nbytes)


def copy_ceiling_tbps(nbytes: int, *, repeat: int = 30) -> float:
    """Measured device-to-device copy bandwidth (bytes read + bytes written) for ``nbytes``
    (at least 1 MiB)."""
    pairs = copy_sets(nbytes)
    ms = time_cuda(device_copy, pairs, repeat=repeat)
    return 2 * pairs[0][0].nbytes / (ms * 1e-3) / 1e12


def gemm_ceiling_tflops(dtype, n: int = 8192, *, repeat: int = 10) -> float:
    """Measured ``cupy.matmul`` rate (cuBLAS) on random n x n x n operands of ``dtype``."""
    import cupy

    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    b = rng.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
    c = cupy.empty((n, n), dtype=dtype)
    ms = time_cuda(lambda: cupy.matmul(a, b, out=c), [()], repeat=repeat)
    return 2 * n**3 / (ms * 1e-3) / 1e12
