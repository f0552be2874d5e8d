"""The roofline picture: measured roofs, and every case at its arithmetic intensity,
fused (cufuse's time, intensity of the minimum bytes), its best peer (the fastest peer's
time, same intensity) and unfused (CuPy's composition's time, intensity of the bytes it
moves).

    python -m cufuse.bench.roofline OUT.png RUN.json [RUN.json ...]

draws it from the JSON of one or more ``python -m cufuse.bench --json`` runs (one run split
by ``--op``): the roofs of the first, the cases of all.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from .cases import UNFUSED

OP_COLOURS = {"softmax": "tab:blue", "logsumexp": "tab:cyan", "linear": "tab:orange", "linear_epilogues": "tab:red",
              "attention": "tab:green", "paged_attention": "tab:olive", "attention_varlen": "tab:brown"}


def plot_roofline(results: list, ceilings, path: str, *, title: str = "") -> None:
    """The roofline of this run's ``results`` (runner.Result) under its measured ``ceilings``."""
    plot_rows([result.to_dict() for result in results], ceilings.best_copy_tbps, ceilings.gemm, path, title=title)


def _tflops(row: dict, name) -> float | None:
    ms = row["impls"].get(name, {}).get("ms") if name else None
    return None if ms is None else row["flops"] / (ms * 1e-3) / 1e12


def plot_rows(rows: list, bandwidth: float, gemm: dict, path: str, *, title: str = "") -> None:
    """``rows``: results as in the JSON; ``bandwidth``: the copy roof in TB/s; ``gemm``: the
    GEMM roof per dtype in TFLOP/s (None where it was not measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    intensity = np.logspace(-1, 4.5, 200)  # TB/s = TFLOP/s per FLOP/B
    peaks = [(dtype, peak) for dtype, peak in gemm.items() if peak]
    for index, (dtype, peak) in enumerate(peaks):
        ax.plot(intensity, np.minimum(peak, bandwidth * intensity), "--", color="grey", linewidth=1)
        ax.annotate(f"cupy.matmul {dtype}: {peak:.0f} TFLOP/s", (intensity[-1], peak), xytext=(0, 3 + 10 * index),
                    textcoords="offset points", ha="right", fontsize=8)
    ax.annotate(f"copy: {bandwidth:.2f} TB/s", (0.15, bandwidth * 0.15), rotation=35, fontsize=8, va="bottom")
    for op, colour in OP_COLOURS.items():
        ops = [row for row in rows if row["op"] == op]
        fused = [(row["intensity"], _tflops(row, "cufuse")) for row in ops]
        best = [(row["intensity"], _tflops(row, row.get("best_peer"))) for row in ops]
        unfused = [(row["flops"] / row["unfused_bytes"], _tflops(row, UNFUSED)) for row in ops]
        for points, marker, kind in ((fused, "o", "cufuse"), (best, "^", "best peer"), (unfused, "x", "unfused CuPy")):
            points = [(x, y) for x, y in points if y is not None]
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


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) < 2:
        sys.exit(__doc__)
    runs = []
    for name in argv[1:]:
        with open(name) as handle:
            runs.append(json.load(handle))
    ceilings = runs[0]["ceilings"]
    copies = ceilings["copy_TBps_read_plus_write"]
    plot_rows([row for run in runs for row in run["results"]], max(copies.values()), ceilings["cupy_matmul_8192_TFLOPs"],
              argv[0], title=f"cufuse on {runs[0]['device'].split(' (')[0]}")
    print(f"roofline written to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
