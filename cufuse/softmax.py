"""softmax / log_softmax with the semantics of ``scipy.special``.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64
oracle of ``cufuse.reference``; CuPy inputs run ``kernels/softmax.cu``.

GPU path. The array is viewed as (outer, length, inner): the reduced axes must form one
run of consecutive axes (size-1 axes ignored), and each of the three groups of axes must
collapse to a single stride; out is C-contiguous, so out[o, l, i] = (o*length + l)*inner + i.
Any strides work in place (negative, transposed, sliced), with 64-bit offsets:

- reduced axis contiguous (stride 1), or neither it nor the inner axis contiguous: the row
  kernels (``softmax_rows``, ``softmax_rows_cluster``, ``softmax_rows_split``), one row per
  (o, i), read once and written once while the row fits on chip (see
  ``cufuse._configs.softmax`` for the length ladder);
- reduced axis strided, inner axis contiguous (e.g. ``axis=0`` of a C-contiguous matrix):
  ``softmax_cols`` reduces down 32 columns per block with coalesced loads. It reads each
  column twice (online statistics, then the output pass); on sm_90 columns of 2048+ rows are
  split over a cluster of 8 blocks (``softmax_cols_cluster``), whose parts are small enough
  that the second read is served by L2 (a DRAM traffic of about one read and one write).

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
- the split kernel (rows beyond a cluster's 512 KB, or beyond a block's 64 KB without clusters)
  allocates a scratch of 2 x rows x blocks_per_row accumulators plus rows arrival counters
  (zeroed: one memset) besides out.
"""
from __future__ import annotations

import numpy as np

from . import reference
from ._configs import current_device_info
from ._configs import softmax as configs
from ._dtypes import accumulator_dtype, is_supported_float
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
    xp = array_namespace(fn, x=x)
    dtype = _result_dtype(fn, x)
    axes = normalize_axis(fn, axis, x.ndim)
    out = check_out(fn, out, shape=x.shape, dtype=dtype, xp=xp, inputs={"x": x})
    if xp is np:
        oracle = reference.log_softmax if log else reference.softmax
        return deliver(oracle(x, axes), out, dtype)
    return _softmax_gpu(fn, x, axes, out, dtype, config, log=log)


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
        sizes.append(int(np.prod([shape[d] for d in group], dtype=np.int64)))
        group_strides.append(strides[group[-1]] if group else 0)
    return tuple(sizes), tuple(group_strides)


def _softmax_gpu(fn, x, axes, out, dtype, config, *, log):
    import cupy

    with x.device:
        if x.dtype != dtype:  # integers and bools: SciPy computes them in float64
            x = x.astype(dtype)
        if out is None:
            out = cupy.empty(x.shape, dtype=dtype)
        if x.size == 0:
            return out
        element_strides = tuple(s // x.itemsize for s in x.strides)
        layout = _collapse(x.shape, element_strides, set(axes))
        if layout is not None:
            _launch(x, out, *layout, config, log)
            return out
        # Scattered reduced axes or a view that does not collapse: explicit copy (see above).
        trailing = tuple(range(x.ndim - len(axes), x.ndim))
        moved = cupy.ascontiguousarray(cupy.moveaxis(x, axes, trailing))
        result = cupy.empty(moved.shape, dtype=dtype)
        layout = _collapse(moved.shape, tuple(s // x.itemsize for s in moved.strides), set(trailing))
        _launch(moved, result, *layout, config, log)
        out[...] = cupy.moveaxis(result, trailing, axes)
        return out


def _launch(x, out, sizes, strides, config, log):
    """One softmax over the (outer, length, inner) view of x into C-contiguous out."""
    import cupy

    outer, length, inner = sizes
    so, sl, si = strides
    rows = outer * inner
    dev = current_device_info()
    if config is None:
        if sl != 1 and si == 1:
            config = configs.choose_cols(length, rows, x.dtype, dev)
        else:
            config = configs.choose_rows(length, rows, x.dtype, dev)
    spec = config.spec(x.dtype, log)
    smem = config.smem_bytes if isinstance(config, configs.SplitConfig) else 0
    kernel = _get_kernel(spec, smem)
    geometry = tuple(np.int64(v) for v in (length, inner, so, si, sl))
    if isinstance(config, configs.RowsConfig):
        grid = -(-rows // config.rows_per_block)
        kernel((grid,), (config.threads,), (x, out, np.int64(rows)) + geometry)
    elif isinstance(config, configs.ClusterConfig):
        chunk = -(-length // config.cluster)
        chunk = -(-chunk // configs.vector_size(x.dtype)) * configs.vector_size(x.dtype)
        clusters = -(-rows // config.rows_per_cluster)
        kernel((clusters * config.cluster,), (config.threads,), (x, out, np.int64(rows)) + geometry + (np.int64(chunk),))
    elif isinstance(config, configs.SplitConfig):
        _require_resident(kernel, config, dev)
        partials = cupy.empty(2 * rows * config.blocks_per_row, dtype=accumulator_dtype(x.dtype))
        arrivals = cupy.zeros(rows, dtype=np.uint32)
        split_args = (np.int64(config.chunk), np.int32(config.blocks_per_row), np.int32(config.smem_tiles), partials, arrivals)
        kernel((config.grid,), (config.threads,), (x, out, np.int64(rows)) + geometry + split_args, shared_mem=smem)
    else:
        grid = outer * -(-inner // 32) * config.cluster
        kernel((grid,), (32 * config.slices,), (x, out, np.int64(outer)) + geometry)


_REGISTERS_PER_SM = 65536
_SMEM_RESERVED_PER_BLOCK = 1024
_DEFAULT_SMEM_LIMIT = 48 * 1024


def _require_resident(kernel, config, dev):
    """The split kernel's blocks wait for each other: all of its grid must be resident at once.
    The config assumes blocks_per_sm per SM; check it against the compiled kernel."""
    registers = -(-kernel.num_regs // 8) * 8 * config.threads
    smem = config.smem_bytes + kernel.shared_size_bytes + _SMEM_RESERVED_PER_BLOCK
    if config.blocks_per_sm * registers > _REGISTERS_PER_SM or config.blocks_per_sm * smem > dev.smem_per_sm:
        raise RuntimeError(
            f"softmax: the split kernel {kernel.name} cannot keep {config.blocks_per_sm} blocks per SM "
            f"({kernel.num_regs} registers/thread, {smem} B shared memory/block)"
        )
    kernel.preferred_shared_memory_carveout = 100  # the shared-memory tiles of both blocks
    # The loader raises the dynamic limit only for requests above 48 KB, but the default limit
    # counts static shared memory too: exactly 48 KB of tiles (3 float32 tiles) plus the
    # kernel's own slots is already over it (CUDA_ERROR_INVALID_VALUE at launch).
    if config.smem_bytes + kernel.shared_size_bytes > _DEFAULT_SMEM_LIMIT and kernel.max_dynamic_shared_size_bytes < config.smem_bytes:
        kernel.max_dynamic_shared_size_bytes = config.smem_bytes


def _get_kernel(spec, dynamic_smem):
    from ._loader import get_kernel

    return get_kernel(spec.source, spec.name, *spec.template_args, dynamic_smem=dynamic_smem)
