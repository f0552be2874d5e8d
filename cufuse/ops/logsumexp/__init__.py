"""logsumexp with the semantics of ``scipy.special`` (``api``). The kernels: ``variants``
(rows and columns), chosen by ``select``, planned by ``plan.plan_logsumexp``; the problem view
reuses softmax's layout analysis (``cufuse.ops.softmax.layout``). Which one runs where, and
why: docs/logsumexp.md."""
from .api import logsumexp

__all__ = ["logsumexp"]
