"""Launch chosen benchmark cases once each inside an NVTX range, for Nsight Compute.

    ncu --nvtx --nvtx-include "profiled/" --section SpeedOfLight ... \
        python3 experiments/common/profile_cases.py [--impl NAME] KEY_SUBSTRING [...]

Every case of ``cufuse.bench.cases`` whose key (e.g. ``softmax 4x4194304 float16``)
contains one of the substrings runs its implementation (default: cufuse) once as a warm-up
(compile, scratch), then once inside the NVTX range ``profiled``: only those launches are
profiled. The script prints each case key and the kernels its call launched, in order, so
the report's kernels can be matched to the cases.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import cupy  # noqa: E402
from cupy.cuda import nvtx  # noqa: E402

from cufuse.bench.cases import cases_for  # noqa: E402
from cufuse.bench.runner import release_memory  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", action="append", help="implementation name (default: cufuse); repeatable")
    parser.add_argument("keys", nargs="+", help="substrings of case keys")
    args = parser.parse_args()
    names = args.impl or ["cufuse"]
    cases = [case for case in cases_for("all") if any(key in case.key for key in args.keys)]
    for case in cases:
        inputs = case.make_inputs(cupy, cupy.random.default_rng(0))
        for name in names:
            impl = case.impl(name)
            if impl is None or not impl.available():
                continue
            call_args = impl.prepare(inputs)
            impl.call(*call_args)
            cupy.cuda.Device().synchronize()
            print(f"{case.key} [{name}]", flush=True)
            nvtx.RangePush("profiled")
            impl.call(*call_args)
            nvtx.RangePop()
            cupy.cuda.Device().synchronize()
        del inputs
        release_memory()


if __name__ == "__main__":
    main()
