"""A softmax whose reduction spans several arrays (``cufuse.dask``: a row across chunks, on one
GPU or several): each array gives its rows' partial logsumexp in one read
(``partial_lse``); the partials merge by the online rule (``merge_lse``: rescale by
``exp(m - m')``, here with every partial's sum folded into its lse); a second pass writes
``exp(x - lse)`` or ``x - lse`` (``apply_lse``). Two reads and one write of x, against one
and one when the row is whole in one array (``cufuse.traffic.softmax(..., row_parts=...)``).

NumPy inputs compute in float64; GPU inputs run ``kernels/softmax/partials.cu``, the
partials in the accumulator dtype (float32; float64 for float64).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.driver import bound_plan
from ..._core.dtypes import FLOAT_DTYPES, accumulator_dtype, ctype
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .problem import collapse

THREADS = 256
SOURCE = "softmax/partials.cu"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartialLse:
    """``softmax_rows_lse`` (a block a row: contiguous rows) or ``softmax_cols_lse`` (a
    thread a row: the reduced axis strided over a contiguous inner axis)."""

    columns: bool

    def spec(self, dtype) -> KernelSpec:
        return KernelSpec(SOURCE, "softmax_cols_lse" if self.columns else "softmax_rows_lse", (ctype(dtype), THREADS))

    def plan(self, sizes, strides, dtype) -> Plan:
        outer, length, inner = sizes
        so, sl, si = strides
        geometry = tuple(np.int64(v) for v in (length, inner, so, si, sl))
        rows = outer * inner
        if self.columns:
            launch = Launch(self.spec(dtype), (ceil_div(rows, THREADS),), (THREADS,), ("x", "lse", np.int64(rows)) + geometry)
        else:
            launch = Launch(self.spec(dtype), (rows,), (THREADS,), ("x", "lse") + geometry)
        return Plan((launch,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApplyLse:
    """``softmax_apply_lse``: the second pass over a C-contiguous array."""

    log: bool

    def spec(self, dtype) -> KernelSpec:
        return KernelSpec(SOURCE, "softmax_apply_lse", (ctype(dtype), self.log, THREADS))

    def plan(self, sizes, dtype, dev) -> Plan:
        """A block a row (inner == 1) or a line of ``inner`` elements, at most four resident
        waves of blocks, each looping."""
        outer, length, inner = sizes
        lines = outer if inner == 1 else outer * length
        grid = max(1, min(lines, 4 * dev.sm_count * 2048 // THREADS))
        args = ("x", "lse", "out", np.int64(outer), np.int64(length), np.int64(inner))
        return Plan((Launch(self.spec(dtype), (grid,), (THREADS,), args),))


def instantiations(dev) -> list:
    specs = []
    for dtype in FLOAT_DTYPES:
        specs += [PartialLse(columns=False).spec(dtype), PartialLse(columns=True).spec(dtype)]
        specs += [ApplyLse(log=log).spec(dtype) for log in (False, True)]
    return specs


def _keepdims(shape, axes):
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


def partial_lse(x, axes):
    """The partial logsumexp of every row of ``x`` (reduced over ``axes``), kept dims, float64
    for NumPy inputs and the accumulator dtype on the GPU."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            values = x.astype(np.float64)
            m = values.max(axis=axes, keepdims=True) if x.size else np.full(_keepdims(x.shape, axes), -np.inf)
            shifted = np.where(np.isfinite(m), m, 0.0)
            total = np.exp(values - shifted).sum(axis=axes, keepdims=True)
            return np.where(np.isfinite(m), shifted + np.log(total), m)
    import cupy

    with x.device:
        lse = cupy.empty(_keepdims(x.shape, axes), dtype=accumulator_dtype(x.dtype))
        if x.size == 0:
            lse.fill(-np.inf)
            return lse
        _partial_lse_gpu(cupy, x, axes, lse)
    return lse


def _partial_lse_gpu(cupy, x, axes, lse):
    layout = collapse(x.shape, tuple(s // x.itemsize for s in x.strides), set(axes))
    if layout is None:  # reduced axes not consecutive: a copy with them last
        trailing = tuple(range(x.ndim - len(axes), x.ndim))
        moved = cupy.ascontiguousarray(cupy.moveaxis(x, axes, trailing))
        lse[...] = partial_lse(moved, trailing).reshape(lse.shape)
        return
    sizes, strides = layout
    columns = strides[1] != 1 and strides[2] == 1
    bound_plan(("softmax-partial-lse", sizes, strides, x.dtype, columns, x.device.id), x.device.id,
               lambda dev: PartialLse(columns=columns).plan(sizes, strides, x.dtype))({"x": x, "lse": lse})


def merge_lse(partials, xp=np):
    """The logsumexp of the union of rows whose partial logsumexps are ``partials`` (arrays of
    one shape): ``M + log(sum(exp(p - M)))`` with M their max; NaN in any part is NaN, +inf
    is +inf, all -inf is -inf (SciPy's rules)."""
    stacked = xp.stack([xp.asarray(p) for p in partials])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        m = stacked.max(axis=0)
        finite = xp.isfinite(m)
        shift = xp.where(finite, m, 0.0)
        total = xp.exp(stacked - shift).sum(axis=0)
        return xp.where(finite, shift + xp.log(total), m)


def apply_lse(x, lse, axes, log: bool):
    """``x - lse`` (log) or ``exp(x - lse)`` (NaN where lse is not finite), lse broadcast over
    ``axes``; the result in x's dtype."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore", invalid="ignore"):
            shifted = x.astype(np.float64) - lse
            result = shifted if log else np.where(np.isfinite(lse), np.exp(shifted), np.nan)
        return result.astype(x.dtype)
    import cupy

    with x.device:
        return _apply_lse_gpu(cupy, cupy.ascontiguousarray(x), lse, axes, log)


def _apply_lse_gpu(cupy, x, lse, axes, log):
    out = cupy.empty(x.shape, dtype=x.dtype)
    if x.size == 0:
        return out
    layout = collapse(x.shape, tuple(s // x.itemsize for s in x.strides), set(axes))
    if layout is None:
        trailing = tuple(range(x.ndim - len(axes), x.ndim))
        moved = apply_lse(cupy.moveaxis(x, axes, trailing), cupy.moveaxis(lse, axes, trailing), trailing, log)
        return cupy.ascontiguousarray(cupy.moveaxis(moved, trailing, axes))
    sizes, _ = layout
    lse = cupy.ascontiguousarray(lse, dtype=accumulator_dtype(x.dtype))
    bound_plan(("softmax-apply-lse", sizes, x.dtype, log, x.device.id), x.device.id,
               lambda dev: ApplyLse(log=log).plan(sizes, x.dtype, dev))({"x": x, "lse": lse, "out": out})
    return out
