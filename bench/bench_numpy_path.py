"""The NumPy path on the CPU: cufuse's fast float64 path (cast to the result dtype, as the public
function returns it) next to ``scipy.special`` and the tiled oracle the public functions ran
before, for softmax, log_softmax and logsumexp over a small grid of shapes and axes. No GPU.

    pytest bench/ -k numpy_path [--benchmark-max-time 0.2] [--benchmark-json FILE]
"""
from __future__ import annotations

import numpy as np
import pytest

special = pytest.importorskip("scipy.special")
pytest.importorskip("pytest_benchmark")

from cufuse import reference  # noqa: E402
from cufuse.ops.logsumexp import numpy_path as logsumexp_path  # noqa: E402
from cufuse.ops.softmax import numpy_path as softmax_path  # noqa: E402

SHAPES = ((256, 1000), (4096, 1024), (64, 65536))
AXES = (-1, 0, None)
DTYPES = (np.float32, np.float64)


def _logsumexp_fast(x, axis):
    value, sign = logsumexp_path.logsumexp(x, axis)
    return np.where(sign < 0, np.nan, value)  # the public function's rule without return_sign


def _logsumexp_oracle(x, axis):
    value, sign = reference.logsumexp(x, axis)
    return np.where(sign < 0, np.nan, value)


IMPLS = {
    "softmax": {"cufuse": softmax_path.softmax, "scipy": special.softmax, "oracle": reference.softmax},
    "log_softmax": {"cufuse": softmax_path.log_softmax, "scipy": special.log_softmax, "oracle": reference.log_softmax},
    "logsumexp": {"cufuse": _logsumexp_fast, "scipy": special.logsumexp, "oracle": _logsumexp_oracle},
}


@pytest.mark.parametrize("impl", ["cufuse", "scipy", "oracle"])
@pytest.mark.parametrize("axis", AXES, ids=lambda a: f"axis={a}")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", list(IMPLS))
def test_numpy_path(benchmark, op, shape, dtype, axis, impl):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    fn = IMPLS[op][impl]
    benchmark.group = f"{op} {'x'.join(map(str, shape))} {np.dtype(dtype).name} axis={axis}"
    benchmark.extra_info.update(op=op, shape=shape, dtype=np.dtype(dtype).name, axis=axis, impl=impl)
    if impl == "scipy":
        result = benchmark(fn, x, axis=axis)
    else:  # the float64 result cast to x's dtype, as the public function delivers it
        result = benchmark(lambda: np.asarray(fn(x, axis)).astype(dtype, copy=False))
    assert np.asarray(result).dtype == dtype
