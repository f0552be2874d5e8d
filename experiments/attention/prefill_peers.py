"""Prefill against FlashAttention-4's Hopper path and cuDNN, in one run on one GPU.

For each point: cufuse's default, its wgmma tiles through ``config=`` (the cp.async-fed tile
and TMA-fed candidates), FA4's ``flash_attn.cute.flash_attn_func`` on (B, N, H, D) and SDPA's
cuDNN backend on (B, H, N, D), the same random data, each timed with CUDA events after a
warm-up (``time_cuda_budget``). Prints TFLOP/s (4 B Hq Nq Nk D, halved for causal, scaled by
the visible fraction for windows) and each variant's ratio to FA4 and cuDNN; every cufuse
output is compared with FA4's (max |diff| over max |ref|), so a fast wrong variant shows.
Last, each class's minimum and median of the default against FA4 and cuDNN.
A peer that fails (missing, unsupported) prints one line and the run goes on.

Run on the GPU machine: ``source .peers/load.sh && python3 experiments/attention/prefill_peers.py
[--only SUBSTRING] [--json FILE] [--budget-ms MS]``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import cufuse  # noqa: E402
from cufuse._core.dtypes import BFLOAT16  # noqa: E402
from cufuse.bench.timing import time_cuda_budget  # noqa: E402
from cufuse.ops.attention import select  # noqa: E402
from cufuse.ops.attention.wgmma import FlashWgmmaTile as W  # noqa: E402

# (B, Hq, Hkv, N, D, causal, window): the prefill issue's table, then small grids and windows
POINTS = [
    (2, 16, 16, 8192, 128, False, None),
    (2, 16, 16, 8192, 128, True, None),
    (1, 32, 32, 16384, 128, True, None),
    (2, 32, 8, 4096, 128, True, None),
    (4, 16, 16, 4096, 64, True, None),
    (4, 32, 32, 2048, 96, True, None),
    (2, 16, 16, 4096, 256, False, None),
    (1, 32, 32, 4096, 128, True, None),
    (8, 16, 16, 2048, 128, False, None),
    (16, 16, 16, 1024, 64, False, None),
    (2, 16, 16, 8192, 128, True, (1024, 0)),
    (2, 16, 16, 8192, 128, True, (256, 0)),
    (2, 16, 16, 8192, 128, True, (4096, 0)),
    # the other points of anchors-h100.json: small grids, G 4 and 8 at long N, D96 full, D256 causal
    (8, 16, 16, 1024, 128, True, None),
    (4, 16, 16, 2048, 64, False, None),
    (1, 32, 8, 32768, 128, True, None),
    (1, 64, 8, 8192, 128, True, None),
    (2, 16, 16, 8192, 96, False, None),
    (2, 16, 16, 2048, 256, True, None),
    # short sequences (the D64 cp.async rung's keys, and where prologue and epilogue weigh)
    (32, 16, 16, 512, 64, True, None),
    (32, 16, 16, 1024, 64, False, None),
    (32, 16, 16, 512, 128, False, None),
    (16, 16, 16, 1024, 96, False, None),
    (64, 16, 16, 256, 256, False, None),
]
# Other tiles per tile head dim, beside the default (its TMA tile, or the cp.async tile up to 512
# keys a row at D64): other TMA shapes, and the cp.async tiles taken where tensor maps cannot
# describe the operands
_CP = {h: [t for _, t in rules] for h, rules in select.WGMMA_PREFILL_CP_ASYNC.items()}
TMA_CANDIDATES = {
    64: [W(head_dim=64, warpgroups=3, block_n=128, stages=2, tma=True),
         W(head_dim=64, warpgroups=2, block_n=128, stages=2, tma=True), *_CP[64]],
    96: [W(head_dim=96, warpgroups=2, block_n=128, stages=3, tma=True), *_CP[96]],
    128: [W(head_dim=128, warpgroups=3, block_n=64, stages=2, tma=True),
          W(head_dim=128, warpgroups=2, block_n=128, stages=3, tma=True), *_CP[128]],
    256: _CP[256],
}


def classes(p) -> list:
    """The prefill classes a point belongs to (D, N, B x H, G, mask, window)."""
    b, hq, hkv, n, d, causal, window = p
    n_class = "N <= 2K" if n <= 2048 else "N 4K-8K" if n <= 8192 else "N > 8K"
    mask = f"window {window[0]}" if window else ("causal" if causal else "full")
    return [f"D{d}", n_class, "B x H <= 64" if b * hq <= 64 else "B x H > 64", f"G{hq // hkv}", mask]


def label(p):
    b, hq, hkv, n, d, causal, window = p
    return (f"B{b} H{hq}/{hkv} N{n} d{d} {'causal' if causal else 'full'}"
            + (f" win{window[0]}" if window else ""))


def flops(p):
    b, hq, _, n, d, causal, window = p
    left, right = window or (None, None)
    right = 0 if causal else right
    i = np.arange(n, dtype=np.int64)  # Nq = Nk: row i sees [i - left, i + right] within [0, n)
    lo = np.zeros(n, np.int64) if left is None else np.maximum(0, i - left)
    hi = np.full(n, n - 1, np.int64) if right is None else np.minimum(n - 1, i + right)
    return 4.0 * b * hq * d * float(np.maximum(0, hi - lo + 1).sum())


def tile_name(t):
    return (f"{'tma' if t.tma else 'cp'} w{t.warpgroups} n{t.block_n} s{t.stages}"
            + ("" if t.wg_ranges else " blockranges") + (f" mb{t.min_blocks}" if t.min_blocks > 1 else ""))


def run_point(p, budget_ms, torch, fa4, default_only=False):
    b, hq, hkv, n, d, causal, window = p
    g = torch.Generator(device="cuda").manual_seed(0)
    q_t, k_t, v_t = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for h in (hq, hkv, hkv))
    # cufuse's layout (B, H, N, D), contiguous, the same values (bf16 crosses DLPack as int16 bits)
    q, k, v = (cupy.from_dlpack(x.transpose(1, 2).contiguous().view(torch.int16)).view(BFLOAT16)
               for x in (q_t, k_t, v_t))
    scale = 1 / math.sqrt(d)
    kwargs = dict(causal=causal, scale=scale, window=window, enable_gqa=hkv != hq)
    rows = {}

    def record(name, fn, out_of=None):
        try:
            ms = time_cuda_budget(fn, [()], budget_ms=budget_ms)
            rows[name] = {"ms": ms, "tflops": flops(p) / ms / 1e9}
            if out_of is not None:
                rows[name]["out"] = out_of()
        except Exception as exc:  # a peer or a variant that cannot run this point
            rows[name] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"}

    ref = None
    if fa4 is not None:
        win = (None, None) if window is None else window
        record("FA4", lambda: fa4(q_t, k_t, v_t, softmax_scale=scale, causal=causal, window_size=win))
        if "ms" in rows["FA4"]:
            got = fa4(q_t, k_t, v_t, softmax_scale=scale, causal=causal, window_size=win)
            got = got[0] if isinstance(got, tuple) else got
            ref = cupy.from_dlpack(got.transpose(1, 2).float().contiguous())
    if window is None:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qs, ks, vs = (x.transpose(1, 2).contiguous() for x in (q_t, k_t, v_t))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale,
                                                                        enable_gqa=hkv != hq)
        record("cuDNN", cudnn)
    bucket = min(h for h in select.WGMMA_PREFILL if d <= h)
    variants = [("cufuse", None)] + ([] if default_only else [(tile_name(t), t) for t in TMA_CANDIDATES[bucket]])
    out = cupy.empty_like(q)
    for name, config in variants:
        def call(config=config):
            return cufuse.attention(q, k, v, out=out, config=config, **kwargs)
        record(name, call, out_of=lambda: call().astype(cupy.float32))
        if ref is not None and "out" in rows[name]:
            rows[name]["error"] = float(cupy.abs(rows[name].pop("out") - ref).max() / cupy.abs(ref).max())
        rows[name].pop("out", None)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--json")
    parser.add_argument("--budget-ms", type=float, default=150.0)
    parser.add_argument("--default-only", action="store_true", help="time only cufuse's default, not the other tiles")
    args = parser.parse_args()
    import torch
    try:
        from flash_attn.cute import flash_attn_func as fa4
    except Exception as exc:
        print(f"FA4 not importable ({type(exc).__name__}): skipped")
        fa4 = None
    print(f"device: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    results = []
    for p in POINTS:
        if args.only not in label(p):
            continue
        rows = run_point(p, args.budget_ms, torch, fa4, args.default_only)
        results.append({"point": label(p), "rows": rows})
        peers = {k: rows[k].get("tflops") for k in ("FA4", "cuDNN") if k in rows}
        for name, row in rows.items():
            if "failed" in row:
                print(f"{label(p):34s} {name:18s} failed: {row['failed']}")
                continue
            ratios = " ".join(f"vs {k} {row['tflops'] / v:.2f}x" for k, v in peers.items() if v and k != name)
            err = f" err {row['error']:.1e}" if "error" in row else ""
            print(f"{label(p):34s} {name:18s} {row['tflops']:7.1f} TFLOP/s {ratios}{err}", flush=True)
    summary = {}  # class -> peer -> ratios of cufuse's default
    for p, result in zip((p for p in POINTS if args.only in label(p)), results):
        rows = result["rows"]
        for peer in ("FA4", "cuDNN"):
            if "tflops" in rows.get("cufuse", {}) and "tflops" in rows.get(peer, {}):
                for c in classes(p):
                    summary.setdefault(c, {}).setdefault(peer, []).append(rows["cufuse"]["tflops"] / rows[peer]["tflops"])
    print("class minimum (median) of cufuse's default against each peer")
    for c, peers in summary.items():
        print(f"  {c:14s} " + "  ".join(f"vs {peer} {min(r):.2f}x ({float(np.median(r)):.2f}x, {len(r)} points)"
                                       for peer, r in peers.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
