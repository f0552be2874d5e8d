"""Do the benchmark CLI and the pytest-benchmark suite agree? (issue 6)

Usage: ``python3 bench/compare_runs.py CLI.json PYBENCH.json [CLI2.json]``

``CLI.json`` comes from ``python -m cufuse.bench --json``, ``PYBENCH.json`` from
``pytest bench/ --benchmark-json``. Both time the same cases through
``cufuse.bench.cases`` with the same input rotation; this prints, per case and
implementation, the two rates and their ratio. With a second CLI run of the same
session (``CLI2.json``) it also prints the CLI's own run-to-run spread, which is what
"within noise" is measured against.

Rows where either harness found the implementation host-bound (enqueueing a call took
most of its time: the unfused compositions of small kernels) are marked ``h`` and
summarised apart: their figure is the Python launch rate, which moves with the host from
run to run, not a property of the GPU code.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cufuse.bench.timing import is_host_bound  # noqa: E402


def cli_rates(path):
    """({(op, case, dtype, impl): rate}, {keys found host-bound}) of a ``python -m cufuse.bench --json`` file."""
    with open(path) as f:
        results = json.load(f)["results"]
    rates, host_bound = {}, set()
    for r in results:
        for impl, v in r["impls"].items():
            if v.get("rate"):
                key = (r["op"], r["case"], r["dtype"], impl)
                rates[key] = v["rate"]
                if v.get("host_bound"):
                    host_bound.add(key)
    return rates, host_bound


def pytest_rates(path):
    """The same for a pytest-benchmark json: the group is "op case dtype", the test
    parameter is the group with dashes for spaces, then the implementation."""
    with open(path) as f:
        benchmarks = json.load(f)["benchmarks"]
    rates, host_bound = {}, set()
    for b in benchmarks:
        info = b["extra_info"]
        rate = info.get(info.get("metric"))
        if not rate:
            continue
        op, rest = b["group"].split(" ", 1)
        case, dtype = rest.rsplit(" ", 1)
        param = b["name"][b["name"].index("[") + 1:-1]
        impl = param[len(b["group"].replace(" ", "-")) + 1:].replace("-", " ")
        rates[(op, case, dtype, impl)] = rate
        host_ms = info.get("host_ms_per_call")
        if host_ms is not None and is_host_bound(host_ms, b["stats"]["median"] * 1e3):
            host_bound.add((op, case, dtype, impl))
    return rates, host_bound


def spread(ratios):
    """median, and how many of the ratios lie within 5 % and 10 % of 1."""
    return (statistics.median(ratios), sum(abs(r - 1) <= 0.05 for r in ratios),
            sum(abs(r - 1) <= 0.10 for r in ratios), len(ratios))


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    (cli, cli_host), (py, py_host) = cli_rates(argv[0]), pytest_rates(argv[1])
    host_bound = cli_host | py_host
    common = sorted(cli.keys() & py.keys())
    if not common:
        sys.exit("compare_runs: no case appears in both files")
    ratios = {k: py[k] / cli[k] for k in common}
    print(f"{'op':<10} {'case':<30} {'dtype':<9} {'impl':<17} {'cli':>9} {'pytest':>9} {'ratio':>6}")
    for k in common:
        mark = " h" if k in host_bound else ""
        print(f"{k[0]:<10} {k[1]:<30} {k[2]:<9} {k[3]:<17} {cli[k]:9.3f} {py[k]:9.3f} {ratios[k]:6.2f}{mark}")
    gpu_bound = [k for k in common if k not in host_bound]
    print(f"\ncases in both: {len(common)} (cli {len(cli)}, pytest {len(py)}); h: host-bound in either run")
    print("pytest / cli, GPU-bound:  median %.3f, within 5%%: %d, within 10%%: %d of %d"
          % spread([ratios[k] for k in gpu_bound]))
    if len(gpu_bound) < len(common):
        print("pytest / cli, host-bound: median %.3f, within 5%%: %d, within 10%%: %d of %d"
              % spread([ratios[k] for k in common if k in host_bound]))
    print("  cufuse only:  median %.3f, within 5%%: %d, within 10%%: %d of %d"
          % spread([ratios[k] for k in common if k[3] == "cufuse"]))
    # The claims are ratios against peers timed in the same run: compare those too.
    speedups = []
    for k in gpu_bound:
        own_key = k[:3] + ("cufuse",)
        if k[3] != "cufuse" and own_key in cli and own_key in py:
            speedups.append((py[own_key] / py[k]) / (cli[own_key] / cli[k]))
    if speedups:
        print("speed-up over each GPU-bound peer, pytest / cli: median %.3f, within 5%%: %d, within 10%%: %d of %d"
              % spread(speedups))
    if len(argv) == 3:
        cli2, cli2_host = cli_rates(argv[2])
        for label, keys in (("GPU-bound", [k for k in gpu_bound if k not in cli2_host]),
                            ("host-bound", [k for k in common if k in host_bound or k in cli2_host])):
            again = [cli2[k] / cli[k] for k in keys if k in cli2]
            if again:
                print(f"cli2 / cli, {label}: " + "median %.3f, within 5%%: %d, within 10%%: %d of %d" % spread(again))


if __name__ == "__main__":
    main(sys.argv[1:])
