"""GPU test helpers of the linear tests: a case (shapes, layouts, config), its inputs, the
float64 oracle and the check of one call into a poisoned ``out``.

The oracle is the float64 product computed by CuPy (the arithmetic of
``cufuse.reference.fused_linear``, which the small cases also check directly), so the
large shapes stay fast. Tolerance per element, relative to the problem:
``2 ulp(dtype) * |ref| + 8 * eps(accumulator) * K * rms(x) * rms(w)``; the second term is
about 100x below TF32's error at K = 4096, so a float32 case run on TF32 would fail. With an
activation other than ReLU the product's error passes through it (slopes below 1.2) and the
activation's own rounding adds ``4 eps(accumulator) |pre-activation|``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse._core.dtypes import BFLOAT16
from cufuse.ops.linear import fused_linear, fused_linear_relu
from cufuse.ops.linear.gemv import GemvConfig, GemvTile
from cufuse.ops.linear.mma import MmaConfig
from cufuse.ops.linear.pingpong import PingPongConfig
from cufuse.ops.linear.swap_tma import SWAP_DEFAULT_TILES, SwapConfig
from cufuse.ops.linear.wgmma import TmaConfig, WgmmaConfig

from ..conftest import poisoned

F16, F32, F64, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BFLOAT16
HOPPER_CONFIGS = (WgmmaConfig, TmaConfig, PingPongConfig, SwapConfig)


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
            parts.append(f"{c.kind}{shape}s{getattr(c, 'splits', 1)}")
        return "-".join(parts)


def mma(tile, splits=1):
    return MmaConfig(tile=tile, splits=splits)


def gemv(splits=1, rows=1):
    return GemvConfig(tile=GemvTile(rows=rows), splits=splits)


def swap(m, splits=1):
    """The default swapped tile of an M-row problem, with ``splits``."""
    return SwapConfig(tile=SWAP_DEFAULT_TILES[8 if m <= 8 else 16 if m <= 16 else 64], splits=splits)


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


def activate(cp, activation, v):
    """float64 activation of a CuPy array: cufuse.reference's formulas (erf from cupyx)."""
    from cupyx.scipy.special import erf

    from cufuse import reference

    return reference.activation_formula(activation, v, erf)


def _tolerances(cp, x, w, pre, ref, activation):
    """Per-element tolerance of ``ref`` = activation(``pre``) (module docstring)."""
    k = w.shape[0]
    dtype = np.dtype(x.dtype)
    ulp = {F16: 2.0**-10, BFLOAT16: 2.0**-7, F32: 2.0**-23, F64: 2.0**-52}[dtype]
    eps_acc = 2.0**-52 if dtype == F64 else 2.0**-23

    def rms(a):
        return float(cp.sqrt(cp.mean(to_float64(cp, a) ** 2))) if a.size else 0.0

    product = 8 * eps_acc * max(k, 1) * rms(x) * rms(w)
    if activation in (None, "relu"):
        return 2 * ulp * cp.abs(ref) + product + subnormal_step(dtype)
    return 2 * ulp * cp.abs(ref) + 1.2 * product + 4 * eps_acc * cp.abs(pre) + subnormal_step(dtype)


def subnormal_step(dtype) -> float:
    """The spacing of ``dtype``'s subnormals: below the smallest normal a correctly rounded
    output is off by up to half of it, more than 2 ulp relative allows (float16 5.158e-7
    rounds to 5.364e-7)."""
    return {F16: 2.0**-24, BFLOAT16: 2.0**-133, F32: 2.0**-149, F64: 2.0**-1074}[np.dtype(dtype)]


def oracle(cp, x, w, b, activation="relu"):
    """float64 activation(x @ w + b) on the GPU, and the per-element tolerance."""
    pre = cp.matmul(to_float64(cp, x), to_float64(cp, w))
    if b is not None:
        pre += to_float64(cp, b)
    ref = activate(cp, activation, pre)
    return ref, _tolerances(cp, x, w, pre, ref, activation)


