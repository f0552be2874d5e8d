"""The work units a resident slot gets (select.UNITS_PER_SLOT),
timed on the shapes of the paged grid's classes through ``config=``.

    python experiments/paged_attention/sweep_units.py [--factors 1,2,3]

Prints, per case, each factor's median time of back-to-back calls and its TB/s over the bytes
actually read (the bench's traffic model).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cufuse.bench.cases import PAGED_BASE, PAGED_MIXED, paged_case  # noqa: E402
from cufuse.ops.paged_attention.select import MIN_CHUNK, head_dim_bucket, mma_tile, row_warps_for  # noqa: E402

CASES = (
    {},
    {"page_size": 1},
    {"heads_q": 128},  # G 16
    {"n_q": 8},
    {"head_dim": 256},
    {"head_dim": 64},
    {"batch": 128, "length": 1024},
    {"batch": 1, "heads_kv": 1, "length": 1 << 20},
)


def median_ms(call, repeats=15, calls=10) -> float:
    """Median over ``repeats`` samples of ``calls`` back-to-back calls (the GPU stays busy:
    no per-call launch gap in the figure), per call."""
    import cupy

    for _ in range(3):
        call()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            call()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return sorted(times)[len(times) // 2]


def main() -> None:
    import cupy

    from cufuse import attention_paged
    from cufuse._core.device import current_device_info
    from cufuse.ops.paged_attention.mma import PagedMmaTile

    parser = argparse.ArgumentParser()
    parser.add_argument("--factors", default="1,2,3")
    args = parser.parse_args()
    factors = [int(f) for f in args.factors.split(",")]
    dev = current_device_info()
    cases = [paged_case(**{**PAGED_BASE, **change}, cls="units") for change in CASES]
    cases.append(paged_case(**{**PAGED_BASE, "page_size": 16}, lengths=PAGED_MIXED, cls="units"))
    for case in cases:
        q, kp, vp, bt, sl, _, _, out = case.make_inputs(cupy, cupy.random.default_rng(0))
        rows = q.shape[1] // kp.shape[1] * q.shape[2]
        base = mma_tile(head_dim_bucket(q.shape[3]), row_warps_for(rows), dev)
        line = []
        for factor in factors:
            slots = dev.sm_count * base.resident_blocks(dev)
            tile = PagedMmaTile(head_dim=base.head_dim, row_warps=base.row_warps, block_n=base.block_n,
                                stages=base.stages, target_units=slots * factor, min_chunk=MIN_CHUNK)
            ms = median_ms(lambda: attention_paged(q, kp, vp, bt, sl, out=out, config=tile))
            line.append(f"x{factor} {ms * 1e3:7.1f}us {case.traffic.min_bytes / ms / 1e9:5.2f}TB/s")
        print(f"{case.label:58s} " + "  ".join(line), flush=True)


if __name__ == "__main__":
    main()
