"""fused_linear, fused_linear_relu and fused_gated_linear (``api``). The pure chains of their
GPU paths are ``plan.plan_linear`` / ``plan.plan_gated``; the default selection ``select``;
one module per kernel family of ``kernels/linear/`` holds its variant classes, which
``config=`` takes: ``mma.MmaConfig``, ``wgmma.WgmmaConfig`` / ``wgmma.TmaConfig``,
``swap_tma.SwapConfig``, ``gemv.GemvConfig``, ``wide.Tf32x3Config`` / ``wide.DmmaConfig``,
``dmma.PipelinedDmmaConfig``, ``simt.SimtConfig``; the gated form's ``wgmma.GatedTmaConfig``,
``mma.GatedMmaConfig`` and ``simt.GatedSimtConfig``."""
from .api import fused_gated_linear, fused_linear, fused_linear_relu

__all__ = ["fused_gated_linear", "fused_linear", "fused_linear_relu"]
