"""softmax's column kernels on the GPU against the float64 oracle: the reduced axis strided
over a contiguous inner axis. The two-read kernels (scalar and 16-byte vectors, with and
without clusters), the persistent column split (its chosen and forced grids, several
strips a block, non-finite and misaligned columns, the reused scratch) and the short-column
kernels (a thread a column, or a 16-byte vector of columns)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cufuse
from cufuse._core.plans import SCRATCH
from cufuse.ops.softmax import select
from cufuse.ops.softmax.cols import ColsSplitConfig, ColsVecConfig
from cufuse.ops.softmax.layout import vector_size
from cufuse.ops.softmax.plan import plan_softmax

from ..conftest import allocations, poisoned
from .oracle import (BF16, FN, check, clusters, device, graph_nodes, precompile_once, random, rows_for_online_merge,
                     rows_with_non_finite)

COLS_VEC = {1: ColsVecConfig(256, 4, 4, 1), 8: ColsVecConfig(256, 4, 4, 8)}  # sweep candidates (4 lanes)
SPLIT_DTYPES = (np.float16, BF16, np.float32)
# Column lengths off the tile rows (16384 = 64 tiles of 256 rows, 12289, 3001, 257: a tile and a
# row), columns off the strip (4104: 64 float16 strips and 8 columns; 520; 40 and 72 ragged), a
# middle axis (outer > 1).
SPLIT_SHAPES = [((16384, 72), 0), ((12289, 40), 0), ((3001, 520), 0), ((257, 4104), 0), ((5, 1031, 72), 1)]


def _split_for(shape, axis, dtype):
    """The default column split of x of ``shape`` reduced over ``axis``."""
    length = shape[axis]
    return select.choose_cols_split(length, int(np.prod(shape)) // length, dtype, device())


def _split_forced(dtype, blocks_per_strip, strips_per_wave, tiles):
    """The dtype's split geometry with a forced grid: parts of ``tiles`` tiles."""
    geometry = select._COLS_SPLIT[np.dtype(dtype)][0]
    probe = ColsSplitConfig(*geometry, 1, 1, 0, 0)
    return ColsSplitConfig(*geometry, blocks_per_strip, strips_per_wave, tiles * probe.tile_rows,
                           tiles - int(probe.register_tile))


@pytest.fixture
def forced_kernels(cp):
    precompile_once("cols", lambda: [(c, d) for c in COLS_VEC.values() for d in (np.float16, np.float32)]
                    + [(_split_forced(d, 1, 1, 1), d) for d in SPLIT_DTYPES])


@pytest.mark.parametrize("log", [False, True])
def test_leading_axis_reduces_down_columns(cp, rng, log):
    # Column lengths on both sides of the cluster threshold, ragged column counts.
    for shape in [(16384, 33), (2048, 100), (2047, 100), (1000, 1025), (3, 4097), (1, 64)]:
        x = random(cp, rng, shape, np.float32)
        check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype))
    x = random(cp, rng, (4, 777, 70), np.float16)  # middle axis: outer > 1
    check(cp, x, (1,), log)


