"""Reduced attention grid for compute-sanitizer (every kernel and load path, small shapes).

    compute-sanitizer --tool memcheck  python tests/sanitize_attention.py
    compute-sanitizer --tool racecheck python tests/sanitize_attention.py

Exits 1 when a result misses the float64 oracle (FlashAttention's tolerance rule).
"""
from __future__ import annotations

import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from test_attention import (  # noqa: E402
    BF16, F16, F32, OVERRIDE_CASES, PERSISTENT_CASES, STREAM_CASES, WGMMA_CASES, check_against_oracle,
    check_stream_case, check_wgmma, make_inputs, override_config)

from cufuse._configs import current_device_info  # noqa: E402

CASES = [
    # (n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out)
    (113, 203, 64, 64, True, "mha", F16, True, True),  # prefill, default D64 tile (3 blocks/SM), 16-byte loads
    (130, 70, 128, 96, False, "gqa", BF16, False, False),  # prefill, short-key D128 tile (2 blocks/SM), Dv < D
    (40, 30, 64, 64, False, "mha", BF16, True, True),  # one key tile: unsplit, O staged in smem, 16-byte stores
    (40, 90, 59, 59, True, "mqa", F16, True, False),  # odd head dim: scalar loads
    (1, 3000, 128, 128, False, "mha", BF16, True, True),  # register decode (default), split keys + merge
    (2, 3000, 59, 59, False, "mha", BF16, True, False),  # unaligned rows: MMA decode tile, split keys
    (5, 3, 256, 256, True, "mha", BF16, True, False),  # Nq > Nk causal: empty rows
    (200, 2100, 32, 32, True, "mha", F16, False, False),  # prefill split keys
    (37, 41, 40, 24, True, "gqa", F32, True, True),  # SIMT
]
# config overrides: register decode kernel (auto and forced splits), branch-free MMA tile,
# pipelined QK^T (causal diagonal; key splits), the unsplit long-key tile (odd Dv store)
OVERRIDES = [OVERRIDE_CASES[i] for i in (1, 2, 5, 7, 10, 11)]
# Hopper wgmma prefill (compute capability 9.0 only; the default tiles skip per warpgroup):
# several key tiles through the ring, causal ragged GQA, empty blocks (Nq > Nk), padded head
# dims, 1 warpgroup x 4 blocks/SM (causal), the ordered turns (named barriers) with 3
# warpgroups causal, 2 blocks/SM full (idle warpgroups), D128 2 warpgroups causal
WGMMA = [WGMMA_CASES[i] for i in (1, 3, 7, 9, 15, 17, 20, 31)]
# persistent (the Q double buffer, the ring running on across items, a keyless item per head):
# D128 3 warpgroups causal, 180 items on 132 blocks
PERSISTENT = [PERSISTENT_CASES[4]]
# attention v8 streams on strided rows: D64 2 blocks/SM causal with keyless rows, D128 Dv < D causal
STREAMS = [STREAM_CASES[0], STREAM_CASES[4]]


def main() -> int:
    rng = np.random.default_rng(1234)
    failed = 0
    for case in CASES:
        n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1)
        failures = check_against_oracle(cupy, q, k, v, causal=causal, return_lse=return_lse, use_out=use_out)
        print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
        failed += bool(failures)
    dev = current_device_info()
    for case in OVERRIDES:
        n_q, n_k, d, dv, causal, mode, dtype = case[:7]
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
        config = override_config(case, q, k, dev)
        failures = check_against_oracle(cupy, q, k, v, causal=causal, return_lse=True, use_out=True, config=config)
        print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
        failed += bool(failures)
    for case in WGMMA if dev.has_wgmma else []:
        n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse = case
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1)
        failures = check_wgmma(cupy, q, k, v, tile, causal=causal, return_lse=return_lse)
        print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
        failed += bool(failures)
    for case in PERSISTENT if dev.has_wgmma else []:
        n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse, batch, heads = case
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, batch=batch, heads=heads)
        failures = check_wgmma(cupy, q, k, v, tile, causal=causal, return_lse=return_lse)
        print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
        failed += bool(failures)
    for case in STREAMS if dev.has_wgmma else []:
        failures = check_stream_case(cupy, rng, case)
        print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
        failed += bool(failures)
    cupy.cuda.get_current_stream().synchronize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
