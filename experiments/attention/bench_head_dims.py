"""The head-dim classes on the GPU: prefill at head dims off the 64 / 128 grid (32, 80,
96, 160, 192, 256, and 192 / 128; 32768 tokens x 16 heads a point) and the small grids (one
sequence x 32 heads x 4096 causal keys, D64 / D128), cufuse's default against its mma tile and
its wgmma tile forced through ``config=``, and SDPA's FLASH (FA2) and CUDNN backends, in TFLOP/s
of the pairs a row sees (2 x pairs x (D + Dv)). Prints a line a point, then each class's
minimum ratio.

    python experiments/attention/bench_head_dims.py [--budget-ms 20] [--quick]
"""
from __future__ import annotations

import argparse
import collections
import warnings

import cupy as cp
import ml_dtypes
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse.bench.cases import to_torch, torch_module
from cufuse.bench.timing import time_cuda_budget
from cufuse.ops.attention import select

TOKENS, HEADS = 32768, 16


def peers():
    torch = torch_module()
    if torch is None:
        return {}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def call(q, k, v, causal):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return call

    return {"fa2": sdpa(SDPBackend.FLASH_ATTENTION), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # SDPA's notes on the backends it cannot use
    dev = current_device_info()
    dtype = np.dtype(ml_dtypes.bfloat16)
    rng = cp.random.default_rng(0)
    others = peers()
    rows = []
    dims = ((32, 32), (80, 80), (96, 96), (160, 160), (192, 192), (256, 256), (192, 128))
    ns = (1024, 8192) if args.quick else (1024, 4096, 16384)
    points = [(f"D{d}/{dv}", TOKENS // n, HEADS, n, causal, d, dv)
              for (d, dv) in dims for n in ns for causal in (False, True)]
    points += [(f"small grid D{d}", 1, 32, 4096, True, d, d) for d in (64, 128)]
    print(f"{'point':32} {'default':>8} {'mma':>8} {'wgmma':>8} {'fa2':>8} {'cudnn':>8}  TFLOP/s")
    for cls, batch, heads, n, causal, d, dv in points:
        q, k = (rng.standard_normal((batch, heads, n, d), dtype=cp.float32).astype(dtype) for _ in range(2))
        v = rng.standard_normal((batch, heads, n, dv), dtype=cp.float32).astype(dtype)
        out = cp.empty((batch, heads, n, dv), dtype=dtype)
        flops = 2 * batch * heads * select.mean_visible_keys(n, n, causal) * n * (d + dv)
        bucket = select.head_dim_bucket(max(d, dv))
        mma = select.split_keys(select.prefill_tile(bucket, dev, n, n, causal), n, n, batch * heads, dev)
        wgmma_hd = min(h for h in select.WGMMA_PREFILL if max(d, dv) <= h)
        wgmma = next(t for keys, t in select.WGMMA_PREFILL[wgmma_hd]
                     if select.mean_visible_keys(n, n, causal) <= keys)
        tflops = {}
        for name, config in (("default", None), ("mma", mma), ("wgmma", wgmma)):
            ms = time_cuda_budget(lambda: cufuse.attention(q, k, v, causal=causal, out=out, config=config), [()],
                                  budget_ms=args.budget_ms)
            tflops[name] = flops / ms / 1e9
        tq, tk, tv = (to_torch(x) for x in (q, k, v))
        for name, call in others.items():
            try:
                ms = time_cuda_budget(lambda: call(tq, tk, tv, causal), [()], budget_ms=args.budget_ms)
                tflops[name] = flops / ms / 1e9
            except Exception:  # a backend that does not take this head dim
                tflops[name] = None
        label = f"D{d}/{dv} N{n} B{batch} H{heads} {'causal' if causal else 'full'}"
        cells = [f"{tflops.get(x):8.0f}" if tflops.get(x) else f"{'-':>8}" for x in
                 ("default", "mma", "wgmma", "fa2", "cudnn")]
        print(f"{label:32} {' '.join(cells)}", flush=True)
        rows.append((cls, tflops))
    minima = collections.defaultdict(dict)
    for cls, t in rows:
        for impl in ("default", "wgmma"):
            for peer in ("fa2", "cudnn", "mma"):
                if t.get(peer):
                    key = f"{impl}/{peer}"
                    minima[cls][key] = min(minima[cls].get(key, np.inf), t[impl] / t[peer])
    print(f"{'class':16} " + " ".join(f"{k:>13}" for k in ("default/fa2", "default/cudnn", "wgmma/fa2",
                                                            "wgmma/cudnn", "wgmma/mma")))
    for cls, m in minima.items():
        print(f"{cls:16} " + " ".join(f"{m[k]:13.2f}" if k in m else f"{'-':>13}" for k in
                                      ("default/fa2", "default/cudnn", "wgmma/fa2", "wgmma/cudnn", "wgmma/mma")))


if __name__ == "__main__":
    main()
