"""Same choices before and after the restructure: the recorded launches of the old code
(``dispatch_v0.json``, from ``record_plans_v0.py`` at 569c93b) against the current code's
(``record_plans.py``), case by case.

    python experiments/restructure/compare_dispatch.py experiments/restructure/dispatch_v0.json.gz NEW.json

Kernels whose template arguments changed in the move (a dead flag removed) are mapped back to
their old expression by ``renames_<op>.legacy_expression``. Exit status 1 on any difference.
"""
from __future__ import annotations

import gzip
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _legacy(op):
    try:
        return importlib.import_module(f"renames_{op}").legacy_expression
    except ImportError:
        return lambda expression: expression


def canonical_old(record):
    if "error" in record:
        return ("error", record["error"].split(":")[0])
    if record.get("copy"):
        return ("copy",)
    launches = []
    for launch in record["launches"]:
        entry = {k: launch[k] for k in ("kernel", "grid", "block", "smem", "scalars")}
        for key in ("maps", "pdl_smem"):
            if key in launch:
                entry[key] = launch[key]
        if "scratch" in launch:  # softmax: [accumulator dtype, accumulators, counters]
            dtype, accumulators, counters = launch["scratch"]
            entry["scratch"] = [[dtype, accumulators, False], ["uint32", counters, True]]
        if "workspace" in launch and record["op"] == "attention":  # the partials: [O shape, lse shape]
            entry["scratch"] = [["float32", s] for s in launch["workspace"]]
        elif "workspace" in launch:  # linear: [float32 cells, int32 counters, reduction kind]
            cells, tiles, _ = launch["workspace"]
            entry["scratch"] = [["float32", cells, True], ["int32", tiles, True]]
        launches.append(entry)
    return ("launches", launches)


def canonical_new(record, legacy):
    if "error" in record:
        return ("error", record["error"].split(":")[0])
    if record.get("copy"):
        return ("copy",)
    launches = []
    for index, launch in enumerate(record["launches"]):
        entry = {k: launch[k] for k in ("grid", "block", "smem", "scalars")}
        entry["kernel"] = legacy(launch["kernel"])
        for key in ("maps", "pdl_smem"):
            if key in launch:
                entry[key] = launch[key]
        if "scratch" in record and index == 0:
            entry["scratch"] = [list(buffer) for buffer in record["scratch"][1:]]
        if "temporaries" in record and index == 0:
            entry["scratch"] = [[d, shape] for d, shape in record["temporaries"]]
        launches.append(entry)
    return ("launches", launches)


def _load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as handle:
        return json.load(handle)["records"]


def main(old_path, new_path):
    old, new = _load(old_path), _load(new_path)
    ops = {r["op"] for r in new}
    old = [r for r in old if r["op"] in ops]
    if len(old) != len(new):
        print(f"case counts differ: {len(old)} recorded, {len(new)} now")
        return 1
    differences = 0
    for before, after in zip(old, new):
        if before["case"] != after["case"]:
            print("case lists differ: regenerate both from one dispatch_cases.py")
            return 1
        a, b = canonical_old(before), canonical_new(after, _legacy(after["op"]))
        if a != b:
            differences += 1
            if differences <= 20:
                print(f"DIFF {after['op']} {json.dumps(after['case'])}\n  before {a}\n  after  {b}")
    print(f"{len(new)} cases of {', '.join(sorted(ops))}: {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
