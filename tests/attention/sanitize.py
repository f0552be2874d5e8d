"""Reduced attention grid for compute-sanitizer (every kernel and load path, small shapes).

    compute-sanitizer --tool memcheck  python tests/attention/sanitize.py
    compute-sanitizer --tool racecheck python tests/attention/sanitize.py

Exits 1 when a result misses the float64 oracle (FlashAttention's tolerance rule). A script,
not a pytest module (no ``test_`` prefix).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.attention, cufuse

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cufuse._core.device import current_device_info  # noqa: E402
from tests.attention.oracle import (  # noqa: E402
    BF16, D64_LONG, D64_SHORT, D96_TILE, D256_TILE, F16, F32, OVERRIDE_CASES, STREAM_CASES, WGMMA_CASES,
    check_against_oracle, check_stream_case, check_wgmma, make_inputs, override_config, tma_twin)
from tests.attention.test_gqa_decode import gqa_inputs  # noqa: E402
from tests.attention.test_varlen import run as run_varlen  # noqa: E402
from tests.attention.test_window_softcap import CASES as WINDOW_CASES, case_config, case_inputs  # noqa: E402

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
# the unsplit long-key tile (odd Dv store)
OVERRIDES = [OVERRIDE_CASES[i] for i in (1, 2, 5, 7)]
# Hopper wgmma prefill (compute capability 9.0 only): several key tiles through the ring,
# causal ragged GQA, empty blocks (Nq > Nk), padded head dims, the 2-blocks-per-SM tile causal
# (warpgroups that skip), the block-ranges tile full (idle warpgroups), the D96 tile (1.5
# swizzle atoms, copy_rows store) and the D256 tile
WGMMA = [WGMMA_CASES[i] for i in (1, 3, 7, 9)] + [
    next(c for c in WGMMA_CASES if c[7] == D64_SHORT and c[4]),
    next(c for c in WGMMA_CASES if c[7] == D64_LONG and not c[4]),
    next(c for c in WGMMA_CASES if c[7] == D96_TILE),
    next(c for c in WGMMA_CASES if c[7] == D256_TILE),
]
# the same on the TMA-fed kernel (producer warpgroup, mbarrier ring, ping-pong turns)
WGMMA += [case[:7] + (tma_twin(case[7]),) + case[8:] for case in WGMMA[:8]]
# windows and softcap (test_window_softcap's table): a case a kernel family, with a forced key
# split where the table has one (splits of the window's span)
WINDOWED = [next((c for c in WINDOW_CASES if c.family == family and c.splits > 1),
                 next(c for c in WINDOW_CASES if c.family == family))
            for family in dict.fromkeys(c.family for c in WINDOW_CASES)]
# the streams on strided rows: D64 2 blocks/SM causal with keyless rows, D128 Dv < D causal
STREAMS = [STREAM_CASES[0], STREAM_CASES[4]]
# sinks (one logit a batch item) through the default kernels: split decode + merge, the packed
# decode tile, a prefill with keyless rows (Nq > Nk), SIMT; and the TMA-fed wgmma tile
SINK_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, config or None)
    (1, 3000, 128, 128, False, "mha", BF16, None),
    (2, 900, 64, 64, True, "gqa", F16, None),
    (130, 70, 128, 96, True, "mha", BF16, None),
    (37, 41, 40, 24, True, "gqa", F32, None),
    (200, 300, 64, 64, True, "mha", F16, "tma"),
]


# attention_varlen: both kernels, lengths past and short of a tile, a sequence without queries or keys
VARLEN_CASES = [
    # (lens_q, lens_k, heads_q, heads_kv, d, dtype, kernel, causal, sinks)
    ([0, 1, 65, 130], [5, 0, 65, 300], 4, 2, 64, F16, "wgmma", True, False),
    ([7, 64, 200], [7, 100, 200], 2, 1, 128, BF16, "wgmma", False, True),
    ([3, 0, 70], [40, 3, 70], 2, 2, 64, F16, "simt", True, True),
]
# packed grouped-query rows on the TMA tile (compute capability 9.0): split keys + merge, causal
# with a ragged last split and sinks; (group, Nq, Nk, D, causal)
PACKED_TMA_CASES = [(16, 8, 3001, 128, True), (8, 8, 1000, 64, False)]


def report(case, failures) -> bool:
    print(("FAIL " if failures else "ok   ") + repr(case), *failures, flush=True)
    return bool(failures)


def main() -> int:
    rng = np.random.default_rng(1234)
    failed = 0
    for case in CASES:
        n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1)
        failed += report(case, check_against_oracle(cupy, q, k, v, causal=causal, return_lse=return_lse,
                                                    use_out=use_out))
    dev = current_device_info()
    for case in OVERRIDES:
        n_q, n_k, d, dv, causal, mode, dtype = case[:7]
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
        config = override_config(case, q, k, dev)
        failed += report(case, check_against_oracle(cupy, q, k, v, causal=causal, return_lse=True, use_out=True,
                                                    config=config))
    for case in WGMMA if dev.has_wgmma else []:
        n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse = case
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1)
        failed += report(case, check_wgmma(cupy, q, k, v, tile, causal=causal, return_lse=return_lse))
    for case in STREAMS if dev.has_wgmma else []:
        failed += report(case, check_stream_case(cupy, rng, case))
    for c in WINDOWED:
        if c.family == "wgmma" and not dev.has_wgmma:
            continue
        q, k, v = case_inputs(rng, c)
        failed += report(c, check_against_oracle(cupy, q, k, v, causal=c.causal, return_lse=c.return_lse,
                                                 use_out=c.use_out, scale=c.scale, config=case_config(c, dev),
                                                 enable_gqa=c.enable_gqa, window=c.window, softcap=c.softcap))
    for case in SINK_CASES:
        n_q, n_k, d, dv, causal, mode, dtype, config = case
        if config == "tma":
            if not dev.has_wgmma:
                continue
            config = tma_twin(D64_SHORT)
        q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
        sinks = (2 * rng.standard_normal(int(np.prod(q.shape[:-2])))).astype(np.float32)
        failed += report(case, check_against_oracle(cupy, q, k, v, causal=causal, return_lse=True, use_out=True,
                                                    config=config, sinks=sinks))
    for case in PACKED_TMA_CASES if dev.has_wgmma else []:
        group, n_q, n_k, d, causal = case
        q, k, v = gqa_inputs(rng, 1, 2, group, n_q, n_k, d, BF16)
        sinks = rng.standard_normal(2 * group).astype(np.float32)
        failed += report(case, check_against_oracle(cupy, q, k, v, causal=causal, return_lse=True, use_out=True,
                                                    sinks=sinks))
    for case in VARLEN_CASES:
        lens_q, lens_k, heads_q, heads_kv, d, dtype, kernel, causal, sinks = case
        if kernel == "wgmma" and not dev.has_wgmma:
            continue
        try:
            run_varlen(cupy, rng, lens_q, lens_k, heads_q, heads_kv, d, d, dtype, kernel=kernel, sinks=sinks,
                       causal=causal)
            failures = []
        except AssertionError as exc:
            failures = [str(exc).strip().splitlines()[0][:200]]
        failed += report(case, failures)
    cupy.cuda.get_current_stream().synchronize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
