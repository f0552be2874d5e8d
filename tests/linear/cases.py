"""GPU test helpers of the linear tests: a case (shapes, layouts, config), its inputs, the
float64 oracle and the check of one call into a poisoned ``out``.

The oracle is the float64 product computed by CuPy (the arithmetic of
``cufuse.reference.fused_linear_relu``, which the small cases also check directly), so the
large shapes stay fast. Tolerance per element, relative to the problem:
``2 ulp(dtype) * |ref| + 8 * eps(accumulator) * K * rms(x) * rms(w)``; the second term is
about 100x below TF32's error at K = 4096, so a float32 case run on TF32 would fail.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse._core.dtypes import BFLOAT16
from cufuse.ops.linear import fused_linear_relu
from cufuse.ops.linear.gemv import GemvConfig, GemvTile
from cufuse.ops.linear.mma import MmaConfig
from cufuse.ops.linear.swap_tma import SWAP_DEFAULT_TILES, SwapConfig
from cufuse.ops.linear.wgmma import TmaConfig, WgmmaConfig

from ..conftest import poisoned

F16, F32, F64, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BFLOAT16
HOPPER_CONFIGS = (WgmmaConfig, TmaConfig, SwapConfig)


@dataclasses.dataclass(frozen=True)
class Case:
    """One GPU check: x of shape lead + (K,), weight (K, N) built by ``layout``."""

    lead: tuple
    k: int
    n: int
    dtype: np.dtype
    layout: str = "kn"  # kn | nk_t | nk_t_padded | odd_column | every_other_k
    bias: str = "contiguous"  # contiguous | none | strided
    x_layout: str = "contiguous"  # contiguous | padded_rows | strided_k | broadcast_rows
    config: object = None

    def __str__(self):
        parts = [f"{'x'.join(map(str, self.lead + (self.k,)))}@{self.k}x{self.n}", self.dtype.name, self.layout]
        if self.bias != "contiguous":
            parts.append(f"bias_{self.bias}")
        if self.x_layout != "contiguous":
            parts.append(self.x_layout)
        if self.config is not None:
            c, t = self.config, self.config.tile
            shape = f"{t.rows}rows" if isinstance(c, GemvConfig) else f"{t.bm}x{t.bn}k{t.bk}s{getattr(t, 'stages', 0)}"
            parts.append(f"{c.kind}{shape}s{getattr(c, 'splits', 1)}{getattr(c, 'reduction', 'slots')[0]}")
        return "-".join(parts)


def mma(tile, splits=1, reduction="atomic"):
    return MmaConfig(tile, splits, reduction=reduction)


def gemv(splits=1, rows=1):
    return GemvConfig(GemvTile(rows), splits)


def swap(m, splits=1):
    """The default swapped tile of an M-row problem, with ``splits``."""
    return SwapConfig(SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64], splits)


def random(cp, rng, shape, dtype):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(dtype))


def make_inputs(cp, rng, case: Case):
    k, n, dtype = case.k, case.n, case.dtype
    x_shape = case.lead + (k,)
    if case.x_layout == "padded_rows":
        x = random(cp, rng, case.lead + (k + 8,), dtype)[..., :k]
    elif case.x_layout == "strided_k":
        x = random(cp, rng, case.lead + (2 * k,), dtype)[..., ::2]
    elif case.x_layout == "broadcast_rows":  # every row the same memory: row stride 0
        x = cp.broadcast_to(random(cp, rng, (k,), dtype), x_shape)
    else:
        x = random(cp, rng, x_shape, dtype)
    if case.layout == "kn":
        w = random(cp, rng, (k, n), dtype)
    elif case.layout == "nk_t":
        w = random(cp, rng, (n, k), dtype).T
    elif case.layout == "nk_t_padded":
        w = random(cp, rng, (n, k + 8), dtype)[:, :k].T
    elif case.layout == "odd_column":
        w = random(cp, rng, (k, n + 3), dtype)[:, 1 : n + 1]
    elif case.layout == "every_other_k":
        w = random(cp, rng, (2 * k, n), dtype)[::2]
    else:
        raise AssertionError(case.layout)
    b = {"contiguous": lambda: random(cp, rng, (n,), dtype), "none": lambda: None,
         "strided": lambda: random(cp, rng, (2 * n,), dtype)[::2]}[case.bias]()
    return x, w, b


def to_float64(cp, a):
    """float64 copy of a CuPy array; bfloat16 widened through its bits (exact, and needs
    no bfloat16 arithmetic from CuPy)."""
    if a.dtype == BFLOAT16:
        return (a.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
    return a.astype(cp.float64)


def oracle(cp, x, w, b):
    """float64 max(x @ w + b, 0) on the GPU, and the per-element tolerance."""
    x64, w64 = to_float64(cp, x), to_float64(cp, w)
    ref = cp.matmul(x64, w64)
    if b is not None:
        ref += to_float64(cp, b)
    ref = cp.maximum(ref, 0.0)
    k = w.shape[0]
    dtype = np.dtype(x.dtype)
    ulp = {F16: 2.0**-10, BFLOAT16: 2.0**-7, F32: 2.0**-23, F64: 2.0**-52}[dtype]
    eps_acc = 2.0**-52 if dtype == F64 else 2.0**-23

    def rms(a):
        return float(cp.sqrt(cp.mean(a**2))) if a.size else 0.0

    tol = 2 * ulp * cp.abs(ref) + 8 * eps_acc * max(k, 1) * rms(x64) * rms(w64) + 1e-30
    return ref, tol


def check_case(cp, rng, case: Case) -> str | None:
    """Run one case into a poisoned out; returns a failure description or None."""
    x, w, b = make_inputs(cp, rng, case)
    out = poisoned(cp, case.lead + (case.n,), case.dtype)
    result = fused_linear_relu(x, w, b, out=out, config=case.config)
    if result is not out:
        return "did not return out"
    return compare(cp, case, x, w, b, out)


def compare(cp, case, x, w, b, out) -> str | None:
    ref, tol = oracle(cp, x, w, b)
    err = cp.abs(to_float64(cp, out) - ref)
    bad = ~(err <= tol)  # NaN (an unwritten element) counts as bad
    if bool(bad.any()):
        idx = tuple(int(i[0]) for i in cp.nonzero(bad))
        return (f"{case}: {int(bad.sum())} of {out.size} elements off, e.g. at {idx}: got "
                f"{float(to_float64(cp, out)[idx])}, want {float(ref[idx])} (tol {float(tol[idx]):.3g})")
    return None


def require_sm90(cp, kernel="the wgmma kernels"):
    if cp.cuda.Device().compute_capability != "90":
        pytest.skip(f"{kernel} need compute capability 9.0")


def require_kernel(cp, case: Case):
    """Skip a forced Hopper config (or linear_relu_dmma's) off compute capability 9.0."""
    config = case.config
    if isinstance(config, HOPPER_CONFIGS) or getattr(config, "kind", "") == "dmma_pipelined":
        require_sm90(cp)


def current_plan(x, w, b=None, out=None, config=None):
    """The plan ``fused_linear_relu(x, w, b, out=out, config=config)`` runs (pure)."""
    from cufuse._core.device import device_info
    from cufuse.ops.linear.plan import plan_linear

    item = x.dtype.itemsize
    return plan_linear(x.shape, tuple(s // item for s in x.strides), x.data.ptr, w.shape,
                       tuple(s // item for s in w.strides), w.data.ptr, None if b is None else b.strides[0] // item,
                       None if out is None else out.data.ptr, x.dtype, device_info(x.device.id), config)
