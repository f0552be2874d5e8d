# Nsight Compute target for softmax's default kernels (issue 3).
#
#   ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
#       --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
#       -k regex:softmax_ --launch-skip 4 --launch-count 4 python3 bench/profile_softmax.py
#
# Launches matching softmax_, in order: 4 warm-ups (compile, split scratch), then the 4
# profiled ones, all float32 at benchmark shapes below the copy ceiling in run 7:
# (1) 4096 x 16384 -- softmax_rows, one 512-thread block per row (0.79x copy);
# (2) 1024 x 65536 -- softmax_rows_split, 2 blocks per row (0.65x in run 9; was the cluster kernel);
# (3) 128 x 262144 -- softmax_rows_split, 8 blocks per row, 7 shared-memory tiles (0.60x);
# (4) 16384 x 4096 axis=0 -- softmax_cols_cluster, 8 blocks per column tile (0.44x).
# No other kernel matches (inputs come from cupy.random, whose kernels have other names).
# With the argument ``v5`` the same shapes run softmax v5's candidates instead: (3) the
# pipelined split kernel, (4) 16-byte column vectors over a cluster of 8; (1) and (2), whose
# v5 candidates were the prefetching rows removed in softmax v7.1, run the defaults.
"""Launch the default (or v5 candidate) softmax kernels at the four profiled shapes (see the header)."""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
import cufuse  # noqa: E402
from cufuse._configs import current_device_info  # noqa: E402
from cufuse._configs import softmax as S  # noqa: E402

CASES = [((4096, 16384), -1), ((1024, 65536), -1), ((128, 262144), -1), ((16384, 4096), 0)]  # float32


def v5_config(rows, length, axis, dev):
    if axis == 0:
        return S.ColsVecConfig(256, 4, 4, 8)
    return dataclasses.replace(S.choose_rows(length, rows, np.float32, dev), pipelined=True)


def main():
    rng = cupy.random.default_rng(0)
    sets = [(rng.standard_normal(shape, dtype=np.float32) * 2, axis) for shape, axis in CASES]
    outs = [cupy.empty_like(x) for x, _ in sets]
    dev = current_device_info()
    v5 = sys.argv[1:] == ["v5"]
    chosen = []
    for (x, axis), out in zip(sets, outs):
        rows, length = x.shape
        if v5:
            config = v5_config(rows, length, axis, dev)
        else:
            config = S.choose_cols(rows, length, x.dtype, dev, True) if axis == 0 else S.choose_rows(length, rows, x.dtype, dev)
        print(f"{rows}x{length} axis={axis}: {config}", flush=True)
        chosen.append(config)
        cufuse.softmax(x, axis=axis, out=out, config=config)  # warm-up launch (not profiled)
    cupy.cuda.get_current_stream().synchronize()
    for (x, axis), out, config in zip(sets, outs, chosen):  # the profiled launches
        cufuse.softmax(x, axis=axis, out=out, config=config)
    cupy.cuda.get_current_stream().synchronize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
