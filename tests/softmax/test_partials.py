"""The split-row halves (cufuse.ops.softmax.partials): each array's partial logsumexp, their
merge, the output pass. NumPy everywhere; the kernels of kernels/softmax/partials.cu against
them on the GPU, for every dtype and every layout the reduction can take."""
from __future__ import annotations

import numpy as np
import pytest

from cufuse import reference
from cufuse.ops.softmax import partials

BF16 = np.dtype("bfloat16")


def with_non_finite(rng, shape):
    """Random values with, in the first rows of the last axis, a row of -inf, a NaN, a +inf
    and every other entry -inf (as many of those as the array has rows)."""
    x = rng.standard_normal(shape) * 4
    flat = x.reshape(-1, shape[-1])
    for row, (where, value) in enumerate(((slice(None), -np.inf), (2, np.nan), (1, np.inf), (slice(None, None, 2), -np.inf))):
        if row < flat.shape[0]:
            flat[row, where] = value
    return x


@pytest.mark.parametrize("axes, cut", [((1,), 3), ((0,), 2), ((0, 1), 1)])
def test_numpy_partials_merge_to_the_whole_rows(rng, axes, cut):
    x = with_non_finite(rng, (6, 9))
    parts = np.split(x, [cut], axis=axes[-1]) if len(axes) == 1 else [x[:, :4], x[:, 4:]]
    merged = partials.merge_lse([partials.partial_lse(p, axes) for p in parts])
    whole = partials.partial_lse(x, axes)
    np.testing.assert_array_equal(np.isnan(merged), np.isnan(whole))
    np.testing.assert_allclose(merged, whole, rtol=1e-12, equal_nan=True)
    for log, oracle in ((False, reference.softmax), (True, reference.log_softmax)):
        np.testing.assert_allclose(partials.apply_lse(x, whole, axes, log), oracle(x, axes), rtol=1e-11, atol=1e-15,
                                   equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("shape, axes", [((37, 1000), (1,)), ((1000, 37), (0,)), ((5, 300, 7), (1,)), ((4, 5, 6), (0, 2)),
                                         ((3, 4097), (1,))])
def test_gpu_partials_equal_numpy(cp, rng, dtype, shape, axes):
    x = with_non_finite(rng, shape).astype(dtype)
    lse = partials.partial_lse(cp.asarray(x), axes)
    assert lse.dtype == (np.float64 if dtype == np.float64 else np.float32)
    expected = partials.partial_lse(x.astype(np.float64), axes)
    np.testing.assert_allclose(cp.asnumpy(lse), expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    tolerance = {np.dtype(np.float16): 2e-3, BF16: 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
    for log, oracle in ((False, reference.softmax), (True, reference.log_softmax)):
        got = partials.apply_lse(cp.asarray(x), cp.asarray(expected), axes, log)
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), oracle(x.astype(np.float64), axes),
                                   rtol=tolerance[np.dtype(dtype)], atol=tolerance[np.dtype(dtype)], equal_nan=True)
