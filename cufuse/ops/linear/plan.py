"""plan_linear / plan_gated: the pure chains of fused_linear's and fused_gated_linear's GPU
paths, problem -> config -> Plan."""
from __future__ import annotations

from ..._core.plans import Plan
from ..._core.validate import check_config
from .operands import FN, gated_problem, linear_problem, rows_view
from .select import GATED_VARIANTS, VARIANTS, choose


def plan_linear(x_shape, x_strides, x_ptr, w_shape, w_strides, w_ptr, bias_stride, out_ptr, dtype, dev,
                config=None, *, activation: int = 1, fn: str = FN) -> Plan:
    """The launches of ``fused_linear`` on operands of these shapes, strides (elements),
    pointers (bytes; only their alignment matters) and dtype on ``dev``: x ``(..., K)``
    (leading axes that collapse into one row stride, else ValueError), weight ``(K, N)``,
    ``bias_stride`` in elements or None (no bias), ``out_ptr`` None for a fresh output (256-
    byte aligned) or the given out's address; ``activation`` as ``operands.ACTIVATION_CODES``
    numbers it; ``fn`` names the public function in errors. ``config``: a variant of this
    package (checked with its ``check``); None: ``select.choose``'s. An empty output:
    no launches."""
    m, ldx, x_k_stride = rows_view(tuple(x_shape), tuple(x_strides), fn)
    k, n = w_shape
    if m * n == 0:
        return Plan(())
    problem = linear_problem(m, ldx, x_k_stride, x_ptr, k, n, tuple(w_strides), w_ptr, bias_stride, out_ptr, dtype,
                             dev, activation, fn)
    if config is None:
        config = choose(problem, dev)
    else:
        check_config(fn, config, VARIANTS).check(problem, dev)
    return config.plan(problem, dev)


def plan_gated(x_shape, x_strides, x_ptr, w_shape, gate_strides, gate_ptr, up_strides, up_ptr, out_ptr, dtype, dev,
               config=None, *, activation: int = 4, fn: str = "fused_gated_linear") -> Plan:
    """The launch of ``fused_gated_linear``: as ``plan_linear``, with w_gate and w_up (both
    ``w_shape``) in place of the weight and no bias. ``config``: a gated variant
    (``select.GATED_VARIANTS``) or None (``select.choose``'s)."""
    m, ldx, x_k_stride = rows_view(tuple(x_shape), tuple(x_strides), fn)
    k, n = w_shape
    if m * n == 0:
        return Plan(())
    problem = gated_problem(m, ldx, x_k_stride, x_ptr, k, n, tuple(gate_strides), gate_ptr, tuple(up_strides), up_ptr,
                            out_ptr, dtype, dev, activation, fn)
    if config is None:
        config = choose(problem, dev)
    else:
        check_config(fn, config, GATED_VARIANTS).check(problem, dev)
    return config.plan(problem, dev)
