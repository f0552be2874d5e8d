"""The roofline picture: measured roofs, and every case at its arithmetic intensity,
fused (cufuse's time, intensity of the minimum bytes), its best peer (the fastest peer's
time, same intensity) and unfused (CuPy's composition's time, intensity of the bytes it
moves)."""
from __future__ import annotations

import numpy as np

from .cases import UNFUSED

OP_COLOURS = {"softmax": "tab:blue", "logsumexp": "tab:cyan", "linear": "tab:orange", "linear_epilogues": "tab:red",
              "attention": "tab:green", "paged_attention": "tab:olive"}


def plot_roofline(results: list, ceilings, path: str, *, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    intensity = np.logspace(-1, 4.5, 200)
    bandwidth = ceilings.best_copy_tbps  # TB/s = TFLOP/s per FLOP/B
    peaks = [(dtype, peak) for dtype, peak in ceilings.gemm.items() if peak]
    for index, (dtype, peak) in enumerate(peaks):
        ax.plot(intensity, np.minimum(peak, bandwidth * intensity), "--", color="grey", linewidth=1)
        ax.annotate(f"cupy.matmul {dtype}: {peak:.0f} TFLOP/s", (intensity[-1], peak), xytext=(0, 3 + 10 * index),
                    textcoords="offset points", ha="right", fontsize=8)
    ax.annotate(f"copy: {bandwidth:.2f} TB/s", (0.15, bandwidth * 0.15), rotation=35, fontsize=8, va="bottom")
    for op, colour in OP_COLOURS.items():
        rows = [result for result in results if result.case.op == op]
        fused = [(r.case.traffic.intensity, r.case.traffic.flops / (r.fused_ms * 1e-3) / 1e12)
                 for r in rows if r.fused_ms is not None]
        unfused = [(r.case.traffic.unfused_intensity, r.case.traffic.flops / (r.ms[UNFUSED] * 1e-3) / 1e12)
                   for r in rows if r.ms.get(UNFUSED) is not None]
        best = [(r.case.traffic.intensity, r.case.traffic.flops / (r.ms[r.best_peer()] * 1e-3) / 1e12)
                for r in rows if r.best_peer() is not None]
        for points, marker, kind in ((fused, "o", "cufuse"), (best, "^", "best peer"), (unfused, "x", "unfused CuPy")):
            if points:
                xs, ys = zip(*points)
                filled = {"facecolors": "none", "edgecolors": colour} if marker == "^" else {"color": colour}
                ax.scatter(xs, ys, marker=marker, label=f"{op}, {kind}", **filled)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or "cufuse roofline (measured roofs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
