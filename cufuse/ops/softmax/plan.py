"""``plan_softmax``: the pure chain of one softmax call, problem -> config -> Plan (no GPU)."""
from __future__ import annotations

import numpy as np

from ..._core.plans import Plan
from . import select
from .problem import SoftmaxProblem, collapse


def plan_softmax(shape, strides, dtype, axes, log, dev, config=None) -> Plan | None:
    """The launch of softmax (``log``: log_softmax) of x of ``shape`` and element ``strides``
    over the sorted non-negative ``axes`` into a C-contiguous out, on ``dev``: the default
    selection's variant, or ``config`` (checked against the problem and the device).

    None where x has no (outer, length, inner) view (the reduced axes not consecutive, or a
    group of axes that does not collapse to one stride): the caller copies x first.
    """
    layout = collapse(shape, strides, set(axes))
    if layout is None:
        return None
    (outer, length, inner), (so, sl, si) = layout
    problem = SoftmaxProblem(outer, length, inner, so, sl, si, np.dtype(dtype), bool(log))
    if config is None:
        config = select.choose(problem, dev)
    else:
        config.check(problem, dev)
    return config.plan(problem, dev)
