"""softmax's variants and host path (CPU): the layout collapse, each variant's plan (grid,
block, shared memory, arguments in kernel order, scratch, launch flags) and its check of a
forced config, and the api's per-call path over fake arrays and recording kernels."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cufuse
from cufuse._core import driver
from cufuse._core.device import A100, H200
from cufuse._core.plans import Scratch
from cufuse.ops.softmax import select, select_cols
from cufuse.ops.softmax.cols import ColsConfig, ColsShortConfig, ColsShortShiftedConfig, ColsShortVecConfig, ColsVecConfig
from cufuse.ops.softmax.problem import SoftmaxProblem, collapse, vector_size
from cufuse.ops.softmax.plan import plan_softmax
from cufuse.ops.softmax.rows import ClusterConfig, RowsConfig, StashedRowsConfig
from cufuse.ops.softmax.split import SplitConfig

from ..conftest import fake_gpu_calls
from .oracle import BF16

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def only_launch(plan):
    (launch,) = plan.launches
    return launch


def scalars(launch):
    return [int(a) for a in launch.args if isinstance(a, np.generic)]


def test_collapse():
    # C-contiguous (4, 5, 6): last axis, middle axis, leading axes, everything.
    assert collapse((4, 5, 6), (30, 6, 1), {2}) == ((20, 6, 1), (6, 1, 0))
    assert collapse((4, 5, 6), (30, 6, 1), {1}) == ((4, 5, 6), (30, 6, 1))
    assert collapse((4, 5, 6), (30, 6, 1), {0, 1}) == ((1, 20, 6), (0, 6, 1))
    assert collapse((4, 5, 6), (30, 6, 1), {0, 1, 2}) == ((1, 120, 1), (0, 1, 0))
    # Scattered axes, and a view whose leading axes do not collapse.
    assert collapse((4, 5, 6), (30, 6, 1), {0, 2}) is None
    assert collapse((4, 5, 6), (60, 18, 1), {2}) is None
    # Size-1 axes are ignored, a transposed matrix reduces along its unit stride.
    assert collapse((4, 1, 6), (6, 6, 1), {0, 2}) == ((1, 24, 1), (0, 1, 0))
    assert collapse((6, 4), (1, 6), {0}) == ((1, 6, 4), (0, 1, 6))
    assert collapse((3, 1), (1, 1), {1}) == ((3, 1, 1), (1, 0, 0))
    assert collapse((), (), set()) == ((1, 1, 1), (0, 0, 0))
    # Negative strides collapse like positive ones.
    assert collapse((4, 5), (-5, -1), {1}) == ((4, 5, 1), (-5, -1, 0))


def test_copy_path_is_none():
    assert plan_softmax((6, 7, 300), (2100, 300, 1), F32, (0, 2), False, H200) is None
    assert plan_softmax((6, 7, 300), (2100, 300, 1), F32, (2,), False, H200) is not None


def test_rows_plan():
    launch = only_launch(plan_softmax((1000, 200), (200, 1), F32, (1,), False, H200))
    config = select.choose_rows(200, 1000, F32, H200)
    assert launch.spec == config.spec(F32, False) and launch.smem == 0
    assert launch.grid == (-(-1000 // config.rows_per_block),) and launch.block == (config.threads,)
    assert launch.args[:2] == ("x", "out") and scalars(launch) == [1000, 200, 1, 200, 0, 1]  # rows, length, inner, so, si, sl
    assert all(type(a) is np.int64 for a in launch.args[2:])


def test_stashed_and_cluster_rows_plans():
    """Stashed rows: a block (cluster) a row, the tiles' shared memory, the whole carveout;
    the float64 row cluster: rows over clusters, each block's chunk; clusters above the
    portable 8 refused."""
    stashed = only_launch(plan_softmax((16, 65536), (65536, 1), F16, (1,), True, H200))
    assert stashed.spec.name == "softmax_rows_stashed" and stashed.grid == (16,) and stashed.block == (416,)
    assert stashed.spec.template_args[2:] == (448, 4, 2)  # the launch bound: 448 threads, 4 vectors, 2 blocks an SM
    assert stashed.smem == 4 * 416 * 4 * 16 and stashed.whole_carveout
    assert scalars(stashed) == [65536, 1, 65536, 0, 1, 65536, 4]  # length, inner, so, si, sl, chunk, tiles
    clustered = only_launch(plan_softmax((9, 262144), (262144, 1), F32, (1,), False, H200))
    assert clustered.spec.name == "softmax_rows_stashed_cluster" and clustered.grid == (9 * 8,)
    assert scalars(clustered)[-2:] == [262144 // 8, 3]  # chunk, tiles
    for c16 in (StashedRowsConfig(threads=256, vecs=8, stash_tiles=3, blocks_per_sm=2, cluster=16),
                ClusterConfig(threads=256, vecs=4, cluster=16, rows_per_cluster=2)):
        with pytest.raises(ValueError, match="expected a cluster of at most 8 blocks, got 16"):
            plan_softmax((5, 65536), (65536, 1), F32, (1,), False, H200, c16)
    f64 = only_launch(plan_softmax((7, 30000), (30000, 1), F64, (1,), False, H200))
    assert f64.spec.name == "softmax_rows_cluster" and f64.grid == (7 * 8,) and f64.block == (512,)
    assert scalars(f64) == [7, 30000, 1, 30000, 0, 1, 3750]  # rows, geometry, chunk
    persistent = only_launch(plan_softmax((7, 32763), (32763, 1), F32, (1,), False, H200,
                                          ClusterConfig(threads=256, vecs=8, cluster=4, rows_per_cluster=3)))
    assert persistent.grid == (3 * 4,)


def test_split_plan_and_scratch():
    """The persistent grid, the kernel's scalars, and the scratch of 2 x rows x blocks_per_row
    accumulators and rows zeroed counters, keyed by the accumulator dtype."""
    plan = plan_softmax((4, 1 << 20), (1 << 20, 1), F32, (1,), False, H200)
    config = select.choose_rows(1 << 20, 4, F32, H200)
    launch = only_launch(plan)
    assert launch.spec == config.spec(F32, False) and launch.grid == (config.grid,) and launch.smem == config.smem_bytes
    assert launch.whole_carveout and launch.resident_blocks == 2
    assert launch.args[-2:] == (Scratch(0), Scratch(1))
    assert scalars(launch) == [4, 1 << 20, 1, 1 << 20, 0, 1, config.chunk, config.blocks_per_row, config.smem_tiles]
    assert [type(a) for a in launch.args[-5:-2]] == [np.int64, np.int32, np.int32]
    assert plan.scratch.purpose == "softmax-split-float32"
    assert plan.scratch.buffers == ((F32, 2 * 4 * config.blocks_per_row, False), (np.dtype(np.uint32), 4, True))
    f64 = plan_softmax((4, 1 << 20), (1 << 20, 1), F64, (1,), False, H200)
    assert f64.scratch.purpose == "softmax-split-float64" and f64.scratch.buffers[0][0] == F64


def test_column_plans():
    """Column kernels: a block per 32 columns (scalar) or col_lanes vectors (vectors) of an outer
    index, times the cluster; the column split's persistent grid, part, blocks a strip, strips
    (outer x column strips) and its share of the split scratch."""
    scalar = only_launch(plan_softmax((4096, 301), (301, 1), F32, (0,), False, H200))
    assert scalar.spec.name == "softmax_cols_cluster" and scalar.grid == (10 * 4,) and scalar.block == (512,)
    assert scalars(scalar) == [1, 4096, 301, 0, 1, 301]  # outer, length, inner, so, si, sl
    vec = only_launch(plan_softmax((100, 64), (64, 1), F16, (0,), False, H200,
                                   ColsVecConfig(threads=256, col_lanes=4, unroll=4, cluster=8)))
    assert vec.grid == (2 * 8,) and vec.block == (256,)
    config = select_cols.choose_cols_split(16384, 4096, F16, H200)
    plan = plan_softmax((16384, 4096), (4096, 1), F16, (0,), False, H200, config)
    launch = only_launch(plan)
    assert launch.grid == (264,) and launch.block == (256,) and launch.smem == 3 * 32768
    assert scalars(launch) == [1, 16384, 4096, 0, 1, 4096, 768, 22, 64]  # outer, geometry, part, blocks, strips
    assert launch.whole_carveout and launch.resident_blocks == 2 and launch.args[-2:] == (Scratch(0), Scratch(1))
    assert plan.scratch.purpose == "softmax-split-float32"
    assert plan.scratch.buffers == ((F32, 2 * 264 * 64 * 2, False), (np.dtype(np.uint32), 12, True))
    outer = plan_softmax((3, 1031, 72), (1031 * 72, 72, 1), F16, (1,), False, H200, select_cols.choose_cols_split(1031, 216, F16, H200))
    assert scalars(only_launch(outer))[0] == 3 and scalars(only_launch(outer))[-1] == 3 * 2  # 3 outer x 2 strips of 64 columns
    assert plan_softmax((16384, 4096), (4096, 1), F16, (0,), False, H200) == plan  # the default


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64])
def test_short_column_layouts(dtype):
    """Which short-column kernel each layout gets: vectors where inner, sl and so are multiples
    of the vector (axis=0 of (6, 3000000), a short middle axis over 64 columns); where a column
    count, a row stride or an outer stride is off the vector, the shifted vectors (2- and 4-byte
    types, up to 8 rows; a warp 31 vectors of columns) or the scalar kernel (float64, 9 rows)."""
    vs = vector_size(dtype)

    def kernel(shape, strides, axes):
        return only_launch(plan_softmax(shape, strides, np.dtype(dtype), axes, False, H200)).spec.name

    assert kernel((6, 3000000), (3000000, 1), (0,)) == "softmax_cols_short_vec"
    assert kernel((5, 9, 64), (9 * 64, 64, 1), (1,)) == "softmax_cols_short_vec"
    shifted = "softmax_cols_short" if dtype.itemsize == 8 else "softmax_cols_short_shifted"
    assert kernel((6, 3000000 + 1), (3000000 + 1, 1), (0,)) == shifted  # rows off the vector
    assert kernel((6, 64), (64 + 1, 1), (0,)) == shifted  # padded rows off the vector
    assert kernel((5, 7, 64 + vs), (7 * (64 + vs) + 1, 64 + vs, 1), (1,)) == shifted  # outer stride off it
    assert kernel((5, 9, 64 + vs), (9 * (64 + vs) + 1, 64 + vs, 1), (1,)) == "softmax_cols_short"  # 9 rows: a thread a column
    assert kernel((5, 7, 63), (7 * 63, 63, 1), (1,)) == shifted  # a column count off the vector
    assert kernel((6, 64), (128, 2), (0,)) == "softmax_rows"  # the inner axis strided: rows of strided elements
    launch = only_launch(plan_softmax((6, 3000000), (3000000, 1), np.dtype(dtype), (0,), False, H200))
    assert launch.grid == (-(-3000000 // vs // 256),) and launch.block == (256,)  # a thread a vector
    assert scalars(launch) == [1, 6, 3000000, 0, 1, 3000000]  # outer, length, inner, so, si, sl
    middle = only_launch(plan_softmax((5, 9, 64), (9 * 64, 64, 1), np.dtype(dtype), (1,), True, H200))
    assert middle.grid == (1,) and scalars(middle)[:3] == [5, 9, 64]
    if shifted == "softmax_cols_short_shifted":  # a warp 31 vectors of columns (and the next one's loads)
        launch = only_launch(plan_softmax((5, 7, 300), (7 * 300 + 1, 300, 1), np.dtype(dtype), (1,), False, H200))
        warps = -(-5 * -(-300 // vs) // 31)
        assert launch.grid == (-(-warps * 32 // 256),) and launch.block == (256,)
        assert scalars(launch) == [5, 7, 300, 7 * 300 + 1, 1, 300]


def test_forced_configs_are_checked():
    """A config= that cannot run the problem is refused with a ValueError naming 'config'."""
    def refused(match, shape, strides, dtype, axes, config, dev=H200):
        with pytest.raises(ValueError, match=match):
            plan_softmax(shape, strides, dtype, axes, False, dev, config)

    refused("holds rows of up to 7168 16-byte vectors", (3, 65537), (65537, 1), F16, (1,),
            StashedRowsConfig(threads=448, vecs=4, stash_tiles=3, blocks_per_sm=2))
    refused("up to 448, got 512", (3, 40000), (40000, 1), F16, (1,),
            StashedRowsConfig(threads=512, vecs=4, stash_tiles=3, blocks_per_sm=2))
    refused("1 to 7 shared-memory tiles, got 8", (3, 40000), (40000, 1), F16, (1,),
            StashedRowsConfig(threads=128, vecs=4, stash_tiles=8, blocks_per_sm=1))
    refused(r"takes \(vecs, blocks_per_sm\) of", (3, 40000), (40000, 1), F16, (1,),
            StashedRowsConfig(threads=128, vecs=2, stash_tiles=3, blocks_per_sm=2))
    refused("needs 229376 bytes of shared memory a block, got a device of 166912", (3, 40000), (40000, 1), F32, (1,),
            StashedRowsConfig(threads=512, vecs=4, stash_tiles=7, blocks_per_sm=1), A100)
    refused("blocks of a multiple of 32 threads up to 512, got 100", (3, 3000), (3000, 1), F16, (1,),
            RowsConfig(threads=100, group=100, vecs=4))
    refused("holds rows of up to 32 16-byte", (3, 300), (300, 1), F32, (1,), RowsConfig(threads=128, group=32, vecs=1))
    refused("needs thread-block clusters", (3, 16000), (16000, 1), F64, (1,),
            ClusterConfig(threads=512, vecs=4, cluster=4), A100)
    refused("needs thread-block clusters", (3000, 64), (64, 1), F32, (0,), ColsConfig(slices=16, unroll=8, cluster=4),
            A100)
    refused("config", (100, 70), (70, 1), F32, (0,), ColsVecConfig(threads=256, col_lanes=4, unroll=4))  # inner not a multiple of 4
    refused("2- or 4-byte dtype", (100, 64), (64, 1), F64, (0,), ColsVecConfig(threads=256, col_lanes=4, unroll=4))  # float64 vectors spilled
    refused("holds columns of up to 8 elements, got 9", (9, 64), (64, 1), F16, (0,),
            ColsShortVecConfig(threads=256, max_length=8, blocks_per_sm=4))
    refused("every 16-byte vector of columns aligned", (6, 70), (70, 1), F16, (0,),
            ColsShortVecConfig(threads=256, max_length=8, blocks_per_sm=4))
    refused("holds columns of up to 16 elements, got 17", (17, 64), (64, 1), F16, (0,),
            ColsShortConfig(threads=256, max_length=16))
    shifted = ColsShortShiftedConfig(threads=256, max_length=8, blocks_per_sm=3)
    refused("holds columns of up to 8 elements, got 9", (9, 301), (301, 1), F16, (0,), shifted)
    refused("2- or 4-byte dtype", (6, 301), (301, 1), F64, (0,), shifted)
    refused("strided over a contiguous inner axis", (301, 6), (6, 1), F16, (1,), shifted)  # rows
    refused("strided over a contiguous inner axis", (6, 64), (128, 2), F32, (0,), shifted)  # the inner axis strided
    plan_softmax((6, 64), (64, 1), F32, (0,), False, H200, shifted)  # aligned vectors: it runs them too
    config = select_cols.choose_cols_split(16384, 4096, F16, H200)
    refused("config", (100, 70), (70, 1), F16, (0,), config)  # not vectorizable
    refused("holds 22 x 768 rows a strip, got columns of 16897", (16897, 64), (64, 1), F16, (0,), config)
    refused("co-resident", (16384, 64), (64, 1), F16, (0,), dataclasses.replace(config, strips_per_wave=13))
    split = SplitConfig(threads=256, vecs=4, blocks_per_sm=2, blocks_per_row=2, grid=4, chunk=25000, smem_tiles=2,
                        streams=True)
    plan_softmax((5, 50000), (50000, 1), F32, (1,), False, H200, split)  # holds it: no error
    refused("holds rows of up to 2 x 25000", (5, 50001), (50001, 1), F32, (1,), split)
    refused("whole 16-byte vectors", (5, 50000), (50000, 1), F32, (1,), dataclasses.replace(split, chunk=25001))
    refused("whole rows of 2 blocks", (5, 50000), (50000, 1), F32, (1,), dataclasses.replace(split, grid=5))
    refused("co-resident", (5, 50000), (50000, 1), F32, (1,), dataclasses.replace(split, grid=600))
    one_block_a_row = SplitConfig(threads=256, vecs=4, blocks_per_sm=2, blocks_per_row=1, grid=1024, chunk=50000,
                                  smem_tiles=7, streams=True)  # not persistent: no block waits for another
    assert only_launch(plan_softmax((1024, 50000), (50000, 1), F32, (1,), False, H200, one_block_a_row)).grid == (1024,)


# ---------------------------------------------------------------- the api over fake arrays


@pytest.fixture
def fake_gpu(monkeypatch):
    """softmax's api module over ``fake_gpu_calls`` (tests/conftest.py) on an H200."""
    from cufuse.ops.softmax import api

    return (api,) + fake_gpu_calls(monkeypatch, api, H200)


