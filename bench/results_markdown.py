"""README "Results" tables from one ``python -m cufuse.bench --json`` file (issue 6).

Usage: ``python3 bench/results_markdown.py bench.json [more.json ...] > results.md``

One table per op, the same columns as the CLI's table: cufuse's rate, its fraction of the
measured ceiling, the best (fastest) peer and cufuse's speed-up over it, and per peer "peer
time / cufuse time (peer rate)", with "h" where the peer was host-bound (its figure is its
Python launch rate); then the class minima against the best peer. Several files (one run
split by ``--op``) are read as one run: the header comes from the first. Nothing is edited
by hand, so the README shows exactly what the run measured.
"""
from __future__ import annotations

import json
import sys


def ratio_cell(impl: dict | None) -> str:
    """Speed-up (peer rate), or why the peer has no figure ("failed", "unsupported", ...)."""
    if impl and impl.get("status") not in (None, "ok") and impl.get("rate") is None:
        return impl["status"].split(":")[0]
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
    peers = [p for p in peers if any(r["impls"].get(p, {}).get("status") != "unavailable" for r in rows)]
    lines = [f"**{op}** ({metric})", "",
             "| case | dtype | cufuse | % of ceiling | best peer | " + " | ".join(f"vs {p}" for p in peers) + " |",
             "|---|---|---:|---:|---|" + "---:|" * len(peers)]
    for r in rows:
        own = r["impls"]["cufuse"]
        rate = f"{own['rate']:.2f}" if own.get("rate") is not None else own.get("status", "-")
        fraction = f"{100 * r['fraction_of_ceiling']:.0f}" if r.get("fraction_of_ceiling") else "-"
        cells = [ratio_cell(r["impls"].get(p)) for p in peers]
        lines.append(f"| {r['case']} | {r['dtype']} | {rate} | {fraction} | {best_cell(r)} | " + " | ".join(cells) + " |")
    return lines


def best_cell(r: dict) -> str:
    if not r.get("best_peer") or r.get("best_peer_speedup") is None:
        return "-"
    return f"{r['best_peer']} {r['best_peer_speedup']:.2f}x"


def class_minima_table(results: list) -> list:
    """Per op, class and dtype: the lowest speed-up over the best peer, with its case and peer."""
    groups = {}
    for r in results:
        groups.setdefault((r["op"], r.get("class") or "all", r["dtype"]), []).append(r)
    lines = ["**Class minima against the best peer** (peer time / cufuse time; below 1.00x the peer is faster)", "",
             "| op | class | dtype | cases | minimum | at | peer |", "|---|---|---|---:|---:|---|---|"]
    for (op, klass, dtype), members in groups.items():
        scored = [(r["best_peer_speedup"], r["case"], r["best_peer"]) for r in members
                  if r.get("best_peer") and r.get("best_peer_speedup") is not None]
        ratio, case, peer = min(scored) if scored else (None, "-", "-")
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        lines.append(f"| {op} | {klass} | {dtype} | {len(members)} | {shown} | {case} | {peer} |")
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
    if any("best_peer" in r for r in run["results"]):
        out += class_minima_table(run["results"]) + [""]
    return "\n".join(out)


def merged(runs: list) -> dict:
    """Several JSON files of one run (split by --op) as one: the first's header, every result."""
    run = dict(runs[0])
    run["results"] = [r for part in runs for r in part["results"]]
    return run


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    parts = []
    for path in sys.argv[1:]:
        with open(path) as f:
            parts.append(json.load(f))
    print(markdown(merged(parts)))
