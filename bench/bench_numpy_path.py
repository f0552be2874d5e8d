"""The NumPy path on the CPU: cufuse's public softmax, log_softmax and logsumexp on NumPy inputs
next to ``scipy.special`` on the same call, over a small grid of shapes, axes (-1, 0, None) and
dtypes (float32, float64), and logsumexp's keepdims, b= and return_sign. No GPU.

    python -m pytest bench/bench_numpy_path.py [--benchmark-max-time 0.2] [--benchmark-json FILE]
    python bench/bench_numpy_path.py   # docs/scipy.md's table: cufuse / SciPy, best of 40 turns each

The script form times the two calls of a case in turns and keeps each one's best, so that a
busy machine slows both alike; its summary gives, per op and dtype, the range of the ratios.
"""
from __future__ import annotations

import timeit

import numpy as np
import pytest

special = pytest.importorskip("scipy.special")
pytest.importorskip("pytest_benchmark")

import cufuse  # noqa: E402

SHAPES = ((256, 1000), (1000, 256), (64, 4096), (4096,), (32, 128, 128))
AXES = (-1, 0, None)
DTYPES = (np.float32, np.float64)
OPS = ("softmax", "log_softmax", "logsumexp")
# logsumexp's other arguments, on the first shape over axes -1 and 0 ("b": positive weights of a's dtype)
LOGSUMEXP_FORMS = (("keepdims",), ("b",), ("b", "return_sign"), ("return_sign",))


def grid():
    """(op, shape, dtype, axis, form) of every case, form a tuple of logsumexp's argument names."""
    cases = []
    for dtype in DTYPES:
        cases += [(op, shape, dtype, axis, ()) for shape in SHAPES for axis in AXES for op in OPS]
        cases += [("logsumexp", SHAPES[0], dtype, axis, form) for form in LOGSUMEXP_FORMS for axis in (-1, 0)]
    return cases


def name(case) -> str:
    op, shape, dtype, axis, form = case
    return " ".join([op, "x".join(map(str, shape)), np.dtype(dtype).name, f"axis={axis}", *form])


def call(case, impl):
    """A function of no arguments running ``impl`` ("cufuse" or "scipy") on the case's inputs."""
    op, shape, dtype, axis, form = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    kwargs = {"axis": axis, **{arg: rng.uniform(0.5, 2.0, shape).astype(dtype) if arg == "b" else True for arg in form}}
    fn = getattr(cufuse if impl == "cufuse" else special, op)
    return lambda: fn(x, **kwargs)


@pytest.mark.parametrize("impl", ["cufuse", "scipy"])
@pytest.mark.parametrize("point", grid(), ids=name)  # not "case": conftest.py parametrises that for the GPU ops
def test_numpy_path(benchmark, point, impl):
    op, shape, dtype, axis, form = point
    benchmark.group = name(point)
    benchmark.extra_info.update(op=op, shape=shape, dtype=np.dtype(dtype).name, axis=axis, form=list(form), impl=impl)
    result = benchmark(call(point, impl))
    assert np.asarray(result[0] if "return_sign" in form else result).dtype == dtype


def best_of_turns(f, g, turns=40, seconds=0.01):
    """The best time a call of f and of g, timed in turns (repeats of about ``seconds``)."""
    f(), g()  # first calls import and allocate
    timers = timeit.Timer(f), timeit.Timer(g)
    calls = max(1, int(seconds / max(timers[0].timeit(1), 1e-7)))
    best = [float("inf")] * 2
    for _ in range(turns):
        for i, timer in enumerate(timers):
            best[i] = min(best[i], min(timer.repeat(repeat=3, number=calls)) / calls)
    return best


def main():
    print("| case | cufuse us | SciPy us | cufuse / SciPy |\n|---|---:|---:|---:|")
    ratios = {}
    for case in grid():
        mine, theirs = best_of_turns(call(case, "cufuse"), call(case, "scipy"))
        ratios.setdefault((case[0], np.dtype(case[2]).name, bool(case[4])), []).append(mine / theirs)
        print(f"| {name(case)} | {mine * 1e6:.1f} | {theirs * 1e6:.1f} | {mine / theirs:.2f} |", flush=True)
    print("\n| op | dtype | cases | cufuse / SciPy |\n|---|---|---:|---|")
    for (op, dtype, forms), values in ratios.items():
        label = f"{op} (keepdims, b=, return_sign)" if forms else op
        print(f"| {label} | {dtype} | {len(values)} | {min(values):.2f}-{max(values):.2f} |")


if __name__ == "__main__":
    main()