def test_host_path_plans_once_and_launches_the_geometry(fake_gpu, monkeypatch):
    api, make_array, kernels, _ = fake_gpu
    x, out = make_array((1000, 200), np.float32), make_array((1000, 200), np.float32)
    built = []
    monkeypatch.setattr(api, "plan_softmax", lambda *a: built.append(a) or plan_softmax(*a))
    for _ in range(3):
        assert cufuse.softmax(x, axis=-1, out=out) is out
    assert len(built) == 1 and len(driver.PLANS) == 2  # the layout's plan and the call's signature
    (kernel,) = kernels.values()
    assert len(kernel.launches) == 3
    grid, block, args, smem = kernel.launches[-1]
    expected = only_launch(plan_softmax((1000, 200), (200, 1), F32, (1,), False, H200))
    assert grid == expected.grid and block == expected.block and smem == 0
    assert args[:2] == (x.data.ptr, out.data.ptr) and args[2:] == expected.args[2:]
    # A new out on the fast path is still checked for overlap with x.
    with pytest.raises(ValueError, match="overlap"):
        cufuse.softmax(x, axis=-1, out=x)
    # Other axis forms are other signatures (1.0 is not an axis even though 1.0 == 1).
    with pytest.raises(TypeError, match="axis"):
        cufuse.softmax(x, axis=1.0, out=out)
    with pytest.raises(TypeError, match="argument 'config' expected None or one of RowsConfig"):
        cufuse.softmax(x, axis=-1, out=out, config=(128, 32, 4))


