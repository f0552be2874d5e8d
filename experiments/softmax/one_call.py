"""One softmax call (a warm-up and two more) on a fresh rows x length array, for ncu or
compute-sanitizer; ``config``: a Python expression of a config class of
cufuse.ops.softmax (e.g. "SpanRowsConfig(256, 16, 8)"), default: the default selection.

    python experiments/softmax/one_call.py ROWS LENGTH DTYPE [CONFIG]
"""
import sys

import cupy
import numpy as np

import cufuse
from cufuse.ops.softmax.cols import *  # noqa: F401,F403  (config classes for CONFIG)
from cufuse.ops.softmax.rows import *  # noqa: F401,F403
from cufuse.ops.softmax.split import *  # noqa: F401,F403

rows, length, dtype = int(sys.argv[1]), int(sys.argv[2]), np.dtype(sys.argv[3])
config = eval(sys.argv[4]) if len(sys.argv) > 4 else None
x = (cupy.random.default_rng(0).standard_normal((rows, length), dtype=np.float32) * 3).astype(dtype)
out = cupy.empty_like(x)
for _ in range(3):
    cufuse.softmax(x, axis=-1, out=out, config=config)
cupy.cuda.Device().synchronize()
print(float(cupy.abs(out.astype(np.float32)).sum()) / rows)
