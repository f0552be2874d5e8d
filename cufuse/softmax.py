"""softmax / log_softmax with the semantics of ``scipy.special``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle of ``cufuse.reference``; CuPy inputs run ``kernels/softmax.cu``.

GPU path. The array is viewed as (outer, length, inner): the reduced axes must form one
run of consecutive axes (size-1 axes ignored), and each of the three groups of axes must
collapse to a single stride; out is C-contiguous, so out[o, l, i] = (o*length + l)*inner + i.
Any strides work in place (negative, transposed, sliced), with 64-bit offsets:

- reduced axis contiguous (stride 1), or neither it nor the inner axis contiguous: the row
  kernels (``softmax_rows``, ``softmax_rows_stashed[_cluster]``, ``softmax_rows_cluster``,
  ``softmax_rows_split``), one row per
  (o, i), read once and written once while the row fits on chip (see ``cufuse._configs.softmax``
  for the length ladder);
- reduced axis strided, inner axis contiguous (e.g. ``axis=0`` of a C-contiguous matrix):
  ``softmax_cols`` reduces down 32 columns per block with coalesced loads (float32 where the
  layout allows: ``softmax_cols_vec``, 16-byte vectors of adjacent columns). It reads each
  column twice (online statistics, then the output pass); on sm_90 columns of 2048+ rows are
  split over a cluster of blocks (``softmax_cols_cluster`` 4, ``softmax_cols_vec_cluster`` 8),
  whose parts are small enough that the second read is served by L2 (a DRAM traffic of about
  one read and one write). ``softmax_cols_strip[_cluster]`` (``ColsStripConfig``, the default
  where it holds the column: ``_COLS_STRIP_DEFAULT``) reads each element once: a cluster of up to 16
  blocks holds a strip of adjacent columns on chip (registers and shared memory) and writes it
  after the statistics met in distributed shared memory. ``softmax_cols_split``
  (``ColsSplitConfig``, the default where it applies: ``_COLS_SPLIT_DEFAULT``) holds the same
  strips split over the co-resident blocks of a persistent grid, the column statistics
  exchanged through global memory, no clusters; columns shorter than a tile or longer than the
  grid holds take the strips, then the two-read kernels.

Documented exceptions:

- explicit copies: when the reduced axes are not consecutive (``axis=(0, 2)`` of a 3-D
  array) or a group of axes of a view does not collapse to one stride, x is first copied
  into a C-contiguous array with the reduced axes last (``cupy.ascontiguousarray`` of a
  ``moveaxis``), the kernel writes a temporary and the result is copied into ``out``.
- integer and bool inputs are cast to a float64 copy first (SciPy computes them in float64).
- rows longer than the split kernel's on-chip capacity (264 blocks x 128 KB of registers and
  shared memory on the H200: about 17 M float16 / 8.4 M float32 elements) are streamed with
  the online rule: the tiles that fit in neither are read a second time, most recent first
  so that part of that comes from L2 (axis=None of 2**26 elements rereads about 3/4 of x).
- the split kernel (rows past the one-block stashed rungs and the float32 stashed clusters,
  see ``cufuse._configs.softmax``; float64 past its 256 KB clusters) uses a scratch of
  2 x rows x blocks_per_row accumulators plus rows arrival counters, one per (device, stream),
  allocated (counters zeroed) only when a larger one is needed: the kernel leaves its
  counters at zero, so later calls on that stream reuse it without a memset. The column
  split (``softmax_cols_split``, ``ColsSplitConfig``) shares that scratch: 2 (parity) x grid
  x Cols (max, sum) pairs
  (H200, 16384 x 4096 float16: 2 x 264 x 64 x 2 floats = 264 KB) and strips_per_wave counters.

Host path: everything derived from (shape, strides, dtype, axes, device, config) -- layout,
config, kernel, grid, shared memory, the scalar arguments -- is built once into a ``_Plan``;
a later call is validation, one dict lookup, ``out`` if none was given, and the launch.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import reference
from ._configs import device_info
from ._configs import softmax as configs
from ._dtypes import accumulator_dtype, is_supported_float
from ._loader import get_kernel
from ._numpy_path import deliver
from ._validate import array_namespace, check_out, describe, normalize_axis


def softmax(x, axis=None, *, out=None, config=None):
    """``exp(x - max) / sum(exp(x - max))`` over ``axis`` (None: the whole array).

    Exactly ``scipy.special.softmax``: axis None, int or tuple; integer and bool inputs
    compute in float64; non-finite rows follow SciPy's NaN pattern. ``config`` overrides
    the kernel configuration chosen by ``cufuse._configs.softmax`` (GPU only).
    """
    return _softmax("softmax", x, axis, out, config, log=False)


def log_softmax(x, axis=None, *, out=None, config=None):
    """``x - max - log(sum(exp(x - max)))`` over ``axis``, exactly ``scipy.special.log_softmax``."""
    return _softmax("log_softmax", x, axis, out, config, log=True)


def _result_dtype(fn: str, x) -> np.dtype:
    if is_supported_float(x.dtype):
        return x.dtype
    if x.dtype.kind in "biu":  # SciPy computes integers and bools in float64
        return np.dtype(np.float64)
    raise TypeError(
        f"{fn}: argument 'x' expected a float16, bfloat16, float32, float64, integer or bool array, "
        f"got {describe(x)}"
    )


def _softmax(fn, x, axis, out, config, *, log):
    # A signature seen before (it passed validation and has a plan): only what differs
    # between calls with one signature is checked -- the current device, out's overlap.
    signature = _signature(x, axis, out, config, log)
    plan = _signatures.get(signature) if signature is not None else None
    if plan is not None and _launchable(x, out):
        if out is None:
            out = _cupy.empty(x.shape, dtype=x.dtype)
        plan.launch(x, out)
        return out
    xp = array_namespace(fn, x=x)
    dtype = _result_dtype(fn, x)
    axes = normalize_axis(fn, axis, x.ndim)
    out = check_out(fn, out, shape=x.shape, dtype=dtype, xp=xp, inputs={"x": x})
    if xp is np:
        oracle = reference.log_softmax if log else reference.softmax
        return deliver(oracle(x, axes), out, dtype)
    return _softmax_gpu(fn, x, axis, axes, out, dtype, config, log=log)


def _collapse(shape, strides, axes):
    """(outer, length, inner) sizes and (so, sl, si) element strides of x reduced over
    ``axes``, or None when the axes are not consecutive or a group of axes does not
    collapse to one stride. Size-1 axes are dropped; an absent group has size 1, stride 0.
    """
    kept = [d for d in range(len(shape)) if shape[d] != 1]
    reduced = [d for d in kept if d in axes]
    if reduced and kept[kept.index(reduced[0]) : kept.index(reduced[-1]) + 1] != reduced:
        return None
    first = kept.index(reduced[0]) if reduced else len(kept)
    groups = (kept[:first], reduced, kept[first + len(reduced) :])
    sizes, group_strides = [], []
    for group in groups:
        for a, b in zip(group, group[1:]):
            if strides[a] != strides[b] * shape[b]:
                return None
        sizes.append(math.prod(shape[d] for d in group))
        group_strides.append(strides[group[-1]] if group else 0)
    return tuple(sizes), tuple(group_strides)


def _softmax_gpu(fn, x, axis, axes, out, dtype, config, *, log):
    global _cupy
    import cupy

    _cupy = cupy
    device_id = x.data.device_id
    if cupy.cuda.runtime.getDevice() != device_id:
        with cupy.cuda.Device(device_id):
            return _softmax_gpu(fn, x, axis, axes, out, dtype, config, log=log)
    original, out_given = x, out
    if x.dtype != dtype:  # integers and bools: SciPy computes them in float64
        x = x.astype(dtype)
    if out is None:
        out = cupy.empty(x.shape, dtype=dtype)
    if x.size == 0:
        return out
    plan = _plan(x.shape, x.strides, dtype, axes, device_id, config, log)
    if plan is not None:
        plan.launch(x, out)
        if x is original:  # no float64 copy made: later calls may take the fast path
            _remember(_signature(x, axis, out_given, config, log), plan)
        return out
    # Scattered reduced axes or a view that does not collapse: explicit copy (see above).
    trailing = tuple(range(x.ndim - len(axes), x.ndim))
    moved = cupy.ascontiguousarray(cupy.moveaxis(x, axes, trailing))
    result = cupy.empty(moved.shape, dtype=dtype)
    _plan(moved.shape, moved.strides, dtype, trailing, device_id, config, log).launch(moved, result)
    out[...] = cupy.moveaxis(result, trailing, axes)
    return out


_cupy = None  # the cupy module, once a GPU call has imported it
_signatures: dict = {}  # call signature -> _Plan, for calls that launch one plan on x itself


def _signature(x, axis, out, config, log):
    """What a call's validation and plan depend on, or None where no GPU call was made yet,
    x is not a cupy array or axis is not None, an int or a tuple of ints (anything else,
    e.g. 1.0 == 1, is left to the full validation)."""
    if _cupy is None or type(x) is not _cupy.ndarray:
        return None
    if not (axis is None or type(axis) is int or (type(axis) is tuple and all(type(a) is int for a in axis))):
        return None
    if out is None:
        out_key = None
    elif type(out) is _cupy.ndarray:
        out_key = (out.shape, out.strides, out.dtype, out.data.device_id)
    else:
        return None
    return x.shape, x.strides, x.dtype, x.data.device_id, axis, out_key, config, log


def _remember(signature, plan):
    if signature is not None:
        if len(_signatures) >= _MAX_PLANS:
            _signatures.clear()
        _signatures[signature] = plan


def _launchable(x, out):
    return _cupy.cuda.runtime.getDevice() == x.data.device_id and (out is None or not _cupy.may_share_memory(out, x))


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One launch, with everything that depends only on the call's signature."""

    kernel: object  # cupy.RawKernel
    grid: tuple
    block: tuple
    scalars: tuple  # the numpy scalar arguments after (x, out)
    smem: int  # dynamic shared memory bytes
    scratch: tuple | None  # split kernel: (accumulator dtype, accumulators, counters)

    def launch(self, x, out):
        args = (x, out) + self.scalars
        if self.scratch is not None:
            args += _split_scratch(*self.scratch)
        self.kernel(self.grid, self.block, args, shared_mem=self.smem)