def test_host_path_passes_the_split_scratch(fake_gpu):
    _, make_array, kernels, held = fake_gpu
    x, out = make_array((4, 1 << 20), np.float32), make_array((4, 1 << 20), np.float32)
    cufuse.softmax(x, axis=-1, out=out)
    cufuse.softmax(x, axis=-1, out=out)
    (kernel,) = kernels.values()
    accumulators, counters = held["softmax-split-float32"]
    for _, _, args, _ in kernel.launches:
        assert args[-2:] == (accumulators.data.ptr, counters.data.ptr)
    assert kernel.preferred_shared_memory_carveout == 100


def test_host_path_copy_path_is_not_a_fast_signature(fake_gpu, monkeypatch):
    """Scattered axes run the explicit copy: never remembered as a call signature."""
    api, make_array, _, _ = fake_gpu
    x = make_array((6, 7, 300), np.float32)
    assert api._bound_plan(x.shape, x.strides, x.dtype, (0, 2), 0, None, False, None) is None
    assert api._bound_plan(x.shape, x.strides, x.dtype, (2,), 0, None, False, None) is not None
    # In the memory order (2, 1, 0) of a transposed x, axes 0 and 2 are no closer.
    assert api._bound_plan(x.shape, x.strides, x.dtype, (0, 2), 0, None, False, (2, 1, 0)) is None


def test_span_rows_plan():
    """Dense rows off the vector: the span rung, its tile of rows in dynamic shared memory, a
    block a tile, the whole carveout; a forced tile larger than the device's shared memory is
    refused."""
    launch = only_launch(plan_softmax((671088, 100), (100, 1), F16, (1,), False, H200))
    config = select.choose_span(SoftmaxProblem(671088, 100, 1, 100, 1, 0, F16, False))
    tile = config.tile_rows(100, 671088, F16, H200)
    assert launch.spec == config.spec(F16, False) and launch.whole_carveout
    assert launch.grid == (-(-671088 // tile),) and launch.block == (config.threads,)
    assert launch.smem == config.smem_bytes(100, tile, F16) and scalars(launch) == [671088, 100, tile]
    huge = dataclasses.replace(config, tile_bytes=1 << 30)
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory a block \(tile_bytes 1073741824\), got a device of 232448"):
        plan_softmax((67108800, 100), (100, 1), F16, (1,), False, H200, huge)
