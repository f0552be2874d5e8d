"""What an epilogue activation costs fused_linear at compute-bound sizes: the same bf16 GEMM
(weight as PyTorch's (N, K).T) with each activation, milliseconds and the ratio to ReLU, and
the kernel each call launches. With the precise activations GELU measured 0.49x cuBLASLt where ReLU ran 0.88x.

    python experiments/linear/probe_activation_cost.py [--once]

``--once``: one call per activation at 4096 x 4096 x 11008 and nothing else, for a profiler
(``ncu --kernel-name regex:wgmma --section WarpStateStats python ... --once``: the stall
reasons of each activation's kernel).
"""
from __future__ import annotations

import sys

import cupy
import ml_dtypes
import numpy as np

import cufuse
from cufuse.bench.timing import time_cuda

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
BF16 = np.dtype(ml_dtypes.bfloat16)


def once() -> None:
    rng = cupy.random.default_rng(0)
    m, k, n = 4096, 4096, 11008
    x = rng.standard_normal((m, k), dtype=np.float32).astype(BF16)
    w = rng.standard_normal((n, k), dtype=np.float32).astype(BF16).T
    b = rng.standard_normal(n, dtype=np.float32).astype(BF16)
    out = cupy.empty((m, n), dtype=BF16)
    for act in ACTIVATIONS:
        cufuse.fused_linear(x, w, b, activation=act, out=out)
    cupy.cuda.runtime.deviceSynchronize()


def main() -> None:
    rng = cupy.random.default_rng(0)
    print(f"{'M x K x N':20s} {'activation':10s} {'ms':>7s} {'/ relu':>6s}  kernel")
    for m, k, n in ((4096, 4096, 11008), (512, 4096, 11008), (16, 4096, 11008)):
        x = rng.standard_normal((m, k), dtype=np.float32).astype(BF16)
        w = rng.standard_normal((n, k), dtype=np.float32).astype(BF16).T
        b = rng.standard_normal(n, dtype=np.float32).astype(BF16)
        out = cupy.empty((m, n), dtype=BF16)
        times = {}
        for act in ACTIVATIONS:
            times[act] = time_cuda(lambda: cufuse.fused_linear(x, w, b, activation=act, out=out), [()], repeat=20)
            traced = cufuse.trace(cufuse.fused_linear, x, w, b, activation=act, out=out)
            kernels = " ".join(node.describe() for node in traced.kernels)
            ratio = times[act] / times["relu"] if "relu" in times else 1.0
            print(f"{f'{m}x{k}x{n}':20s} {str(act):10s} {times[act]:7.3f} {ratio:6.2f}  {kernels}")


if __name__ == "__main__":
    once() if "--once" in sys.argv[1:] else main()
