"""One grouped-query decode call (warm-up + 2 more), for ncu / compute-sanitizer:

    python experiments/attention/decode_one_call.py G NQ D B HKV NK
"""
import sys

import cupy
import numpy as np

import cufuse

group, n_q, d, b, hkv, n_k = map(int, sys.argv[1:7])
rng = cupy.random.default_rng(0)
q = rng.standard_normal((b, hkv * group, n_q, d), dtype=np.float32).astype(np.float16)
k = rng.standard_normal((b, hkv, n_k, d), dtype=np.float32).astype(np.float16)
v = rng.standard_normal((b, hkv, n_k, d), dtype=np.float32).astype(np.float16)
for _ in range(3):
    out = cufuse.attention(q, k, v, enable_gqa=True)
cupy.cuda.Device().synchronize()
print(float(abs(out).sum()))
