"""Launch the default attention prefill kernel for Nsight Compute (B16 H16 N2048 D128 bf16).

ncu command (prefill, full then causal; the first two launches are the compile warm-up):
  ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
      -k regex:attention_fwd_mma --launch-skip 2 --launch-count 2 python3 bench/profile_attention.py
With ``--decode`` it launches the default decode (B8 H32 Nk8192 D128 bf16) instead:
  same sections, -k regex:attention_decode --launch-skip 1 --launch-count 1 ... profile_attention.py --decode

Each launch is preceded by nothing else of the same kernel name, so skip/count are exact;
the script prints the config it ran so the report can be matched to a tile.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import cupy  # noqa: E402

import cufuse  # noqa: E402
from cufuse._configs import attention as configs  # noqa: E402
from cufuse._configs import current_device_info  # noqa: E402
from cufuse.bench import cases  # noqa: E402


def main():
    rng = cupy.random.default_rng(0)
    dev = current_device_info()
    if "--decode" in sys.argv:
        batch, heads, n_k, d = cases.DECODE_BATCH, cases.DECODE_HEADS, 8192, cases.DECODE_HEAD_DIM
        q, k, v, _ = cases.decode_case(n_k).make_inputs(cupy, rng)
        print("decode config:", configs.select_config(1, n_k, d, d, batch * heads, q.dtype, dev, True))
        cufuse.attention(q, k, v)  # warm-up (compile): launch 0 of attention_decode
        cupy.cuda.get_current_stream().synchronize()
        cufuse.attention(q, k, v)  # profiled: launch 1
    else:
        batch, heads, n, d = 16, 16, 2048, 128
        q, k, v, _ = cases.attention_case(batch, heads, n, n, d, "bfloat16").make_inputs(cupy, rng)
        print("prefill config:", configs.select_config(n, n, d, d, batch * heads, q.dtype, dev))
        for causal in (False, True):  # warm-up (compile): launches 0, 1
            cufuse.attention(q, k, v, causal=causal)
        cupy.cuda.get_current_stream().synchronize()
        for causal in (False, True):  # profiled: launches 2 (full), 3 (causal)
            cufuse.attention(q, k, v, causal=causal)
    cupy.cuda.get_current_stream().synchronize()
    print("done")


if __name__ == "__main__":
    main()