def gated_oracle(cp, x, w_gate, w_up, activation="silu"):
    """float64 activation(x @ w_gate) * (x @ w_up) on the GPU, and the per-element tolerance:
    the gate's (``oracle``'s, its 2 ulp standing for the output's rounding) times |up|, plus
    the up product's error times |act(gate)|."""
    x64 = to_float64(cp, x)
    gate, up = cp.matmul(x64, to_float64(cp, w_gate)), cp.matmul(x64, to_float64(cp, w_up))
    act = activate(cp, activation, gate)
    ref = act * up
    up_tol = _tolerances(cp, x, w_up, up, up, None)
    gate_tol = _tolerances(cp, x, w_gate, gate, act, activation)
    output_rounding = subnormal_step(x.dtype)  # the gate's 2 ulp stand for it above the subnormals
    return ref, gate_tol * cp.abs(up) + up_tol * cp.abs(act) + gate_tol * up_tol + output_rounding


def check_case(cp, rng, case: Case, activation="relu", scale=1.0) -> str | None:
    """Run one case into a poisoned out (x scaled by ``scale``: large values reach the
    activation's tails); returns a failure description or None."""
    x, w, b = make_inputs(cp, rng, case)
    if scale != 1.0:
        x = (x.astype(cp.float32) * scale).astype(x.dtype)
    out = poisoned(cp, case.lead + (case.n,), case.dtype)
    if activation == "relu":
        result = fused_linear_relu(x, w, b, out=out, config=case.config)
    else:
        result = fused_linear(x, w, b, activation=activation, out=out, config=case.config)
    if result is not out:
        return "did not return out"
    return compare(cp, case, x, w, b, out, activation)


def gated_inputs(cp, rng, case: Case, up_layout=None):
    """x and w_gate as ``make_inputs`` builds x and the weight, w_up of ``up_layout`` (default:
    the case's)."""
    x, w_gate, _ = make_inputs(cp, rng, case)
    _, w_up, _ = make_inputs(cp, rng, dataclasses.replace(case, layout=up_layout or case.layout))
    return x, w_gate, w_up


def check_gated_case(cp, rng, case: Case, activation="silu", up_layout=None, scale=2.0) -> str | None:
    """fused_gated_linear on one case (x scaled by ``scale``) into a poisoned out; a failure
    description or None."""
    from cufuse.ops.linear import fused_gated_linear

    x, w_gate, w_up = gated_inputs(cp, rng, case, up_layout)
    x = (x.astype(cp.float32) * scale).astype(x.dtype)
    # up / 16 (exact): the gate's tails still matter, but gate x up stays inside float16's
    # range (a product of two K = 4096 dot products of scaled inputs reached 85 000)
    w_up[...] = (w_up.astype(cp.float32) / 16).astype(w_up.dtype)
    out = poisoned(cp, case.lead + (case.n,), case.dtype)
    if fused_gated_linear(x, w_gate, w_up, activation=activation, out=out, config=case.config) is not out:
        return "did not return out"
    ref, tol = gated_oracle(cp, x, w_gate, w_up, activation)
    return within(cp, f"{case} gated {activation} up {up_layout or case.layout}", out, ref, tol)


def compare(cp, case, x, w, b, out, activation="relu") -> str | None:
    ref, tol = oracle(cp, x, w, b, activation)
    return within(cp, f"{case} {activation}", out, ref, tol)


def within(cp, name, out, ref, tol) -> str | None:
    """None, or which elements of ``out`` are off ``ref`` by more than ``tol``."""
    err = cp.abs(to_float64(cp, out) - ref)
    bad = ~(err <= tol)  # NaN (an unwritten element) counts as bad
    if bool(bad.any()):
        idx = tuple(int(i[0]) for i in cp.nonzero(bad))
        return (f"{name}: {int(bad.sum())} of {out.size} elements off, e.g. at {idx}: got "
                f"{float(to_float64(cp, out)[idx])}, want {float(ref[idx])} (tol {float(tol[idx]):.3g})")
    return None


def require_sm90(cp, kernel="the wgmma kernels"):
    if cp.cuda.Device().compute_capability != "90":
        pytest.skip(f"{kernel} need compute capability 9.0")


def require_kernel(cp, case: Case):
    """Skip a forced Hopper config (or linear_dmma's) off compute capability 9.0."""
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
