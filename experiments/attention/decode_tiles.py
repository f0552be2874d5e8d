"""Grouped-query decode on the packed mma tile against the TMA wgmma tile with packed rows, in
one run on one GPU (compute capability 9.0): the data behind select.WGMMA_PACKED_MIN_ROWS.

For each shape of the grouped-query decode grid (cufuse.bench.cases GQA_DECODE_SHAPES), the
call runs through ``config=`` on the mma tile of select.decode_tile and on the long-key TMA tile
of WGMMA_PREFILL with ``packed=True``, each with the wave model's key split, the same float16 data;
prints microseconds a call, the fraction of the copy rate over the bytes read (K and V once a KV
head, q and out) and the TMA tile's speedup, then the rows from which the TMA tile won.

    python experiments/attention/decode_tiles.py [--quick] [--budget-ms MS]
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse.bench.cases.attention import GQA_DECODE_SHAPES, GQA_MAX_KV_HEADS
from cufuse.bench.timing import copy_ceiling_tbps, time_cuda_budget
from cufuse.ops.attention import select


def configs(group, n_q, d, batch_count, n_k, dev):
    """(mma tile, TMA packed tile) of a call, each with its wave-model key split."""
    rows, bucket = group * n_q, select.head_dim_bucket(d)
    mma = select.split_packed_decode_keys(select.decode_tile(bucket, rows, dev), rows, n_k, batch_count, dev)
    return mma, select.split_keys(select.packed_wgmma_tile(d), rows, n_k, batch_count, dev)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the grid's quick shapes")
    parser.add_argument("--budget-ms", type=float, default=100.0)
    args = parser.parse_args()
    dev = current_device_info()
    copy = copy_ceiling_tbps(256 << 20) * 1e12
    shapes = [s for s in (GQA_DECODE_SHAPES[4:8] if args.quick else GQA_DECODE_SHAPES) if s[0] > 1]  # packing needs G > 1
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, copy {copy / 1e12:.2f} TB/s")
    print(f"{'G Nq D B Hkv Nk':28} {'rows':>5} {'mma us':>8} {'tma us':>8} {'mma copy':>8} {'tma copy':>8} {'tma x':>6}")
    wins = []
    rng = cupy.random.default_rng(0)
    for group, n_q, d, batch_heads, n_k in shapes:
        heads_kv = min(batch_heads, GQA_MAX_KV_HEADS)
        batch = batch_heads // heads_kv
        q = rng.standard_normal((batch, heads_kv * group, n_q, d), dtype=np.float32).astype(cupy.float16)
        k = rng.standard_normal((batch, heads_kv, n_k, d), dtype=np.float32).astype(q.dtype)
        v = rng.standard_normal((batch, heads_kv, n_k, d), dtype=np.float32).astype(q.dtype)
        out = cupy.empty_like(q)
        nbytes = 2 * k.nbytes + 2 * q.nbytes
        mma, tma = configs(group, n_q, d, batch_heads, n_k, dev)
        times = []
        for config in (mma, tma):
            def call(config=config):
                cufuse.attention(q, k, v, enable_gqa=True, out=out, config=config)
            times.append(time_cuda_budget(call, [()], budget_ms=args.budget_ms) * 1e3)
        label = f"G{group} Nq{n_q} D{d} B{batch} Hkv{heads_kv} Nk{n_k}"
        speedup = times[0] / times[1]
        wins.append((group * n_q, speedup))
        print(f"{label:28} {group * n_q:5} {times[0]:8.1f} {times[1]:8.1f} {nbytes / (times[0] * 1e-6) / copy:8.2f} "
              f"{nbytes / (times[1] * 1e-6) / copy:8.2f} {speedup:6.2f}")
    won = sorted({rows for rows, s in wins if s > 1.0})
    print("rows where the TMA tile won:", won or "none")


if __name__ == "__main__":
    main()
