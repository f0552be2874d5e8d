"""The dispatch snapshot: for a broad grid of shapes, dtypes, layouts and both reference
devices (H200, A100), every op's pure planner decides exactly what the recorded snapshot
says (kernel, grid, block, shared memory, arguments, scratch, PDL).

The snapshot (``tests/data/dispatch.json.gz``) holds the dispatch still. A deliberate change
of dispatch rewrites it with ``python scripts/record_dispatch.py tests/data/dispatch.json.gz``
in the same commit, so the diff of the snapshot shows every decision that moved.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from .dispatch_record import OPS

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "dispatch.json.gz"


@pytest.fixture(scope="module")
def snapshot():
    with gzip.open(SNAPSHOT, "rt") as handle:
        return json.load(handle)["records"]


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_case_plans_as_recorded(snapshot, op):
    cases, record = OPS[op]
    recorded = [r for r in snapshot if r["op"] == op]
    grid = cases()
    assert [r["case"] for r in recorded] == grid, "the case grid changed: rewrite the snapshot"
    differences = []
    for expected in recorded:
        got = {"op": op, "case": expected["case"], **record(expected["case"])}
        if got != expected:
            differences.append((expected["case"], expected, got))
    assert not differences, f"{len(differences)} of {len(recorded)} {op} cases plan differently; first: {differences[0]}"


def test_snapshot_covers_every_kernel_family_and_both_devices(snapshot):
    kernels = Counter(launch["kernel"].split("<")[0] for r in snapshot for launch in r.get("launches", []))
    devices = Counter(r["case"]["device"] for r in snapshot)
    assert set(devices) == {"H200", "A100"}
    for family in ("softmax_rows", "softmax_rows_stashed", "softmax_rows_split", "softmax_cols_split",
                   "softmax_cols_short", "softmax_cols_short_vec",
                   "linear_relu_swap_tma", "linear_relu_wgmma_tma", "linear_relu_wgmma", "linear_relu_mma",
                   "linear_relu_gemv", "linear_relu_dmma", "attention_fwd_wgmma", "attention_fwd_mma",
                   "attention_decode", "attention_merge", "attention_fwd_simt"):
        assert kernels[family] > 0, family
