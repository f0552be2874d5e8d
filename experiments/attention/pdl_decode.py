"""Decode calls with and without programmatic dependent launch, in one run on one GPU.

On compute capability 9.0 the decode kernels (attention_decode, the packed attention_fwd_mma,
paged_attention_mma) and their merges launch with PDL (docs/attention.md). This times the
same calls with the attribute, then with ``DeviceInfo.has_pdl`` forced off (every plan
re-planned), and prints microseconds a call, the ratio and the fraction of the copy rate
over the bytes read (K and V once a KV head, q and out), the copy timed in the same run.

    python experiments/attention/pdl_decode.py [--budget-ms MS]
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cufuse
from cufuse._core import device, driver, plans
from cufuse.bench.timing import copy_ceiling_tbps, time_cuda_budget

# (label, B, Hq, Hkv, cache length, queries, D)
DENSE = [
    ("gqa 16 x 32/8 x 4096", 16, 32, 8, 4096, 1, 128),
    ("gqa 64 x 32/8 x 2048", 64, 32, 8, 2048, 1, 128),
    ("gqa 1 x 32/8 x 131072", 1, 32, 8, 131072, 1, 128),
    ("gqa 16 x 32/8 x 8192, 4 queries", 16, 32, 8, 8192, 4, 128),
    ("mha 8 x 32 x 8192", 8, 32, 32, 8192, 1, 128),
]
PAGED = [("paged 16 x 32/8 x 4096, page 16", 16, 32, 8, 4096, 1, 128, 16)]


def dense_call(b, hq, hkv, n, nq, d):
    rng = cupy.random.default_rng(0)
    q = rng.standard_normal((b, hq, nq, d), dtype=np.float32).astype(cupy.float16)
    k = rng.standard_normal((b, hkv, n, d), dtype=np.float32).astype(cupy.float16)
    v = rng.standard_normal((b, hkv, n, d), dtype=np.float32).astype(cupy.float16)
    return (lambda: cufuse.attention(q, k, v, enable_gqa=hq != hkv)), 2 * k.nbytes + 2 * q.nbytes


def paged_call(b, hq, hkv, n, nq, d, page):
    rng = cupy.random.default_rng(0)
    pages_per_seq = -(-n // page)
    # vLLM's (P, S, Hkv, D) storage, passed as the logical (P, Hkv, S, D) pools
    k = rng.standard_normal((b * pages_per_seq, page, hkv, d), dtype=np.float32).astype(cupy.float16)
    v = rng.standard_normal(k.shape, dtype=np.float32).astype(cupy.float16)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    table = cupy.asarray(np.random.default_rng(0).permutation(b * pages_per_seq).reshape(b, pages_per_seq),
                         dtype=cupy.int32)
    lens = cupy.full((b,), n, dtype=cupy.int32)
    q = rng.standard_normal((b, hq, nq, d), dtype=np.float32).astype(cupy.float16)
    return (lambda: cufuse.attention_paged(q, k, v, table, lens)), 2 * b * n * hkv * d * 2 + 2 * q.nbytes


def timed(call, budget_ms: float) -> float:
    return time_cuda_budget(lambda: call(), [()], budget_ms=budget_ms) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-ms", type=float, default=200.0)
    args = parser.parse_args()
    cases = [(label, *dense_call(*shape)) for label, *shape in DENSE]
    cases += [(label, *paged_call(*shape)) for label, *shape in PAGED]
    copy = copy_ceiling_tbps(256 << 20) * 1e12
    with_pdl = [timed(call, args.budget_ms) for _, call, _ in cases]
    original = device.DeviceInfo.has_pdl
    device.DeviceInfo.has_pdl = property(lambda self: False)
    try:
        driver.PLANS = plans.PlanCache()  # re-plan every call without the attribute
        without = [timed(call, args.budget_ms) for _, call, _ in cases]
    finally:
        device.DeviceInfo.has_pdl = original
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, copy {copy / 1e12:.2f} TB/s")
    print(f"{'case':36} {'PDL us':>8} {'plain us':>9} {'plain/PDL':>9} {'PDL of copy':>11}")
    for (label, _, nbytes), t_pdl, t_plain in zip(cases, with_pdl, without):
        print(f"{label:36} {t_pdl:8.1f} {t_plain:9.1f} {t_plain / t_pdl:9.3f} {nbytes / (t_pdl * 1e-6) / copy:11.2f}")


if __name__ == "__main__":
    main()
