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


BATCH_MS = 1.0  # shortest timed batch: back-to-back calls up to this long share one pair of events
BUDGET_MS = 200.0  # timing budget of one implementation on one case (after the probe)
WARMUP_MS = 100.0  # untimed back-to-back calls first: long enough for the GPU's power state to settle


def time_cuda(fn, arg_sets, *, warmup: int = 3, repeat: int = 30, calls: int = 1) -> float:
    """Median milliseconds per call of ``fn(*args)``, cycling ``args`` through ``arg_sets``.

    Each of the ``repeat`` batches of ``calls`` back-to-back calls is bracketed by its own
    pair of CUDA events on the current stream; ``warmup`` calls run first, untimed.
    """
    import cupy

    arg_sets = list(arg_sets)
    call_index = 0

    def run(count):
        nonlocal call_index
        for _ in range(count):
            fn(*arg_sets[call_index % len(arg_sets)])
            call_index += 1

    run(max(warmup, 1))
    stream = cupy.cuda.get_current_stream()
    starts = [cupy.cuda.Event() for _ in range(repeat)]
    stops = [cupy.cuda.Event() for _ in range(repeat)]
    for start, stop in zip(starts, stops):
        start.record(stream)
        run(calls)
        stop.record(stream)
    stops[-1].synchronize()
    return statistics.median(cupy.cuda.get_elapsed_time(a, b) for a, b in zip(starts, stops)) / calls


def calls_per_batch(probe_ms: float, *, batch_ms: float = BATCH_MS) -> int:
    """How many back-to-back calls of a ``probe_ms`` call make a batch of about ``batch_ms``.

    Timing batches instead of single calls measures what a pipeline of calls sustains: a
    call whose Python overhead exceeds its GPU time (an unfused composition of small
    kernels) is charged its launch rate, not the launch latency plus its last kernel, and
    a sub-millisecond kernel is not charged a synchronisation per call."""
    return max(1, math.ceil(batch_ms / max(probe_ms, 1e-3)))


def repeat_for_budget(probe_ms: float, budget_ms: float, *, min_repeat: int = 5, max_repeat: int = 50) -> int:
    """How many timed runs of a ``probe_ms`` call fit in about ``budget_ms``, clamped."""
    return int(min(max_repeat, max(min_repeat, budget_ms / max(probe_ms, 1e-3))))


def warmup_batches(probe_ms: float, calls: int) -> int:
    """Untimed batches of ``calls`` that last about ``WARMUP_MS`` (at least one).

    A GPU under a sustained tensor-core load lowers its clock to stay under its power
    limit (on the H200 from ~1.98 to ~1.82 GHz within ~100 ms of GEMMs); without a warm-up
    of that length the first-timed implementation of a case would run faster than the rest
    and the two harnesses would read different points of that transition."""
    return max(1, math.ceil(WARMUP_MS / max(probe_ms * calls, 1e-3)))


def time_cuda_budget(fn, arg_sets, *, budget_ms: float = BUDGET_MS) -> float:
    """``time_cuda`` over batches of about ``BATCH_MS``, as many as fit in about ``budget_ms``
    (the batch size and count from a short probe), after about ``WARMUP_MS`` of untimed calls."""
    arg_sets = list(arg_sets)
    probe_ms = time_cuda(fn, arg_sets, warmup=2, repeat=3)
    calls = calls_per_batch(probe_ms)
    return time_cuda(fn, arg_sets, warmup=calls * warmup_batches(probe_ms, calls),
                     repeat=repeat_for_budget(probe_ms * calls, budget_ms), calls=calls)


HOST_BOUND_FRACTION = 0.75  # enqueue time per call at least this share of the call's time: host-bound


def host_ms_per_call(fn, arg_sets, calls: int) -> float:
    """Python time to enqueue one call of ``fn`` (no synchronisation inside), over ``calls``
    back-to-back calls. Where it reaches the measured time per call (``is_host_bound``)
    the GPU waits on the host: the figure is the call's launch rate, and it varies with
    the host's speed from run to run far more than a kernel's time does."""
    import time

    import cupy

    arg_sets = list(arg_sets)
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for i in range(calls):
        fn(*arg_sets[i % len(arg_sets)])
    elapsed = time.perf_counter() - start
    cupy.cuda.Device().synchronize()
    return elapsed * 1e3 / calls


def is_host_bound(host_ms: float | None, ms: float | None) -> bool | None:
    if host_ms is None or not ms:
        return None
    return host_ms >= HOST_BOUND_FRACTION * ms


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