@pytest.mark.parametrize("log", [False, True])
def test_cols_vec(cp, rng, forced_kernels, log):
    """16-byte column vectors: with and without a cluster (column lengths 2048 / 2047 and a
    prime), a ragged last column tile, a middle axis (outer > 1), a misaligned base (scalar
    accesses), non-finite columns, float16 and float32; and the refusal where the layout
    does not allow vectors."""
    sizes = (1, 8) if clusters(8) else (1,)
    for dtype, shape in [(np.float16, (2048, 40)), (np.float16, (2047, 64)), (np.float32, (3001, 36)), (np.float32, (2048, 4))]:
        for c in sizes:
            x = random(cp, rng, shape, dtype)
            check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=COLS_VEC[c])
    config = COLS_VEC[sizes[-1]]
    x = random(cp, rng, (4, 777, 64), np.float16)
    check(cp, x, (1,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
    flat = random(cp, rng, (2049 * 32 + 1,), np.float32)
    misaligned = flat[1:].reshape(2049, 32)
    check(cp, misaligned, (0,), log, out=poisoned(cp, misaligned.shape, misaligned.dtype), config=config)
    for dtype in (np.float16, np.float32):
        x = cp.ascontiguousarray(cp.asarray(rows_with_non_finite(rng, 2500, dtype)).T)  # 2500 x 7
        x = cp.concatenate([x, x[:, :1]], axis=1)  # 8 columns: one float16 vector, two float32
        check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
    with pytest.raises(ValueError, match="config"):
        FN[log](random(cp, rng, (100, 70), np.float32), axis=0, config=config)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_column_dispatch_by_default(cp, rng, dtype, log):
    """The default column dispatch: the split where it holds a vectorizable column (from one
    tile to what its grid holds), the two-read kernels below one tile, for misaligned layouts
    and for float64."""
    for shape, axis in [((255, 40), 0), ((511, 40), 0), ((1031, 72), 0), ((12289, 40), 0), ((24577, 8), 0),
                        ((3, 777, 40), 1)]:
        x = random(cp, rng, shape, dtype)
        check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype))


@pytest.mark.parametrize("dtype", SPLIT_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_split(cp, rng, forced_kernels, dtype, log):
    """The chosen configs; then the same with 1-2 strip slots, so that each block walks several
    strips (the refill of the next strip, the partials' parity, ragged strips between full ones);
    columns shorter than a block's part (a part partly or wholly empty)."""
    for shape, axis in SPLIT_SHAPES:
        x = random(cp, rng, shape, dtype)
        config = _split_for(shape, axis, dtype)
        check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype), config=config)
        few_slots = dataclasses.replace(config, strips_per_wave=min(2, config.strips_per_wave))
        check(cp, x, (axis,), log, out=poisoned(cp, x.shape, x.dtype), config=few_slots)
    for length in (300, 100):
        x = random(cp, rng, (length, 136), dtype)
        check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=_split_forced(dtype, 2, 2, 2))


