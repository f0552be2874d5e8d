"""plan_linear: the pure chain of fused_linear_relu's GPU path, problem -> config -> Plan."""
from __future__ import annotations

from ..._core.plans import Plan
from ..._core.validate import check_config
from .operands import FN, linear_problem, rows_view
from .select import VARIANTS, choose_config


def plan_linear(x_shape, x_strides, x_ptr, w_shape, w_strides, w_ptr, bias_stride, out_ptr, dtype, dev,
                config=None) -> Plan:
    """The launches of ``fused_linear_relu`` on operands of these shapes, strides (elements),
    pointers (bytes; only their alignment matters) and dtype on ``dev``: x ``(..., K)``
    (leading axes that collapse into one row stride, else ValueError), weight ``(K, N)``,
    ``bias_stride`` in elements or None (no bias), ``out_ptr`` None for a fresh output (256-
    byte aligned) or the given out's address. ``config``: a variant of this package (checked
    with its ``check``); None: ``select.choose_config``'s. An empty output: no launches."""
    m, ldx, x_k_stride = rows_view(tuple(x_shape), tuple(x_strides))
    k, n = w_shape
    if m * n == 0:
        return Plan(())
    problem = linear_problem(m, ldx, x_k_stride, x_ptr, k, n, tuple(w_strides), w_ptr, bias_stride, out_ptr, dtype,
                             dev)
    if config is None:
        config = choose_config(problem, dev)
    else:
        check_config(FN, config, VARIANTS).check(problem, dev)
    return config.plan(problem, dev)
