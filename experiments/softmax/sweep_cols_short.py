"""Short columns off the vector (issue 24): the shifted vectors (softmax_cols_short_shifted, the
default up to 8 rows) against a thread a column (softmax_cols_short, the default beyond).

Run: ``python3 experiments/softmax/sweep_cols_short.py [substring]`` (stdout only). For each
(length, columns) shape reduced over axis 0 and dtype: the default (``select.choose``), the
scalar kernel (``ColsShortConfig``) and the shifted rung's launch bounds and kept exps (on
16 rows: a 16-row rung), all
through ``cufuse.softmax(..., config=)``, timed as ``sweep_softmax.py`` times them (fraction of
a device copy of the same bytes; ``grep '=>'`` gives the decision table).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
from cufuse._core.device import current_device_info  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse.ops.softmax import select as S  # noqa: E402
from cufuse.ops.softmax.cols import ColsShortConfig, ColsShortShiftedConfig  # noqa: E402
from cufuse.ops.softmax.layout import SoftmaxProblem  # noqa: E402
from sweep_softmax import DTYPES, run_case  # noqa: E402

# (length, columns): columns off the 16-byte vector (an odd column count).
SHAPES = ((6, 3000001), (16, 1000001), (3, 5000001), (2, 4194305))


def variants(length, columns, dtype, dev):
    problem = SoftmaxProblem(1, length, columns, length * columns, columns, 1, np.dtype(dtype), False)
    default = S.choose(problem, dev)
    out = [("default", default), ("scalar", ColsShortConfig(256, 16))]
    shifted = S.cols_short_shifted(min(length, 8), dtype)
    if shifted is not None:
        shifted = dataclasses.replace(shifted, max_length=max(shifted.max_length, length))
        out += [(f"shifted b{b}", dataclasses.replace(shifted, blocks_per_sm=b)) for b in (1, 2, 3, 4)]
        out.append(("shifted, exps " + ("not kept" if shifted.exp_once else "kept"), dataclasses.replace(shifted, exp_once=not shifted.exp_once)))
    return out


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    dev = current_device_info()
    cases = [(n, c, d) for n, c in SHAPES for d in DTYPES if not only or only in f"{n}x{c} {d}"]
    t0 = time.time()
    specs = [cfg.spec(DTYPES[d], False) for n, c, d in cases for _, cfg in variants(n, c, DTYPES[d], dev)]
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(set(specs))} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}")
    for spec, error in failures:
        print(spec.expression, error[:400])
    for length, columns, dname in cases:
        run_case(length, columns, 0, dname, variants(length, columns, DTYPES[dname], dev))


if __name__ == "__main__":
    main()
