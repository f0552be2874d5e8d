"""Reduced paged-attention grid for compute-sanitizer (every kernel and load path, small shapes).

    compute-sanitizer --tool memcheck  python tests/paged_attention/sanitize.py
    compute-sanitizer --tool racecheck python tests/paged_attention/sanitize.py

Exits 1 when a result misses the float64 oracle. A script, not a pytest module.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.paged_attention, cufuse

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cufuse import kv_append, reference  # noqa: E402
from tests.paged_attention.cases import (BF16, F16, F32, compare, make_pool, make_step, run_decreasing,  # noqa: E402
                                        to_device)

CASES = [
    # (dtype, D, Dv, Hq, Hkv, Nq, page size, lengths, layout, extras)
    (BF16, 128, 128, 4, 4, 1, 16, [900, 0, 5], "pshd", {}),  # 1 row warp, split + merge, length 0
    (F16, 64, 64, 8, 1, 4, 1, [700, 3], "phsd", {"window": (64, None)}),  # 2 row warps, page size 1
    (BF16, 256, 256, 8, 1, 9, 7, [520, 2], "phsd", {"softcap": 20.0}),  # 4 row warps, 2 row blocks
    (F16, 59, 40, 2, 1, 3, 16, [600, 11], "phsd", {"causal": False}),  # element loads
    (F32, 40, 24, 4, 2, 2, 5, [60, 0], "pshd", {}),  # simt
    # sinks (one logit a query head), folded into each sequence's first unit
    (BF16, 128, 128, 4, 2, 3, 16, [900, 0, 2], "phsd", {"sinks": np.float32([0.5, -1.0, 2.0, 0.0])}),
    (F32, 40, 24, 4, 2, 2, 5, [60, 0], "pshd", {"sinks": np.float32([1.0, -2.0])}),
]
PACKED = [
    # (dtype, D, Hq, Hkv, page size, queries, lengths, extras): cu_seqlens_q, query tiles and key splits
    (BF16, 128, 8, 2, 16, [70, 1, 0, 3], [900, 600, 5, 0], {}),
    (F16, 64, 4, 4, 1, [2, 40], [700, 40], {"window": (30, None), "sinks": np.float32([0.5, -1.0])}),
    (F32, 40, 4, 2, 5, [3, 0, 1], [60, 7, 0], {}),  # simt
]


def append_matches(k, v, k_new, v_new, table, lens, **packed) -> bool:
    """kv_append on the GPU (pages as the layout gives them) against the NumPy path, in place."""
    k_dev, v_dev = to_device(cupy, k), to_device(cupy, v)
    kv_append(k_dev, v_dev, cupy.asarray(k_new), cupy.asarray(v_new), cupy.asarray(table), cupy.asarray(lens),
              **{name: cupy.asarray(x) for name, x in packed.items()})
    reference.kv_append(k, v, k_new, v_new, table, lens, *packed.values())
    return np.array_equal(cupy.asnumpy(k_dev), k) and np.array_equal(cupy.asnumpy(v_dev), v)


def main() -> int:
    rng = np.random.default_rng(1234)
    failed = 0
    for case in CASES:
        dtype, d, dv, heads_q, heads_kv, n_q, page_size, lengths, layout, extras = case
        k, v, table, lens = make_pool(rng, lengths, page_size, heads_kv, d, dv, dtype, layout=layout,
                                      spare_tokens=2)
        q = rng.standard_normal((len(lengths), heads_q, n_q, d)).astype(dtype)
        failures = compare(cupy, q, k, v, table, lens, **extras)
        k_new, v_new = (rng.standard_normal((len(lengths), heads_kv, 2, dim)).astype(dtype) for dim in (d, dv))
        if not append_matches(k, v, k_new, v_new, table, lens):
            failures.append("kv_append differs from the NumPy path")
        print(("FAIL " if failures else "ok   ") + repr(case[:8]), *failures, flush=True)
        failed += bool(failures)
    for case in PACKED:
        dtype, d, heads_q, heads_kv, page_size, queries, lengths, extras = case
        q, k, v, table, lens, cu = make_step(rng, queries, lengths, page_size, heads_q, heads_kv, d, d, dtype)
        failures = compare(cupy, q, k, v, table, lens, cu_seqlens_q=cu, **extras)
        room = np.int32([min(n, 2) for n in lengths])  # new rows within each sequence's pages
        k_new, v_new = (rng.standard_normal((int(room.sum()), heads_kv, d)).astype(dtype) for _ in range(2))
        starts = np.concatenate([[0], np.cumsum(room)]).astype(np.int32)
        if not append_matches(k, v, k_new, v_new, table, lens - room, cu_seqlens_new=starts):
            failures.append("packed kv_append differs from the NumPy path")
        print(("FAIL " if failures else "ok   ") + repr(case[:7]), *failures, flush=True)
        failed += bool(failures)
    # decreasing cu_seqlens_q (outside the contract): rows unspecified, no access out of bounds; then a valid call
    q, k, v, table, lens, cu = run_decreasing(cupy, rng)
    failures = compare(cupy, q, k, v, table, lens, cu_seqlens_q=cu)
    print(("FAIL " if failures else "ok   ") + "decreasing cu_seqlens_q, then valid", *failures, flush=True)
    failed += bool(failures)
    cupy.cuda.get_current_stream().synchronize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
