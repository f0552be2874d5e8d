"""logsumexp with the semantics of ``scipy.special`` (``api``). The kernels: ``variants``
(rows and columns), chosen by ``select``, planned by ``plan.plan_logsumexp``; the problem view
is the row problem shared with softmax (``cufuse._core.rows``). Which one runs where, and
why: docs/logsumexp.md."""
from .api import logsumexp

__all__ = ["logsumexp"]
