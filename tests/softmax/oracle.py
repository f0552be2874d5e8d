"""GPU test helpers of the softmax tests: inputs (random, non-finite rows, rows that exercise
the online merge), the comparison with the float64 oracle and SciPy, the capacity ladder and
a parallel compile of forced configs."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import scipy.special

import cufuse
from cufuse import reference
from cufuse._core.device import H200
from cufuse.ops.softmax import select
from cufuse.ops.softmax.problem import vector_size
from cufuse.ops.softmax.rows import RowsConfig

BF16 = np.dtype(ml_dtypes.bfloat16)
FN = {False: cufuse.softmax, True: cufuse.log_softmax}
ORACLE = {False: reference.softmax, True: reference.log_softmax}
SCIPY = {False: scipy.special.softmax, True: scipy.special.log_softmax}

TOL = {
    np.dtype(np.float16): dict(rtol=2e-3, atol=1e-6),
    BF16: dict(rtol=1.6e-2, atol=1e-5),
    np.dtype(np.float32): dict(rtol=3e-5, atol=1e-9),
    np.dtype(np.float64): dict(rtol=1e-12, atol=1e-300),
}
LOG_ATOL = {np.dtype(np.float16): 1e-2, BF16: 8e-2, np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}
MAX_ELEMENTS = 1 << 20  # the GPU tests' arrays, but for a few named exceptions


def ladder(dtype, dev=H200):
    """The capacity ladder of ``dtype`` on ``dev`` in 16-byte vectors: each value is the last
    length a sub-warp, warp or cluster rung holds, and the longest row the block rows take
    (between, they are sized to each row; the stashed rows and the split kernel follow)."""
    vs = vector_size(dtype)
    block_reach = max(v for v in range(257, 4097)
                      if isinstance(select.choose_rows(v * vs, 1000, dtype, dev), RowsConfig))
    fixed = [c.capacity_vectors for c in select.rows_ladder(dtype, dev)]
    return fixed + [block_reach] + [c.capacity_vectors for c in select.row_cluster_rungs(dtype, dev)]


def device():
    from cufuse._core.device import current_device_info

    return current_device_info()


def clusters(size):
    """Whether the device launches thread-block clusters of ``size``."""
    dev = device()
    return dev.max_cluster_size >= size and dev.cc >= 90


def random(cp, rng, shape, dtype, scale=3.0):
    return cp.asarray((rng.standard_normal(shape) * scale).astype(dtype))


def rows_for(length, most=37):
    return max(1, min(most, MAX_ELEMENTS // length))


def check(cp, x, axis, log, *, out=None, scipy_too=False, config=None):
    """Run cufuse on x (cupy) and compare with the float64 oracle, NaN pattern included."""
    result = FN[log](x, axis=axis, out=out, config=config)
    if out is not None:
        assert result is out
    host = cp.asnumpy(x)
    # integers: the float dtype np.exp gives them (SciPy's result dtype)
    dtype = np.exp(np.zeros(1, host.dtype)).dtype if host.dtype.kind in "iu" else host.dtype
    assert result.dtype == dtype and result.shape == x.shape
    axes = tuple(range(host.ndim)) if axis is None else axis
    expected = ORACLE[log](host.astype(np.float64), axes)
    tol = dict(TOL[dtype])
    if log:
        tol["atol"] = LOG_ATOL[dtype]
    actual = cp.asnumpy(result).astype(np.float64)
    np.testing.assert_allclose(actual, expected, equal_nan=True, **tol)
    if scipy_too:
        np.testing.assert_allclose(actual, SCIPY[log](host.astype(np.float64), axis=axis), equal_nan=True, **tol)
    return result


def lengths_past_each_threshold(dtype):
    vs = vector_size(dtype)
    return [1] + [c * vs + 1 for c in ladder(dtype)] + [ladder(dtype)[-1] * vs]


def one_length_per_kernel(dtype):
    """Sub-warp (1 and 16 lanes), warp, block, stashed / cluster and split rows, ragged lengths."""
    vs = vector_size(dtype)
    return (3, 31 * vs - 1, 100 * vs + 3, 1000 * vs + 1, 4096 * vs + 3, 16384 * vs + 7)


def rows_with_non_finite(rng, length, dtype):
    """7 rows: NaN, +inf, all -inf, every other -inf, +inf with -inf, two +inf, finite."""
    host = (rng.standard_normal((7, length)) * 3).astype(dtype)
    host[0, length // 2] = np.nan
    host[1, length - 1] = np.inf
    host[2, :] = -np.inf
    host[3, ::2] = -np.inf
    host[4, 0] = np.inf
    host[4, 1:] = -np.inf
    host[5, 0] = np.inf
    host[5, -1] = np.inf
    return host


def rows_for_online_merge(rng, length, dtype):
    """Rows that exercise the per-thread online merge over tiles: -inf over the first 3/4 (a
    thread's early tiles hold only -inf, later ones not), a single finite value in the middle,
    NaN at element 9000 (a shared-memory tile), +inf in the last element, a maximum that grows
    along the row (every tile rescales the sum) and one that falls, magnitudes near float16's
    limit."""
    host = (rng.standard_normal((7, length)) * 3).astype(np.float64)
    host[0, : 3 * length // 4] = -np.inf
    host[1, :] = -np.inf
    host[1, length // 2 + 1] = 1.5
    host[2, 9000] = np.nan
    host[3, -1] = np.inf
    host[4] += np.linspace(-40.0, 40.0, length)
    host[5] += np.linspace(40.0, -40.0, length)
    host[6] += 60000.0
    return host.astype(dtype)


_precompiled = set()


def precompile_once(name, forced):
    """The (config, dtype) pairs of ``forced()`` compiled in parallel for this device, softmax
    and log_softmax, once a session for ``name`` (NVRTC inside the tests is serial)."""
    if name in _precompiled:
        return
    _precompiled.add(name)
    from cufuse._core.loader import arch_for
    from cufuse._core.loader import precompile as compile_all

    dev = device()
    specs = [c.spec(d, log) for c, d in forced() for log in (False, True)]
    compile_all([s for s in specs if s.min_cc <= dev.cc], arch_for(dev.cc), jobs=16)


def graph_nodes(cp, fn):
    """(the graph's dot text, its number of nodes) of fn() captured into a CUDA graph."""
    import re

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # the memory pool caches blocks per stream: fill this stream's before capturing
        stream.synchronize()
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
    dot = graph.debug_dot_str(0xFFFF)
    nodes = re.findall(r'^\s*"?graph_\d+_node_\d+"?\s*\[', dot, flags=re.M)
    return dot, len(nodes)