_plans: dict = {}
_MAX_PLANS = 4096
_COPY = "copy"  # the signature's view does not collapse: the explicit-copy path


def _plan(shape, strides, dtype, axes, device_id, config, log):
    """The _Plan of a signature (None: the copy path), built on its first call."""
    key = (shape, strides, dtype, axes, device_id, config, log)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        layout = _collapse(shape, tuple(st // dtype.itemsize for st in strides), set(axes))
        plan = _COPY if layout is None else _make_plan(*layout, dtype, device_id, config, log)
        _plans[key] = plan
    return None if plan is _COPY else plan


def _make_plan(sizes, strides, dtype, device_id, config, log) -> _Plan:
    """The launch of one softmax over the (outer, length, inner) view of x into C-contiguous out."""
    outer, length, inner = sizes
    so, sl, si = strides
    rows = outer * inner
    dev = device_info(device_id)
    if config is None:
        if sl != 1 and si == 1:
            vectorizable = configs.cols_vectorizable(outer, inner, so, sl, dtype)
            config = configs.choose_cols(length, rows, dtype, dev, vectorizable)
        else:
            config = configs.choose_rows(length, rows, dtype, dev)
    if isinstance(config, (configs.RowsConfig, configs.ClusterConfig, configs.StashedRowsConfig)):
        vectors = _ceil_div(length, configs.vector_size(dtype))
        if vectors > config.capacity_vectors:
            raise ValueError(
                f"softmax: argument 'config' {config} holds rows of up to {config.capacity_vectors} 16-byte vectors, "
                f"got a row of {length} elements ({vectors} vectors)"
            )
    spec = config.spec(dtype, log)
    stashing = (configs.SplitConfig, configs.ColsStripConfig, configs.ColsSplitConfig, configs.StashedRowsConfig)
    smem = config.smem_bytes if isinstance(config, stashing) else 0
    kernel = get_kernel(spec.source, spec.name, *spec.template_args, dynamic_smem=smem)
    if getattr(config, "cluster", 1) > dev.max_cluster_size:
        _allow_non_portable_cluster(kernel)
    geometry = tuple(np.int64(v) for v in (length, inner, so, si, sl))
    scratch = None
    if isinstance(config, configs.RowsConfig):
        grid = _ceil_div(rows, config.rows_per_block)
        scalars = (np.int64(rows),) + geometry
    elif isinstance(config, configs.StashedRowsConfig):
        _use_whole_carveout(kernel)  # blocks_per_sm blocks an SM, each with smem_bytes
        grid = rows * config.cluster
        scalars = geometry + (np.int64(config.chunk(length, dtype)),)
    elif isinstance(config, configs.ClusterConfig):
        grid = _ceil_div(rows, config.rows_per_cluster) * config.cluster
        scalars = (np.int64(rows),) + geometry + (np.int64(config.chunk(length, dtype)),)
    elif isinstance(config, configs.SplitConfig):
        _require_resident(kernel, config, dev)
        grid = config.grid
        scalars = (np.int64(rows),) + geometry + (np.int64(config.chunk), np.int32(config.blocks_per_row), np.int32(config.smem_tiles))
        scratch = (np.dtype(accumulator_dtype(dtype)), 2 * rows * config.blocks_per_row, rows)
    elif isinstance(config, configs.ColsVecConfig):
        _require_column_vectors(config, sizes, strides, dtype)
        grid = outer * _ceil_div(inner, config.columns(dtype)) * config.cluster
        scalars = (np.int64(outer),) + geometry
    elif isinstance(config, configs.ColsStripConfig):
        _require_column_vectors(config, sizes, strides, dtype)
        part = _ceil_div(length, config.cluster)
        if _ceil_div(part, config.tile_rows) > config.tiles_per_block:
            raise ValueError(
                f"softmax: argument 'config' {config} holds {config.tiles_per_block * config.tile_rows} rows a block, "
                f"got columns of {length} over a cluster of {config.cluster} ({part} rows a block)"
            )
        _use_whole_carveout(kernel)  # blocks_per_sm blocks an SM, each with smem_bytes
        grid = outer * _ceil_div(inner, config.columns(dtype)) * config.cluster
        scalars = (np.int64(outer),) + geometry + (np.int64(part),)
    elif isinstance(config, configs.ColsSplitConfig):
        _require_column_vectors(config, sizes, strides, dtype)
        _require_column_split(config, length, dev)
        _require_resident(kernel, config, dev)
        grid = config.grid
        strips = outer * _ceil_div(inner, config.columns(dtype))
        scalars = (np.int64(outer),) + geometry + (np.int64(config.part), np.int32(config.blocks_per_strip), np.int64(strips))
        scratch = (np.dtype(accumulator_dtype(dtype)),) + config.scratch(dtype)
    else:
        grid = outer * _ceil_div(inner, 32) * config.cluster
        scalars = (np.int64(outer),) + geometry
    threads = 32 * config.slices if isinstance(config, configs.ColsConfig) else config.threads
    return _Plan(kernel, (grid,), (threads,), scalars, smem, scratch)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _require_column_vectors(config, sizes, strides, dtype):
    """The 16-byte column kernels need the reduced axis strided over a contiguous inner axis
    and every vector of columns aligned (``cols_vectorizable``)."""
    outer, _, inner = sizes
    so, sl, si = strides
    if not (sl != 1 and si == 1 and configs.cols_vectorizable(outer, inner, so, sl, dtype)):
        raise ValueError(
            f"softmax: argument 'config' {config} needs the reduced axis strided over a contiguous inner "
            f"axis with every 16-byte vector of columns aligned; got (outer, length, inner) = {sizes}, "
            f"element strides (so, sl, si) = {strides}"
        )


def _require_column_split(config, length, dev):
    """A forced ColsSplitConfig must hold the column (blocks_per_strip parts of ``part`` rows,
    a part within its tiles) with a grid the device keeps resident at blocks_per_sm an SM."""
    capacity = min(config.part, config.tiles_per_block * config.tile_rows)
    if config.blocks_per_strip * capacity < length:
        raise ValueError(
            f"softmax: argument 'config' {config} holds {config.blocks_per_strip} x {capacity} rows a strip, "
            f"got columns of {length}"
        )
    if config.grid > config.blocks_per_sm * dev.sm_count:
        raise ValueError(
            f"softmax: argument 'config' {config} needs {config.grid} co-resident blocks, "
            f"got a device of {dev.sm_count} SMs at {config.blocks_per_sm} blocks an SM"
        )


# Split-kernel scratch, one per (device, stream, accumulator dtype): the kernel leaves its
# arrival counters at zero, so the scratch is allocated (counters zeroed) only when a larger
# one is needed and reused by every later call on that stream; calls on one stream are
# ordered, so they never share it concurrently.
_scratches: dict = {}


def _split_scratch(accum_dtype, accumulators: int, counters: int):
    import cupy

    key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr, accum_dtype)
    held = _scratches.get(key)
    if held is None or held[0].size < accumulators or held[1].size < counters:
        accumulators = max(accumulators, held[0].size if held else 0)
        counters = max(counters, held[1].size if held else 0)
        held = (cupy.empty(accumulators, dtype=accum_dtype), cupy.zeros(counters, dtype=np.uint32))
        _scratches[key] = held
    return held


_REGISTERS_PER_SM = 65536
_THREADS_PER_SM = 2048
_BLOCKS_PER_SM = 32
_SMEM_RESERVED_PER_BLOCK = 1024


def _use_whole_carveout(kernel) -> None:
    """Let the kernel's blocks share the SM's whole shared-memory carveout: the residency that
    ``_resident_blocks_per_sm`` counts on (the driver may otherwise pick a smaller carveout)."""
    kernel.preferred_shared_memory_carveout = 100


def _resident_blocks_per_sm(kernel, threads, smem, dev) -> int:
    """Blocks of the compiled kernel an SM holds at once, by registers (allocated in units of 8
    a thread), shared memory (with the whole carveout: see ``_use_whole_carveout``) and threads."""
    registers = -(-kernel.num_regs // 8) * 8 * threads
    block_smem = smem + kernel.shared_size_bytes + _SMEM_RESERVED_PER_BLOCK
    return min(_REGISTERS_PER_SM // registers, dev.smem_per_sm // block_smem, _THREADS_PER_SM // threads, _BLOCKS_PER_SM)


def _require_resident(kernel, config, dev):
    """The split kernel's blocks wait for each other: all of its grid must be resident at once.
    The config assumes blocks_per_sm per SM; check it against the compiled kernel (once per plan)."""
    _use_whole_carveout(kernel)
    if _resident_blocks_per_sm(kernel, config.threads, config.smem_bytes, dev) < config.blocks_per_sm:
        raise RuntimeError(
            f"softmax: the split kernel {kernel.name} cannot keep {config.blocks_per_sm} blocks per SM "
            f"({kernel.num_regs} registers/thread, {config.smem_bytes + kernel.shared_size_bytes} B shared memory/block)"
        )


_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute


def _allow_non_portable_cluster(kernel):
    """Clusters above the portable 8 (16 on the H200) launch only with this kernel attribute;
    CuPy's RawKernel has no property for it, the driver API call takes the function handle."""
    from cupy_backends.cuda.api import driver

    driver.funcSetAttribute(kernel.kernel.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
