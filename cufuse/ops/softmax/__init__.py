"""softmax / log_softmax with the semantics of ``scipy.special`` (``api``). The kernels:
one variant class per kernel family (``rows``, ``split``, ``cols``), chosen by ``select``,
planned by ``plan.plan_softmax``; which one runs where, and why: docs/softmax.md."""
from .api import log_softmax, softmax

__all__ = ["softmax", "log_softmax"]
