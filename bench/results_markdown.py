"""README "Results" tables from one ``python -m cufuse.bench --json`` file (issue 6).

Usage: ``python3 bench/results_markdown.py bench.json > results.md``

One table per op, the same columns as the CLI's table: cufuse's rate, its fraction of the
measured ceiling, and per peer "peer time / cufuse time (peer rate)", with "h" where the
peer was host-bound (its figure is its Python launch rate). Nothing is edited by hand, so
the README shows exactly what the run measured.
"""
from __future__ import annotations

import json
import sys


def ratio_cell(impl: dict | None) -> str:
    if not impl or impl.get("speedup") is None or impl.get("rate") is None:
        return "-"
    host = " h" if impl.get("host_bound") else ""
    return f"{impl['speedup']:.2f}x ({impl['rate']:.2f}){host}"


def op_table(op: str, results: list) -> list:
    rows = [r for r in results if r["op"] == op]
    peers = []
    for r in rows:
        peers += [name for name in r["impls"] if name != "cufuse" and name not in peers]
    metric = rows[0]["metric"] if len(set(r["metric"] for r in rows)) == 1 else "TB/s or TFLOP/s"
    lines = [f"**{op}** ({metric})", "",
             "| case | dtype | cufuse | % of ceiling | " + " | ".join(f"vs {p}" for p in peers) + " |",
             "|---|---|---:|---:|" + "---:|" * len(peers)]
    for r in rows:
        own = r["impls"]["cufuse"]
        rate = f"{own['rate']:.2f}" if own.get("rate") is not None else own.get("status", "-")
        fraction = f"{100 * r['fraction_of_ceiling']:.0f}" if r.get("fraction_of_ceiling") else "-"
        cells = [ratio_cell(r["impls"].get(p)) for p in peers]
        lines.append(f"| {r['case']} | {r['dtype']} | {rate} | {fraction} | " + " | ".join(cells) + " |")
    return lines


def markdown(run: dict) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in run["versions"].items())
    ceilings = run["ceilings"]
    copies = ceilings.get("copy_TBps_read_plus_write", {})
    largest = max(copies, key=int) if copies else None
    gemm = ", ".join(f"{dt} {tf:.0f}" for dt, tf in ceilings.get("cupy_matmul_8192_TFLOPs", {}).items())
    out = [f"Measured {run['date']} on {run['device']}; {versions}.",
           f"Command: `{run['command']}`.",
           (f"Ceilings measured in the same run: device copy {copies[largest]:.2f} TB/s at "
            f"{int(largest) / 2**30:.1f} GiB" if largest else "Ceilings measured in the same run:")
           + (f"; cupy.matmul 8192^3 TFLOP/s: {gemm}." if gemm else "."), ""]
    ops = []
    for r in run["results"]:
        if r["op"] not in ops:
            ops.append(r["op"])
    for op in ops:
        out += op_table(op, run["results"]) + [""]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        print(markdown(json.load(f)))
