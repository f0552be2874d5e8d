"""The dispatch snapshot: for a broad grid of shapes, dtypes, layouts and both reference
devices (H200, A100), every op's pure planner decides exactly what the snapshot says (kernel,
grid, block, shared memory, arguments, tensor maps, scratch, PDL).

The snapshot, ``tests/data/dispatch.txt``, is one sorted line a case (``dispatch_record.line``).
A deliberate change of dispatch rewrites it in the same commit with

    pytest tests/core/test_dispatch.py --update-dispatch

so that its diff shows every decision that moved, a line each.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path

import pytest

from .dispatch_record import OPS, snapshot_lines

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "dispatch.txt"
KERNELS = Path(__file__).resolve().parents[2] / "kernels"


@pytest.fixture(scope="module")
def current():
    return snapshot_lines()


@pytest.fixture(scope="module")
def recorded(current, request):
    if request.config.getoption("--update-dispatch"):
        SNAPSHOT.write_text("\n".join(current) + "\n")
    return SNAPSHOT.read_text().splitlines()


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_case_plans_as_recorded(current, recorded, op):
    mine = [line for line in current if line.startswith(op + " ")]
    theirs = [line for line in recorded if line.startswith(op + " ")]
    diff = list(difflib.unified_diff(theirs, mine, "snapshot", "today", n=0, lineterm=""))
    assert not diff, (f"{sum(d.startswith('+') for d in diff) - 1} {op} lines differ from the snapshot "
                      "(rewrite it with --update-dispatch if the change is meant):\n" + "\n".join(diff[:8]))


def test_snapshot_covers_every_kernel_family_and_both_devices(recorded):
    kernels = Counter(launch.split("<")[0].split()[-1] for line in recorded
                      for launch in line.split(" -> ")[1].split(" | "))
    devices = Counter(line.split()[1] for line in recorded)
    assert set(devices) == {"H200", "A100"}
    assert {line.split()[0] for line in recorded} == set(OPS)
    for family in ("softmax_rows", "softmax_rows_stashed", "softmax_rows_split", "softmax_cols_split",
                   "softmax_cols_short", "softmax_cols_short_vec", "logsumexp_rows", "logsumexp_cols",
                   "linear_swap_tma", "linear_wgmma_tma", "linear_wgmma", "linear_mma",
                   "linear_gemv", "linear_dmma", "attention_fwd_wgmma", "attention_fwd_mma",
                   "attention_decode", "attention_merge", "attention_fwd_simt", "paged_attention_mma",
                   "paged_attention_simt", "attention_varlen_simt", "attention_varlen_wgmma_tma"):
        assert kernels[family] > 0, family


def test_snapshot_is_sorted_text_a_line_a_case(recorded):
    assert recorded == sorted(recorded) and all(" -> " in line for line in recorded)


def test_pdl_launches_meet_the_previous_grid_first(recorded):
    """A kernel launched with programmatic dependent launch may start while the grid before it
    still runs: its body must open with begin_dependent_grid() (griddepcontrol.wait), before it
    touches memory that grid writes."""
    pdl = {launch.split("<")[0].split()[-1] for line in recorded for launch in line.split(" -> ")[1].split(" | ")
           if " pdl_smem=" in launch}
    assert {"attention_decode", "attention_merge", "paged_attention_mma", "paged_attention_merge"} <= pdl
    sources = "\n".join(path.read_text() for path in sorted(KERNELS.rglob("*.cu")))
    for kernel in sorted(pdl):
        body = re.search(r"__global__[^{;]*?\b" + kernel + r"\([^{;]*\)\s*\{\s*(\S[^;]*;)", sources)
        assert body, f"{kernel}: no __global__ definition under kernels/"
        assert body.group(1) == "begin_dependent_grid();", f"{kernel} opens with {body.group(1)!r}"
