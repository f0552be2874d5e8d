"""The dispatch snapshot of the current code: every op's pure planner on the grid of
``tests/core/dispatch_cases.py``, in the record format of ``tests/core/dispatch_record.py``.

    python experiments/restructure/record_plans.py OUT.json [OP ...]

``compare_dispatch.py`` sets it beside the record of the code before the restructure
(``record_plans_v0.py``); ``gzip``-ed, it is ``tests/data/dispatch.json.gz``, the snapshot
that ``tests/core/test_dispatch.py`` holds the code to. A change of dispatch rewrites it
with this script, in the same commit as the change.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from tests.core.dispatch_record import OPS  # noqa: E402


def main(path, ops):
    records = []
    for op in ops:
        cases, record = OPS[op]
        records.extend({"op": op, "case": case, **record(case)} for case in cases())
    with open(path, "w") as handle:
        json.dump({"records": records}, handle, indent=0)
    print(f"{len(records)} cases of {', '.join(ops)} -> {path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(OPS))
