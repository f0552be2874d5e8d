"""Short columns off the vector: the shifted vectors (softmax_cols_short_shifted, the default
up to 8 rows for 2- and 4-byte types) against a thread a column (softmax_cols_short, the
default beyond).

Run: ``python3 experiments/softmax/sweep_cols_short.py [substring]`` (stdout only). For each
(length, columns) shape reduced over axis 0 and dtype: the default (``select.choose``), the
scalar kernel (``ColsShortConfig``) and the shifted rung's launch bounds and kept exps (on
16 rows: a 16-row rung, which the default does not take), all through
``cufuse.softmax(..., config=)``, timed as ``sweep_softmax.py`` times them (fraction of a
device copy of the same bytes; ``grep '=>'`` gives the decision table).
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

from cufuse._core.device import current_device_info  # noqa: E402
from cufuse.ops.softmax import select as S  # noqa: E402
from cufuse.ops.softmax import select_cols  # noqa: E402
from cufuse.ops.softmax.cols import ColsShortConfig  # noqa: E402
from cufuse.ops.softmax.problem import SoftmaxProblem  # noqa: E402
from sweep_softmax import DTYPES, sweep_cases  # noqa: E402

# (length, columns): columns off the 16-byte vector (an odd column count).
SHAPES = ((6, 3000001), (16, 1000001), (3, 5000001), (2, 4194305))


def variants(length, columns, dtype, dev):
    problem = SoftmaxProblem(1, length, columns, length * columns, columns, 1, np.dtype(dtype), False)
    out = [("default", S.choose(problem, dev)), ("scalar", ColsShortConfig(threads=256, max_length=16))]
    shifted = select_cols.cols_short_shifted(min(length, 8), dtype)
    if shifted is not None:
        shifted = dataclasses.replace(shifted, max_length=max(shifted.max_length, length))
        out += [(f"shifted b{b}", dataclasses.replace(shifted, blocks_per_sm=b)) for b in (1, 2, 3, 4)]
        kept = "not kept" if shifted.exp_once else "kept"
        out.append((f"shifted, exps {kept}", dataclasses.replace(shifted, exp_once=not shifted.exp_once)))
    return out


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    dev = current_device_info()
    sweep_cases([(n, c, d, variants(n, c, DTYPES[d], dev)) for n, c in SHAPES for d in DTYPES
                 if not only or only in f"{n}x{c} {d}"], 0)


if __name__ == "__main__":
    main()
