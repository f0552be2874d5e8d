"""fused_linear_relu: ``max(x @ weight + bias, 0)`` in one GEMM with the bias and the ReLU in
its epilogue.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64 oracle
of ``cufuse.reference``; CuPy inputs run the kernels of ``kernels/linear/`` (which one runs
which shape and layout: ``select`` and docs/linear.md).

Host path. A call's validation and launch depend only on its arrays' shapes, strides,
dtypes, devices and pointer alignments (and ``config``), never on the pointers' values: the
first call of a signature validates in full and keeps its bound plan in ``PLANS``; a later
call of the same signature is one dict lookup, then the launch. Only the overlap of ``out``
with an input depends on the pointers: the entry keeps each input's byte extent, and a call
whose ``out`` range meets one takes the full path (the exact check).
"""
from __future__ import annotations

import numbers

import numpy as np

from ... import reference
from ..._core.device import device_info
from ..._core.numpy_path import deliver
from ..._core.plans import PLANS, BoundPlan
from ..._core.validate import as_arrays, check_config, check_out, require_float, require_ndim, require_same_dtype
from .operands import FN
from .plan import plan_linear
from .select import VARIANTS


def fused_linear_relu(x, weight, bias=None, *, out=None, config=None):
    """``np.maximum(x @ weight + bias, 0)`` for x ``(..., K)`` (or ``(K,)``), weight
    ``(K, N)`` with any strides (a transposed ``(N, K)`` array works without a copy)
    and bias None or what broadcasts the same to every row: ``(N,)``, ``(1, N)``, or one
    value (``()``, ``(1,)``, a Python number, taken in x's dtype); a bias that differs from
    row to row is refused (ValueError): it is not a bias of the GEMM's epilogue. Arrays and
    array-likes run the NumPy path; GPU arrays (CuPy, PyTorch, JAX, ...) the kernels. All
    arrays share one float dtype; accumulation is float32 (float64 for float64). ``config``
    overrides the chosen kernel configuration (GPU only: one of the variant classes of
    ``cufuse.ops.linear``, e.g. ``MmaConfig``; checked and ignored on NumPy inputs).

    On CuPy arrays nothing is copied. x's leading axes must collapse into one row stride
    (a C-ordered stack of rows, its last axis sliced or strided included); any other x
    layout raises ValueError rather than being copied silently. Operands whose rows are
    16-byte aligned (unit stride along K for x, K a multiple of 16 bytes, the weight
    contiguous along K or along N) run on tensor cores: float16 / bfloat16 on mma.sync, or on
    compute capability 9.0 on the warpgroup-MMA kernels (fed by TMA where tensor maps
    describe the operands; M <= 64 with the operands swapped, launched with programmatic
    dependent launch); float32 as 3xTF32 (float32-level accuracy; an infinite input gives NaN
    where NumPy may give +-inf); float64 on DMMA. float32 with M <= 4 and float64 with M = 1
    stream the weight through a kernel of true float32 / float64 FMAs instead. Everything
    else runs on a SIMT kernel with arbitrary strides (true float32 / float64 arithmetic).
    Where fewer output tiles than the GPU has block slots would leave SMs idle, K is split
    over blocks that meet in a float32 workspace (M x N cells through atomics, or one tile of
    accumulators a block through slots) plus one int per output tile, allocated once per
    device, stream and reduction kind and reused.
    """
    if _on_gpu(x, weight, bias, out):
        entry = PLANS.get(_signature(x, weight, bias, out, config))
        if entry is not None and (out is None or not entry.may_overlap(x, weight, bias, out)):
            return entry.run(x, weight, bias, out)
    bias_number = bias if isinstance(bias, numbers.Real) and not isinstance(bias, bool) else None
    xp, arrays = as_arrays(FN, optional=("bias",), x=x, weight=weight, bias=None if bias_number is not None else bias)
    x, weight, bias = arrays["x"], arrays["weight"], arrays["bias"]
    require_float(FN, "x", x)
    if bias_number is not None:  # a Python number takes x's dtype, as NumPy's weak scalars do
        bias = xp.asarray(_plain_number(bias_number), dtype=x.dtype)
    require_same_dtype(FN, "x", x, weight=weight, bias=bias)
    require_ndim(FN, "x", x, at_least=1)
    require_ndim(FN, "weight", weight, exactly=2)
    check_config(FN, config, VARIANTS)
    k_dim, n_dim = weight.shape
    if x.shape[-1] != k_dim:
        raise ValueError(
            f"{FN}: argument 'weight' expected shape ({x.shape[-1]}, N) to match x's last axis "
            f"of {x.shape[-1]}, got {weight.shape}"
        )
    if bias is not None:
        bias = _bias_vector(xp, bias, n_dim)
    out_shape = x.shape[:-1] + (n_dim,)
    out = check_out(FN, out, shape=out_shape, dtype=x.dtype, xp=xp, inputs={"x": x, "weight": weight, "bias": bias})
    if xp is np:
        return deliver(reference.fused_linear_relu(x, weight, bias), out, x.dtype)
    return _gpu(x, weight, bias, out, out_shape, config)


