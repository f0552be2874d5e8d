"""fused_linear_relu (``api``). The pure chain of its GPU path is ``plan.plan_linear``; the
default selection ``select``; one module per kernel family of ``kernels/linear/`` holds its
variant classes, which ``config=`` takes: ``mma.MmaConfig``, ``wgmma.WgmmaConfig`` /
``wgmma.TmaConfig``, ``swap_tma.SwapConfig``, ``gemv.GemvConfig``, ``wide.Tf32x3Config`` /
``wide.DmmaConfig``, ``dmma.PipelinedDmmaConfig``, ``simt.SimtConfig``."""
from .api import fused_linear_relu

__all__ = ["fused_linear_relu"]
