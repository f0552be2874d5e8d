"""logsumexp against a read-only stream of the same bytes (a device-wide CuPy sum of the
flattened array: CUB, one read), torch.logsumexp and cupyx, on the classes of
cufuse.bench.cases.LOGSUMEXP_SHAPES plus misaligned and strided views. CUDA events, median of
rotated inputs. Prints the table last; writes JSON to argv[1]."""
from __future__ import annotations

import json
import statistics
import sys

import cupy as cp
import numpy as np

import cufuse
from cufuse.bench.cases import LOGSUMEXP_SHAPES, resolve_dtype

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

EXTRA = (((671088, 99), -1), ((16384, 4096), "T"), ((8192, 8192), "::2"), ((2, 4000000), 0))


def timed(fn, inputs, reps=15):
    for x in inputs:
        fn(x)
    times = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for i in range(reps):
        x = inputs[i % len(inputs)]
        start.record()
        fn(x)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def view(x, how):
    if how == "T":
        return x.T, -1
    if how == "::2":
        return x[:, ::2], -1
    return x, how


def main():
    rows = []
    for dtype in ("float16", "bfloat16", "float32"):
        for shape, how in LOGSUMEXP_SHAPES + EXTRA:
            dt = resolve_dtype(dtype)
            n = int(np.prod(shape))
            copies = max(2, min(4, (256 << 20) // (n * dt.itemsize)))
            inputs = [view(cp.random.standard_normal(shape, dtype=cp.float32).astype(dt) * 3, how) for _ in range(copies)]
            axis = inputs[0][1]
            xs = [v for v, _ in inputs]
            nbytes = xs[0].size * dt.itemsize
            flat = [cp.ascontiguousarray(v) for v in xs] if how in ("T", "::2") else xs
            res = {"shape": "x".join(map(str, shape)) + ("" if how == -1 else f" {how}"), "dtype": dtype}
            res["cufuse"] = timed(lambda v: cufuse.logsumexp(v, axis), xs)
            res["read"] = timed(lambda v: v.sum(dtype=cp.float32), [f.ravel() for f in flat])
            res["read_view"] = timed(lambda v: v.sum(axis=axis, dtype=cp.float32), xs)
            if torch is not None:
                ts = [torch.from_dlpack(v) for v in xs]
                res["torch"] = timed(lambda v: torch.logsumexp(v.reshape(-1), 0) if axis is None else torch.logsumexp(v, axis), ts)
            want = cufuse.logsumexp(cp.asnumpy(xs[0]).astype(np.float64), axis)
            got = cp.asnumpy(cufuse.logsumexp(xs[0], axis)).astype(np.float64)
            res["max_rel_err"] = float(np.max(np.abs(got - want) / (1 + np.abs(want))))
            res["of_read"] = res["read"] / res["cufuse"]
            res["TBps"] = nbytes / res["cufuse"] / 1e9
            res["vs_torch"] = res["torch"] / res["cufuse"] if "torch" in res else None
            rows.append(res)
            del inputs, xs, flat
            cp.get_default_memory_pool().free_all_blocks()
            print(json.dumps(res), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)
    print(f"{'shape':>24} {'dtype':>8} {'TB/s':>6} {'of read':>8} {'vs torch':>8} {'read_view':>9} {'err':>8}")
    for r in rows:
        vt = f"{r['vs_torch']:.2f}" if r["vs_torch"] else "-"
        print(f"{r['shape']:>24} {r['dtype']:>8} {r['TBps']:6.2f} {r['of_read']:8.2f} {vt:>8} "
              f"{r['read'] / r['read_view']:9.2f} {r['max_rel_err']:8.1e}")


if __name__ == "__main__":
    main()
