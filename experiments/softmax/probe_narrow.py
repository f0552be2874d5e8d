"""Narrow rows off the 16-byte vector: each sub-warp / warp rung forced on a few
shapes, float16 and float32, as a fraction of a device copy of the same bytes (CUDA events,
inputs rotated past the L2). Prints one line a (shape, dtype, config)."""
import math

import cupy as cp
import numpy as np

import cufuse
from cufuse._core.device import current_device_info
from cufuse.ops.softmax import select
from cufuse.ops.softmax.rows import RowsConfig


def ms_per_call(fn, sets, reps=20):
    fn(*sets[0])
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for k in range(reps):
        fn(*sets[k % len(sets)])
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / reps


def main():
    dev = current_device_info()
    for shape in ((671088, 100), (2097152, 7), (262144, 129), (262144, 255), (262144, 128)):
        for dtype in (np.float16, np.float32):
            sets = [(cp.random.standard_normal(shape, dtype=np.float32).astype(dtype), cp.empty(shape, dtype)) for _ in range(3)]
            copy = ms_per_call(lambda x, out: out.__setitem__(Ellipsis, x), sets)
            vs = 16 // np.dtype(dtype).itemsize
            default = select.choose_rows(shape[1], shape[0], dtype, dev, vs - math.gcd(shape[1], vs))
            candidates = [default] + [select.with_exp_once(c, dtype) for c in select.rows_ladder(dtype, dev)[:9]]
            for config in dict.fromkeys(candidates):
                try:
                    t = ms_per_call(lambda x, out: cufuse.softmax(x, -1, out=out, config=config), sets)
                except ValueError:
                    continue
                mark = " default" if config == default else ""
                print(f"{shape} {np.dtype(dtype).name:8s} g{config.group:<3d} v{config.vecs} eo{int(config.exp_once)} "
                      f"{copy / t:5.2f} of copy{mark}", flush=True)


if __name__ == "__main__":
    main()