def _plain_number(value):
    """A Python or NumPy number as a plain float or int (for ``asarray`` on either path)."""
    return value.item() if isinstance(value, np.generic) else value


def _bias_vector(xp, bias, n: int):
    """The bias as an (N,) view without a copy: (N,) as it is, (1, N) reshaped, one value
    ((), (1,), (1, 1)) broadcast with stride 0. Anything else is refused."""
    shape = bias.shape
    if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        raise ValueError(f"{FN}: argument 'bias' expected shape ({n},), (1, {n}) or one value broadcast to every "
                         f"row ((), (1,)), got {shape}")
    if shape and shape[-1] == n:
        return bias.reshape(n)
    return xp.lib.stride_tricks.as_strided(bias.reshape(()), shape=(n,), strides=(0,))


_ndarray = None  # cupy.ndarray, once cupy is imported


def _on_gpu(x, weight, bias, out) -> bool:
    global _ndarray
    if _ndarray is None:
        try:
            import cupy
        except ImportError:
            return False
        _ndarray = cupy.ndarray
    nd = _ndarray
    return (type(x) is nd and type(weight) is nd and (bias is None or type(bias) is nd)
            and (out is None or type(out) is nd))


def _signature(x, weight, bias, out, config):
    xd, wd = x.data, weight.data
    return ("linear", x.shape, x.strides, x.dtype, xd.ptr & 15, xd.device_id,
            weight.shape, weight.strides, weight.dtype, wd.ptr & 15, wd.device_id,
            None if bias is None else (bias.shape, bias.strides, bias.dtype, bias.data.device_id),
            None if out is None else (out.shape, out.strides, out.dtype, out.data.ptr & 15, out.data.device_id),
            config)


def _byte_extent(a) -> tuple[int, int]:
    """[lo, hi) bytes around a.data.ptr that the array can touch."""
    lo = sum((d - 1) * st for d, st in zip(a.shape, a.strides) if st < 0)
    hi = sum((d - 1) * st for d, st in zip(a.shape, a.strides) if st > 0) + a.itemsize
    return lo, hi


class _Entry:
    """One signature's bound plan (None: an empty output) and what its calls share."""

    __slots__ = ("bound", "out_shape", "dtype", "extents")

    def __init__(self, bound, out_shape, dtype, extents):
        self.bound, self.out_shape, self.dtype, self.extents = bound, out_shape, dtype, extents

    def may_overlap(self, x, weight, bias, out) -> bool:
        out_lo, out_hi = out.data.ptr, out.data.ptr + out.nbytes
        for a, extent in zip((x, weight, bias), self.extents):
            if a is not None and a.data.ptr + extent[0] < out_hi and out_lo < a.data.ptr + extent[1]:
                return True
        return False

    def run(self, x, weight, bias, out):
        import cupy

        with x.device:
            if out is None:
                out = cupy.empty(self.out_shape, dtype=self.dtype)
            if self.bound is not None:
                self.bound({"x": x, "weight": weight, "bias": bias, "out": out})
        return out


def _gpu(x, weight, bias, out, out_shape, config):
    itemsize = x.dtype.itemsize
    dev = device_info(x.device.id)
    plan = plan_linear(x.shape, tuple(s // itemsize for s in x.strides), x.data.ptr, weight.shape,
                       tuple(s // itemsize for s in weight.strides), weight.data.ptr,
                       None if bias is None else bias.strides[0] // itemsize,
                       None if out is None else out.data.ptr, x.dtype, dev, config)
    with x.device:
        bound = BoundPlan(plan, dev) if plan.launches else None
    extents = tuple(None if a is None else _byte_extent(a) for a in (x, weight, bias))
    entry = PLANS.put(_signature(x, weight, bias, out, config), _Entry(bound, out_shape, x.dtype, extents))
    return entry.run(x, weight, bias, out)


