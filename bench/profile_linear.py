# Nsight Compute target for fused_linear_relu's default kernels (issue 4).
#
#   ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
#       --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
#       -k regex:linear_relu_ --launch-skip 3 --launch-count 3 python3 bench/profile_linear.py
#
# Launches matching linear_relu_, in order: 3 warm-ups (compile, split-K workspace), then
# the 3 profiled ones: (1) 8192^3 bf16, weight (K, N) -- linear_relu_mma, 128x256 GEMM
# tile; (2) 64 x 8192 x 8192 bf16, weight (K, N) -- linear_relu_mma, 64x128 split-K
# streaming tile; (3) 4096^3 float32 -- linear_relu_simt 128x128x8. No other kernel
# matches (inputs come from cupy.random and astype, whose kernels have other names).
"""Launch the default linear kernels at the three profiled shapes (see the header)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
import cufuse  # noqa: E402
from cufuse._configs import current_device_info  # noqa: E402
from cufuse._configs import linear as L  # noqa: E402
from cufuse._dtypes import BFLOAT16  # noqa: E402

SHAPES = [(8192, 8192, 8192, BFLOAT16), (64, 8192, 8192, BFLOAT16), (4096, 4096, 4096, np.float32)]  # M, K, N, dtype


def operands(m, k, n, dtype):
    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32).astype(dtype)
    w = (rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))).astype(dtype)
    b = rng.standard_normal((n,), dtype=np.float32).astype(dtype)
    return x, w, b, cupy.empty((m, n), dtype=dtype)


def main():
    sets = [operands(*shape) for shape in SHAPES]
    dev = current_device_info()
    for (m, k, n, dtype), (x, w, b, out) in zip(SHAPES, sets):
        config = L.choose_config(m, n, k, dtype, dtype == BFLOAT16, dev)
        print(f"{m}x{k}x{n} {np.dtype(dtype).name}: {config}", flush=True)
        cufuse.fused_linear_relu(x, w, b, out=out)  # warm-up launch (not profiled)
    cupy.cuda.get_current_stream().synchronize()
    for x, w, b, out in sets:  # the profiled launches
        cufuse.fused_linear_relu(x, w, b, out=out)
    cupy.cuda.get_current_stream().synchronize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
