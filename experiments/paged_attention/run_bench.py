"""Time the paged grid of cufuse.bench.cases and print each
case's ratios and every class's minima.

    python experiments/paged_attention/run_bench.py [--quick] [--json FILE]

Ratios: cufuse paged's rate over the copy of the bytes actually read (K and V of each
sequence's keys once per KV head, q, out), over cufuse's dense attention on the same lengths,
and over SDPA FLASH / CUDNN on the dense caches.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cufuse.bench.cases import PAGED_BASE, paged_case, paged_cases, paged_class  # noqa: E402
from cufuse.bench.runner import Ceilings, measure  # noqa: E402
from cufuse.ops.paged_attention.mma import PagedMmaTile  # noqa: E402
from cufuse.ops.paged_attention.select import MIN_CHUNK, UNITS_PER_SLOT  # noqa: E402

PEERS = ("cufuse dense", "sdpa flash", "sdpa cudnn")
CLASS_ORDER = ("page size", "mixed", "group", "queries", "head dim", "batch x heads")
# (block_n, stages) of the D128 one-row-warp tile to compare with the default (64, 3)
TILE_VARIANTS = ((64, 3), (64, 2), (64, 4), (128, 2), (128, 3))


def time_variants(page_sizes=(16, 1)) -> None:
    """Median ms of the D128 decode tile variants (config=) on the base case: the evidence
    for the default (block_n, stages)."""
    import cupy

    from cufuse import attention_paged
    from cufuse._core.device import current_device_info

    dev = current_device_info()
    for page_size in page_sizes:
        case = paged_case(**{**PAGED_BASE, "page_size": page_size}, cls="variant")
        q, kp, vp, bt, sl, _, _, out = case.make_inputs(cupy, cupy.random.default_rng(0))
        line = []
        for block_n, stages in TILE_VARIANTS:
            probe = PagedMmaTile(head_dim=128, row_warps=1, block_n=block_n, stages=stages, target_units=0,
                                 min_chunk=MIN_CHUNK)
            tile = PagedMmaTile(head_dim=128, row_warps=1, block_n=block_n, stages=stages,
                                target_units=dev.sm_count * probe.resident_blocks(dev) * UNITS_PER_SLOT,
                                min_chunk=MIN_CHUNK)
            for _ in range(3):
                attention_paged(q, kp, vp, bt, sl, out=out, config=tile)
            times = []
            for _ in range(15):
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                attention_paged(q, kp, vp, bt, sl, out=out, config=tile)
                stop.record()
                stop.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, stop))
            ms = sorted(times)[len(times) // 2]
            line.append(f"BN{block_n}/ST{stages} {ms * 1e3:.1f}us {case.traffic.min_bytes / ms / 1e9:.2f}TB/s")
        print(f"variants S{page_size}: " + "  ".join(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--budget-ms", type=float, default=150.0)
    parser.add_argument("--variants", action="store_true", help="only time the D128 tile variants")
    args = parser.parse_args()
    if args.variants:
        time_variants()
        return 0
    ceilings = Ceilings()
    rows, minima = [], {}
    cases = sorted(paged_cases(args.quick), key=lambda c: CLASS_ORDER.index(paged_class(c)))
    for case in cases:
        result = measure(case, ceilings, budget_ms=args.budget_ms)
        paged_ms = result.ms["cufuse"]
        row = {"case": case.label, "status": result.status, "ms": result.ms,
               "tbps": result.rate("cufuse") if paged_ms else None,
               "of_copy": result.fraction_of_ceiling() if paged_ms else None}
        for peer in PEERS:
            row[peer] = result.ms[peer] / paged_ms if paged_ms and result.ms.get(peer) else None
        rows.append(row)
        cls = minima.setdefault(paged_class(case), {})
        for key in ("of_copy", *PEERS):
            if row[key] is not None:
                cls[key] = min(cls.get(key, float("inf")), row[key])
        peers = "  ".join(f"{p} {row[p]:.2f}x" if row[p] else f"{p} -" for p in PEERS)
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": rows, "minima": minima}, indent=1, default=str))
        print(f"{case.label:58s} {row['tbps'] or 0:5.2f} TB/s  of copy {row['of_copy'] or 0:.2f}  {peers}"
              f"  {'' if all(v == 'ok' for v in result.status.values()) else result.status}", flush=True)
    print("\nclass minima (paged speed-up over each; of copy = fraction of the measured copy rate)")
    for cls, values in minima.items():
        print(f"  {cls:14s} " + "  ".join(f"{k} {v:.2f}" for k, v in values.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "minima": minima, "ceilings": ceilings.as_dict()},
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
