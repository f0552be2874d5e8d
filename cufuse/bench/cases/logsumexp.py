"""logsumexp: classes of reductions, against the read rate (a read-only stream)."""
from __future__ import annotations

import numpy as np

import cufuse

from ... import traffic
from .common import TORCH, Case, Impl, random_values, resolve_dtype, torch_inputs, torch_module

# Classes of reductions (rows x length, the reduced axis; lengths not powers of two in each):
# narrow, medium, long and very long last-axis rows, leading and middle axes, short columns
# (the last one's rows off the 16-byte vector), a transposed view.
LOGSUMEXP_SHAPES = (
    ((1048576, 32), -1), ((671088, 100), -1), ((262144, 250), -1),
    ((65536, 1000), -1), ((5461, 12288), -1), ((1342, 50000), -1),
    ((335, 200000), -1), ((128, 262144), -1), ((22, 3000000), -1), ((4, 4194304), -1),
    ((4096, 8192), 0), ((64, 4096, 256), 1),
    ((2, 4194304), 0), ((6, 3000000), 0), ((16, 1000000), 0), ((6, 3000001), 0),
    ((8192, 3000), None),
)
LOGSUMEXP_DTYPES = ("float16", "float32")


def logsumexp_class(shape, axis) -> str:
    """The class of a reduction: last-axis rows by length (softmax's bounds), leading and
    middle axes, short columns (2-16 elements strided over the columns), the whole array."""
    if axis is None:
        return "whole array"
    if axis not in (-1, len(shape) - 1):
        return "short columns" if shape[axis] <= 16 else "leading and middle axes"
    length = shape[-1]
    return ("narrow" if length <= 256 else "medium" if length <= 65536 else "long" if length <= 1 << 20
            else "very long")


def logsumexp_case(shape, dtype, axis=-1) -> Case:
    """A read-only stream: its ceiling is the read rate, so the case carries the read-only
    peer ``read (cupy sum)`` (x.sum over the same axis in x's dtype) beside torch and cupyx."""
    dt = resolve_dtype(dtype)
    n = int(np.prod(shape))
    reduced = n if axis is None else shape[axis]
    nbytes = n * dt.itemsize + (n // reduced) * dt.itemsize

    def make_inputs(xp, rng):  # no out argument: an empty last entry for the peers' convention
        return random_values(rng, shape, dtype, scale=3.0), None

    def torch_lse(x):
        torch = torch_module()
        return torch.logsumexp(x.reshape(-1), 0) if axis is None else torch.logsumexp(x, axis)

    def cupyx_lse(x, _):
        import cupyx.scipy.special

        return cupyx.scipy.special.logsumexp(x, axis=axis)

    label = "x".join(map(str, shape)) + ("" if axis == -1 else f" axis={axis}")
    return Case(
        op="logsumexp",
        label=label,
        dtype=dtype,
        traffic=traffic.Traffic(flops=3 * n, min_bytes=nbytes, unfused_bytes=4 * n * dt.itemsize),
        metric="TB/s",
        make_inputs=make_inputs,
        klass=logsumexp_class(shape, axis),
        impls=(
            Impl("cufuse", lambda x, _: cufuse.logsumexp(x, axis)),
            Impl("read (cupy sum)", lambda x, _: x.sum(axis=axis), peer=False),
            Impl("cupyx.scipy", cupyx_lse),
            Impl("torch.logsumexp", torch_lse, prepare=torch_inputs, needs=TORCH),
        ),
    )


def logsumexp_cases(quick: bool = False) -> list:
    if quick:
        return [logsumexp_case((65536, 1000), "float16"), logsumexp_case((4096, 8192), "float32", axis=0)]
    return [logsumexp_case(shape, dtype, axis) for dtype in LOGSUMEXP_DTYPES for shape, axis in LOGSUMEXP_SHAPES]
