"""The dispatch snapshot of the current code: every op's pure planner on the grid of
``tests/core/dispatch_cases.py``, in the record format of ``tests/core/dispatch_record.py``.

    python scripts/record_dispatch.py tests/data/dispatch.json.gz [OP ...]

``tests/core/test_dispatch.py`` holds the code to that snapshot; a deliberate change of
dispatch rewrites it with this script, in the same commit as the change. A path ending in
``.gz`` is written gzip-compressed, any other as plain JSON.
"""
from __future__ import annotations

import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.core.dispatch_record import OPS  # noqa: E402


def main(path, ops):
    records = []
    for op in ops:
        cases, record = OPS[op]
        records.extend({"op": op, "case": case, **record(case)} for case in cases())
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as handle:
        json.dump({"records": records}, handle, indent=0)
    print(f"{len(records)} cases of {', '.join(ops)} -> {path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(OPS))
