"""plan_logsumexp: the pure chain problem -> config -> Plan of one logsumexp call."""
from __future__ import annotations

from .problem import make_problem
from .select import choose


def plan_logsumexp(shape, strides, b_strides, dtype, axes, base_aligned, dev, config=None):
    """The Plan of a (element ``strides``; b's broadcast element strides or None) reduced over
    ``axes`` on ``dev``, or None where a or b does not collapse (the explicit-copy path).
    ``config`` (a variant) replaces the default choice after its check."""
    problem = make_problem(shape, strides, b_strides, dtype, axes, base_aligned)
    if problem is None:
        return None
    if config is None:
        config = choose(problem, dev)
    else:
        config.check(problem, dev)
    return config.plan(problem, dev)