@pytest.mark.parametrize("dtype", SPLIT_DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_cols_split_non_finite_and_misaligned(cp, rng, forced_kernels, dtype, log):
    """Non-finite columns (NaN, +inf, all -inf, ...) and the online merge across tiles and parts
    (-inf over the first 3/4 of a column, growing and falling maxima, NaN at row 9000, +inf in
    the last row) beside finite ones, one strip partly inactive; x and out not 16-byte aligned
    (scalar loads, shared-memory tiles filled synchronously), several strips a block."""
    length = 16385
    columns = np.concatenate([rows_with_non_finite(rng, length, dtype).T, rows_for_online_merge(rng, length, dtype).T], axis=1)
    host = np.concatenate([columns, (rng.standard_normal((length, 32 - 14)) * 3).astype(dtype)], axis=1)
    x = cp.asarray(host)
    check(cp, x, (0,), log, out=poisoned(cp, x.shape, x.dtype), config=_split_for(x.shape, 0, dtype))
    flat = random(cp, rng, (4099 * 200 + 1,), dtype)
    misaligned = flat[1:].reshape(4099, 200)
    out = poisoned(cp, (4099 * 200 + 1,), dtype)[1:].reshape(4099, 200)
    config = dataclasses.replace(_split_for(misaligned.shape, 0, dtype), strips_per_wave=1)
    check(cp, misaligned, (0,), log, out=out, config=config)


def test_cols_split_one_launch_no_allocation(cp, rng, forced_kernels):
    """One kernel node and no allocation: the scratch is allocated by the first call only."""
    x = random(cp, rng, (4099, 520), np.float16)
    out = cp.empty_like(x)
    config = _split_for(x.shape, 0, np.float16)
    call = lambda: cufuse.softmax(x, axis=0, out=out, config=config)  # noqa: E731
    call()
    cp.cuda.Device().synchronize()
    assert len(allocations(cp, call)[1]) == 0
    dot, nodes = graph_nodes(cp, call)
    assert "softmax_cols_split" in dot and nodes == 1, dot


def test_cols_split_scratch_is_reused_and_left_armed(cp, rng, forced_kernels):
    """Back-to-back calls on two streams, different grids: each call relies on the previous one
    of its stream having left the arrival counters at zero (checked after each)."""
    stream = cp.cuda.Stream(non_blocking=True)
    for shape, slots in (((3001, 520), 9), ((3001, 520), 2), ((16384, 72), 1), ((16384, 72), 2)):
        x = random(cp, rng, shape, np.float32)
        config = dataclasses.replace(_split_for(shape, 0, np.float32), strips_per_wave=slots)
        check(cp, x, (0,), False, out=poisoned(cp, x.shape, x.dtype), config=config)
        with stream:
            check(cp, x, (0,), True, config=config)
        cp.cuda.Device().synchronize()
        request = plan_softmax(shape, (shape[1], 1), np.dtype(np.float32), (0,), False, device(), config).scratch
        for s in (cp.cuda.get_current_stream(), stream):
            _, counters = SCRATCH.get(request, s)
            assert not bool(counters.any())


def _short_kernel(x, axis, log):
    """The kernel the default plan runs for x (cupy) reduced over ``axis``."""
    strides = tuple(s // x.dtype.itemsize for s in x.strides)
    (launch,) = plan_softmax(x.shape, strides, x.dtype, (axis,), log, device()).launches
    return launch.spec.name


@pytest.fixture
def short_kernels(cp):
    precompile_once("short", lambda: [(c, d) for d in (np.float16, BF16, np.float32, np.float64)
                                      for c in [select._COLS_SHORT] + [select.cols_short_vec(n, d) for n in (4, 8, 16)]
                                      + [select.cols_short_shifted(n, d) for n in (4, 8)] if c is not None])


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_short_columns(cp, rng, short_kernels, dtype, log):
    """Columns of 1 to 16 elements: softmax_cols_short_vec (a thread a 16-byte vector of
    columns, rungs of 4, 8, 16 rows) where the column vectors are aligned -- column counts not
    a multiple of a block's 256 vectors, a short middle axis --; where the column count or a
    stride is off the vector softmax_cols_short_shifted (2- and 4-byte types, up to 8 rows) or
    softmax_cols_short; and a strided view; out poisoned."""
    vs = vector_size(dtype)
    for length in range(1, 17):
        shifted = "softmax_cols_short" if np.dtype(dtype).itemsize == 8 or length > 8 else "softmax_cols_short_shifted"
        for columns, kernel in ((300 * vs, "softmax_cols_short_vec"), (300 * vs + 3, shifted), (5 * vs + 3, shifted)):
            x = random(cp, rng, (length, columns), dtype)
            assert length == 1 or _short_kernel(x, 0, log) == kernel  # (one row: the size-1 axis drops, a row problem)
            check(cp, x, 0, log, out=poisoned(cp, x.shape, x.dtype))
    x = random(cp, rng, (13, 300 * vs), dtype).T  # the last axis of a transposed view: a new out in x's order,
    check(cp, x, 1, log)  # a column problem of 13 rows
    x = random(cp, rng, (5, 9, 24 * vs), dtype)  # a short middle axis (outer > 1)
    assert _short_kernel(x, 1, log) == "softmax_cols_short_vec"
    check(cp, x, 1, log, out=poisoned(cp, x.shape, x.dtype))
    x = random(cp, rng, (5, 7, 24 * vs + 1), dtype)[:, :, : 24 * vs]  # rows padded off the vector
    assert _short_kernel(x, 1, log) == ("softmax_cols_short" if np.dtype(dtype).itemsize == 8 else "softmax_cols_short_shifted")
    check(cp, x, 1, log, out=poisoned(cp, x.shape, x.dtype))
    view = random(cp, rng, (12, 2002), dtype)[:, ::2]
    check(cp, view, 0, log, out=poisoned(cp, view.shape, view.dtype))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
@pytest.mark.parametrize("log", [False, True])
def test_short_columns_shifted(cp, rng, short_kernels, dtype, log):
    """softmax_cols_short_shifted on both rungs (4 and 8 rows): x and out bases off 16 bytes and every row at
    another distance past a boundary (sl odd), input rows off the vector over aligned output
    rows and the reverse; outer indices that end inside a warp (the neighbours' shuffles and
    the lanes that load their second vector themselves), inner axes of less than a vector and
    of a partial last vector, outer > 1 with an outer stride off the vector, poisoned outs
    inside larger buffers (nothing written outside), and non-finite columns among finite ones."""
    vs = vector_size(dtype)
    for length in (2, 3, 5, 8):
        config = select.cols_short_shifted(length, dtype)
        flat = random(cp, rng, (length * (1000 * vs + 1) + 1,), dtype)
        x = flat[1:].reshape(length, 1000 * vs + 1)  # base and rows off 16 bytes
        out = poisoned(cp, (x.size + 2,), dtype)[1:-1].reshape(x.shape)
        check(cp, x, 0, log, out=out, config=config)
        aligned_out = random(cp, rng, (length, 64 * vs + 1), dtype)[:, : 64 * vs]  # input rows off, output rows on
        check(cp, aligned_out, 0, log, out=poisoned(cp, aligned_out.shape, dtype), config=config)
        aligned_in = random(cp, rng, (length, 64 * vs), dtype)  # the reverse: x aligned, out based off 16 bytes
        out = poisoned(cp, (length * 64 * vs + 3,), dtype)[3:].reshape(aligned_in.shape)
        check(cp, aligned_in, 0, log, out=out, config=config)
        for inner in (777, 13, vs - 1, 31 * vs + 1):  # outer indices ending mid-warp; less than a vector
            x = random(cp, rng, (41, length, inner + 3), dtype)[:, :, 3:]
            check(cp, x, 1, log, out=poisoned(cp, x.shape, dtype), config=config)
    x = random(cp, rng, (7, 4096 + 1), dtype)
    x[1, 5], x[2, 6], x[:, 7], x[3, 8], x[:, 9] = np.nan, np.inf, -np.inf, -np.inf, np.inf
    assert _short_kernel(x, 0, log) == "softmax_cols_short_shifted"
    check(cp, x, 0, log, out=poisoned(cp, x.shape, dtype))
    with pytest.raises(ValueError, match="holds columns of up to 4 elements, got 5"):
        cufuse.softmax(random(cp, rng, (5, 301), dtype), axis=0, config=select.cols_short_shifted(4, dtype))
    assert select.cols_short_shifted(9, dtype) is None and _short_kernel(random(cp, rng, (9, 301), dtype), 0, log) == "softmax_cols_short"


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_short_column_vectors_off_16_bytes_and_non_finite(cp, rng, short_kernels, dtype, log):
    """softmax_cols_short_vec where x or out starts off 16 bytes (views: the thread's columns
    one by one) and non-finite columns (NaN, +inf, all -inf, ...) inside the vectors of finite
    ones, every rung."""
    vs = vector_size(dtype)
    for length in (2, 3, 7, 12, 16):
        shape = (length, 40 * vs)
        flat = random(cp, rng, (length * 40 * vs + 1,), dtype)
        x = flat[1:].reshape(shape)
        assert _short_kernel(x, 0, log) == "softmax_cols_short_vec"
        check(cp, x, 0, log, out=poisoned(cp, shape, dtype))
        aligned = random(cp, rng, shape, dtype)
        check(cp, aligned, 0, log, out=poisoned(cp, (length * 40 * vs + 1,), dtype)[1:].reshape(shape))
        host = (rng.standard_normal(shape) * 3).astype(dtype)
        host[:, 1:8] = rows_with_non_finite(rng, length, dtype).T
        x = cp.asarray(host)
        check(cp, x, 0, log, out=poisoned(cp, shape, dtype))
