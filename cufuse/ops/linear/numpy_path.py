"""The fast NumPy path of fused_linear / fused_gated_linear: one float64 BLAS product over all
of K, the bias added in place, the activation's formulas of ``cufuse.reference`` with a
vectorised erf. The same results as the tiled oracle within float64 rounding."""
from __future__ import annotations

import numpy as np

from ...reference import activation_formula, apply_activation

try:  # SciPy's erf is vectorised; without SciPy "gelu" falls back to the oracle's math.erf
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - SciPy is a test dependency, not a core one
    _erf = None


def activate(name, v: np.ndarray) -> np.ndarray:
    """float64 ``name(v)`` with ``reference.apply_activation``'s formulas and limits."""
    if _erf is None:
        return apply_activation(name, v)
    return activation_formula(name, v, _erf)


def _product(x, weight) -> np.ndarray:
    """float64 ``x @ weight`` as (rows, N) over the whole of K in one BLAS call."""
    x = np.asarray(x, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    return x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)), weight.shape[0]) @ weight  # -1 fails for K = 0


def fused_linear(x, weight, bias=None, *, activation: str | None = None) -> np.ndarray:
    """float64 ``activation(x @ weight + bias)`` for x ``(..., K)``, weight ``(K, N)``."""
    acc = _product(x, weight)
    if bias is not None:
        acc += np.asarray(bias, dtype=np.float64)
    return activate(activation, acc).reshape(np.shape(x)[:-1] + (acc.shape[1],))


def fused_linear_relu(x, weight, bias=None) -> np.ndarray:
    """float64 ``max(x @ weight + bias, 0)``."""
    return fused_linear(x, weight, bias, activation="relu")


def fused_gated_linear(x, w_gate, w_up, *, activation: str | None = "silu") -> np.ndarray:
    """float64 ``activation(x @ w_gate) * (x @ w_up)`` (two BLAS products: a side-by-side copy of
    the weights would cost more than it saves)."""
    gated = activate(activation, _product(x, w_gate))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf products as the oracle gives them
        gated *= _product(x, w_up)
    return gated.reshape(np.shape(x)[:-1] + (gated.shape[1],))
