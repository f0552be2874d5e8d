"""attention_varlen_wgmma_tma's host side (CPU): the virtual tile mapping (the kernel's search in
Python) against a linear scan, the grid from the shapes alone, the tensor maps over the packed
arrays, the launch arguments in the kernel's order, the default choice between the wgmma and
SIMT kernels and the ``config=`` checks."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import cufuse
from cufuse._core.device import A100, H200
from cufuse._core.dtypes import BFLOAT16
from cufuse._core.plans import NULL
from cufuse.ops.attention import select
from cufuse.ops.attention.plan import plan_varlen
from cufuse.ops.attention.varlen_problem import describe_varlen
from cufuse.ops.attention.varlen_simt import VarlenSimtRows
from cufuse.ops.attention.varlen_wgmma import (VarlenWgmmaTile, first_tile, operand_maps, refusal, sequence_of_tile,
                                               tile_count)

F16 = np.dtype(np.float16)
BLOCK_MS = (128, 192)  # the VARLEN_WGMMA tiles' rows: 2 and 3 consumer warpgroups


def cu_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def scanned_owner(cu, tile, block_m):
    """The last b with f(b) <= tile (0 if none), from every f(b) at once."""
    starts = np.array([first_tile(cu, b, block_m, int(cu[-1])) for b in range(len(cu) - 1)])
    return max(int(np.searchsorted(starts, tile, side="right")) - 1, 0)


LENGTHS = [
    [0, 1, 7, 63, 64, 65, 1000, 4097],
    [0],
    [5],
    [0, 0, 0, 300, 0],
    [127, 128, 129, 191, 192, 193, 255, 256, 257],
]


@pytest.mark.parametrize("lengths", LENGTHS + ["random33", "random1000", "random1100"])
@pytest.mark.parametrize("block_m", BLOCK_MS)
def test_every_query_row_has_one_tile_below_the_grid(lengths, block_m):
    if isinstance(lengths, str):  # B of one search round, two and three (32 candidates a round)
        rng = np.random.default_rng(len(lengths))
        lengths = rng.choice([0, 1, 63, 64, 65, 200, 700], size=int(lengths[6:])).tolist()
    cu = cu_of(lengths)
    tokens, batch = int(cu[-1]), len(lengths)
    tiles = tile_count(tokens, batch, block_m)
    assert tiles == tokens // block_m + batch
    owned = {}
    for tile in range(tiles):
        found = sequence_of_tile(cu, tile, block_m, tokens)
        b = scanned_owner(cu, tile, block_m)
        assert found is None or found[0] == b
        if found is not None:
            assert found not in owned.values()
            owned[tile] = found
    want = {(b, rank) for b, n in enumerate(lengths) for rank in range(math.ceil(n / block_m))}
    assert set(owned.values()) == want  # each sequence's tiles exactly once, nothing else
    # a tile's rows lie within its sequence's rows from its first (the rest of a ragged last tile is masked)
    for b, rank in owned.values():
        assert cu[b] + rank * block_m < cu[b + 1]


def test_tiles_past_the_grid_and_broken_offsets_find_no_row_outside():
    cu = cu_of([10, 0, 300])
    assert sequence_of_tile(cu, tile_count(310, 3, 128), 128, 310) is None
    assert sequence_of_tile(np.array([0]), 0, 128, 0) is None  # B = 0
    bad = np.array([5, 400, -3, 2 ** 30])  # not starting at 0, decreasing, past Tq: clamped, never outside
    for tile in range(tile_count(310, 3, 128)):
        found = sequence_of_tile(bad, tile, 128, 310)
        if found is not None:
            b, rank = found
            begin = min(max(int(bad[b]), 0), 310)
            assert 0 <= begin + rank * 128 < 310


def problem(tokens_q=1000, tokens_k=3000, heads_q=8, heads_kv=2, d=128, dv=128, batch=5, dtype=F16, strides=None,
            aligned=(True,) * 3, causal=True, scale=0.1, window=(-1, -1), softcap=None, return_lse=True,
            sink_heads=0):
    shapes = {"q": (tokens_q, heads_q, d), "k": (tokens_k, heads_kv, d), "v": (tokens_k, heads_kv, dv),
              "cu_seqlens_q": (batch + 1,), "cu_seqlens_k": (batch + 1,)}
    packed = {"q": (heads_q * d, d, 1), "k": (heads_kv * d, d, 1), "v": (heads_kv * dv, dv, 1)}
    strides = packed | (strides or {}) | {"cu_seqlens_q": (1,), "cu_seqlens_k": (2,)}
    return describe_varlen(shapes, strides, dtype, aligned, causal, scale, window, softcap, return_lse, sink_heads)


def test_plan_passes_the_kernel_arguments_in_order():
    p = problem(window=(100, 5), sink_heads=8, softcap=30.0)
    tile = select.VARLEN_WGMMA[128]
    (launch,) = plan_varlen(p, H200).launches
    assert launch.spec == tile.spec("__half") and launch.spec.name == "attention_varlen_wgmma_tma"
    assert launch.grid == (1000 // 128 + 5, 8) and launch.block == (384,)
    assert launch.smem == tile.dense.smem_bytes
    args = launch.args
    assert args[:4] == ("out", "lse", "cu_seqlens_q", "cu_seqlens_k")
    assert [int(a) for a in args[4:10]] == [5, 1000, 3000, 8, 4, 128]  # B, Tq, Tk, Hq, G, Dv
    assert args[10] == np.float32(0.1 / 30.0) and int(args[11]) == 1 | 2 | 32  # causal, lse, softcap
    assert [int(a) for a in args[13:17]] == [100, 0, 1, 2]  # left, right (causal caps it), cu strides
    assert [a.name for a in args[17:20]] == ["q", "k", "v"] and args[20:] == ("sinks", 8)
    no_lse = plan_varlen(problem(return_lse=False, causal=False, window=(-1, 7)), H200).launches[0].args
    assert no_lse[1] == "out" and [int(a) for a in no_lse[13:15]] == [-1, 7] and no_lse[-2:] == (NULL, 0)


def test_maps_cover_the_packed_arrays_by_token_and_head():
    p = problem(strides={"q": (8 * 256, 256, 1)}, d=128, dv=64)  # q heads 256 apart (a padded layout)
    q_map, k_map, v_map = operand_maps(p, 128)
    assert (q_map.inner, q_map.outer, q_map.stride, q_map.box_inner, q_map.box_outer) == (128, 1000, 8 * 256 * 2, 64,
                                                                                           64)
    assert (q_map.batch, q_map.batch_stride) == (8, 256 * 2)
    assert (k_map.outer, k_map.stride, k_map.box_outer, k_map.batch, k_map.batch_stride) == (3000, 512, 128, 2, 256)
    assert (v_map.inner, v_map.stride, v_map.batch_stride) == (64, 256, 128)
    one_head = operand_maps(problem(heads_q=1, heads_kv=1, tokens_q=1), 128)[0]
    assert one_head.batch == 1 and one_head.outer == 1  # valid strides the driver takes
    assert refusal(problem(heads_q=1, heads_kv=1, tokens_q=1), H200) is None


@pytest.mark.parametrize("width, bucket", [(32, 64), (64, 64), (80, 96), (96, 96), (128, 128), (160, 256), (256, 256)])
def test_default_is_the_wgmma_tile_of_the_width_on_hopper(width, bucket):
    chosen = select.choose_varlen(problem(d=width, dv=width), H200)
    assert chosen == select.VARLEN_WGMMA[bucket] == VarlenWgmmaTile.of(select.WGMMA_PREFILL[bucket][-1][1])
    assert select.choose_varlen(problem(d=width, dv=width), A100) == VarlenSimtRows()
    assert select.choose_varlen(problem(d=64, dv=width), H200).head_dim == bucket  # D and Dv


@pytest.mark.parametrize("change, why", [
    (dict(dtype=np.dtype(np.float32)), "takes float16 or bfloat16, got float32"),
    (dict(batch=0), "at least one sequence"),
    (dict(scale=-1.0), "positive scale or a softcap"),
    (dict(tokens_q=2 ** 29, tokens_k=2 ** 29), "Tq \\+ Tk below"),
    (dict(d=60, dv=60), "needs 'q' with unit column stride"),
    (dict(strides={"k": (2 * 128, 128, 2)}), "needs 'k' with unit column stride"),
    (dict(strides={"v": (2 * 128 + 4, 128, 1)}), "needs 'v'"),
    (dict(aligned=(True, True, False)), "needs 'v'"),
    (dict(strides={"q": (-8 * 128, 128, 1)}), "cannot map 'q'"),
    (dict(strides={"k": (2 * 128, 0, 1)}), "cannot map 'k'"),
])
def test_simt_takes_what_the_wgmma_kernel_refuses(change, why):
    p = problem(**change)
    assert select.choose_varlen(p, H200) == VarlenSimtRows()
    assert pytest.raises(ValueError, VarlenWgmmaTile.check, select.VARLEN_WGMMA[128], p, H200).match(why)


def test_softcap_runs_a_non_positive_scale_and_other_devices_refuse():
    assert select.choose_varlen(problem(scale=-0.5, softcap=5.0), H200) == select.VARLEN_WGMMA[128]
    with pytest.raises(ValueError, match="attention_varlen: argument 'config' asks for the wgmma kernel, which needs "
                                         "compute capability 9.0, got 8.0"):
        select.VARLEN_WGMMA[128].check(problem(), A100)


def test_config_checks_name_the_function_and_argument():
    p = problem(d=128, dv=128)
    with pytest.raises(ValueError, match="attention_varlen: argument 'config' expected a tile head dim >= 128, got 64"):
        select.VARLEN_WGMMA[64].check(p, H200)
    with pytest.raises(ValueError, match="expected a tile of \\(2, 3\\) warpgroups \\(3 up to head dim 128\\), got 3 "
                                         "warpgroups at head dim 256"):
        dataclasses.replace(select.VARLEN_WGMMA[256], warpgroups=3).check(problem(d=256, dv=256), H200)
    VarlenSimtRows().check(p, A100)  # takes anything
    assert plan_varlen(p, H200, VarlenSimtRows()).launches[0].spec.name == "attention_varlen_simt"
    assert plan_varlen(problem(dtype=BFLOAT16), H200).launches[0].spec.template_args[0] == "__nv_bfloat16"


def test_a_foreign_config_is_a_type_error():
    q = np.zeros((3, 2, 8))
    cu = np.array([0, 3], dtype=np.int32)
    with pytest.raises(TypeError, match="attention_varlen: argument 'config' expected None or one of VarlenWgmmaTile, "
                                        "VarlenSimtRows, got 3"):
        cufuse.attention_varlen(q, q, q, cu, cu, config=3)
    # the NumPy path checks it and ignores it
    cufuse.attention_varlen(q, q, q, cu, cu, config=select.VARLEN_WGMMA[64])


def test_check_compile_lists_the_wgmma_kernels_on_hopper_only():
    hopper, ampere = select.instantiations(H200), select.instantiations(A100)
    for tile in select.VARLEN_WGMMA.values():
        for name in ("__half", "__nv_bfloat16"):
            assert tile.spec(name) in hopper and tile.spec(name) not in ampere


@pytest.mark.parametrize("dev, config, kernel", [
    (H200, None, "attention_varlen_wgmma_tma"),
    (H200, VarlenSimtRows(), "attention_varlen_simt"),
    (A100, None, "attention_varlen_simt"),
])
def test_host_path_over_fake_gpu_arrays(monkeypatch, dev, config, kernel):
    # the driver's chain on fake GPU arrays: the first call chooses, plans and binds, the second
    # runs its PreparedCall; both launch one kernel on the caller's arrays with a grid from the shapes
    from cufuse._core import driver, plans
    from cufuse._core.plans import PreparedCall
    from cufuse.ops.attention import varlen

    from ..conftest import fake_gpu_calls

    make_array, kernels, _ = fake_gpu_calls(monkeypatch, varlen, dev)
    import cupy

    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=np.float64: make_array(shape, dtype))
    monkeypatch.setattr(plans.tma, "cached_map", lambda geometry, address: ("bytes", 1000 + address))
    q, k, v = make_array((700, 8, 64), F16), make_array((900, 2, 64), F16), make_array((900, 2, 64), F16)
    cu_q, cu_k = make_array((4,), np.int32), make_array((4,), np.int32)
    for _ in range(2):
        out, lse = cufuse.attention_varlen(q, k, v, cu_q, cu_k, causal=True, return_lse=True, config=config)
        assert out.shape == (700, 8, 64) and lse.shape == (700, 8) and lse.dtype == np.float32
    assert sum(isinstance(e, PreparedCall) for e in driver.PLANS._plans.values()) == 1
    ((spec, recorded),) = kernels.items()
    assert spec.name == kernel and len(recorded.launches) == 2
    for grid, _, args, _ in recorded.launches:
        if kernel == "attention_varlen_simt":
            assert grid == (175, 8) and args[:5] == (q.data.ptr, k.data.ptr, v.data.ptr, cu_q.data.ptr, cu_k.data.ptr)
        else:  # D64: 3 consumer warpgroups, 192 rows a tile
            assert grid == (700 // 192 + 3, 8) and args[2:4] == (cu_q.data.ptr, cu_k.data.ptr)
            assert [a for a in args if isinstance(a, tuple)] == [("map", 1000 + x.data.ptr) for x in (q, k, v)]
