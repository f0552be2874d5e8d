"""attention_fwd_wgmma_tma's host side (CPU): the batch unit of each operand's 3-D tensor map,
the maps' geometry, the launch arguments in the kernel's order, shared memory and the config
checks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cufuse._core.dtypes import BFLOAT16
from cufuse._core.plans import TensorMap
from cufuse.ops.attention.problem import describe
from cufuse.ops.attention.wgmma import FlashWgmmaTile, batch_unit, operand_maps

N = 1000
TMA128 = FlashWgmmaTile(head_dim=128, warpgroups=2, block_n=128, stages=2, tma=True)


def gqa_problem(n=N, d=128):
    """q (2, 4, 4, n, d) over k / v (2, 4, 1, n, d): grouped-query heads broadcast over G."""
    q_strides = (16 * n * d, 4 * n * d, n * d, d, 1)
    kv_strides = (4 * n * d, n * d, 0, d, 1)
    return describe((2, 4, 4, n, d), q_strides, (2, 4, 1, n, d), kv_strides, (2, 4, 1, n, d), kv_strides, BFLOAT16,
                    True, 0.1, True, (True,) * 3)


@pytest.mark.parametrize("sizes,strides,expected", [
    ((1, 1, 8, 4), (0, 0, 512000, 128000), (128000, 32)),
    ((1, 1, 8, 4), (0, 0, 128000, 0), (128000, 8)),  # broadcast over the group
    ((1, 1, 1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 1, 2, 3), (0, 0, 300 * 3 * 64, 64), (64, 300 * 3 + 3)),  # (B, N, H, D) viewed as (B, H, N, D)
])
def test_batch_unit_is_the_gcd_of_the_strides(sizes, strides, expected):
    unit, count = batch_unit(sizes, strides)
    assert (unit, count) == expected
    offsets = {sum(i * st for i, st in zip(index, strides)) for index in np.ndindex(*sizes)}
    assert all(off % unit == 0 and off // unit < count for off in offsets)


def test_operand_maps_box_each_operand():
    q_map, k_map, v_map = operand_maps(gqa_problem(), 128)
    assert (q_map.inner, q_map.outer, q_map.box_inner, q_map.box_outer, q_map.batch) == (128, N, 64, 64, 32)
    assert (k_map.box_outer, k_map.batch, k_map.batch_stride) == (128, 8, 128000 * 2)
    assert v_map == k_map


def test_plan_passes_the_kernel_arguments_in_order():
    problem = gqa_problem()
    (launch,) = TMA128.plan(problem, None).launches
    assert launch.spec.name == "attention_fwd_wgmma_tma" and launch.block == (384,)
    assert launch.grid == (8 * 32,)  # 8 query tiles of 128 rows x 32 heads
    args = launch.args
    # out, lse, partial O and lse (lse again with one split), nq, nk, dv, q_tiles, splits, keys a
    # split, period (unpacked), scale, flags, softcap, band (2), units (3), layout (15), maps (3),
    # sinks (pointer, H)
    assert len(args) == 39 and args[:4] == ("out", "lse", "lse", "lse")
    assert [int(a) for a in args[4:11]] == [N, N, 128, 8, 1, N, 1 << 30]
    assert [int(a) for a in args[16:19]] == [128000, 128000, 128000]
    assert [a.name for a in args[-5:-2] if isinstance(a, TensorMap)] == ["q", "k", "v"]
    assert [int(a) for a in args[-2:]] == [0, 0]  # no sinks: a null pointer
    # Q, two K and two V stages of 128 x 128, 9 mbarriers, the alignment slack
    assert launch.smem == (128 + 4 * 128) * 128 * 2 + 9 * 8 + 1024


def test_tma_config_checks():
    problem = gqa_problem()

    class Hopper:
        has_wgmma, cc = True, 90

    with pytest.raises(ValueError, match="expected a TMA tile of \\(2, 3\\) warpgroups and min_blocks 1, got 4"):
        FlashWgmmaTile(head_dim=128, warpgroups=4, block_n=64, stages=2, tma=True).check(problem, Hopper())
    with pytest.raises(ValueError, match="min_blocks 1, got 2 warpgroups, min_blocks 2"):
        FlashWgmmaTile(head_dim=64, warpgroups=2, block_n=64, stages=2, min_blocks=2, tma=True).check(problem, Hopper())
    TMA128.check(problem, Hopper())


def test_tma_refuses_negative_batch_strides_and_wide_three_warpgroup_tiles():
    class Hopper:
        has_wgmma, cc = True, 90

    n, d = 300, 64
    flipped = describe((2, n, d), (-n * d, d, 1), (2, n, d), (n * d, d, 1), (2, n, d), (n * d, d, 1), BFLOAT16,
                       False, 0.1, False, (True,) * 3)
    with pytest.raises(ValueError, match="non-negative batch strides, got 'q' batch strides"):
        FlashWgmmaTile(head_dim=64, warpgroups=3, block_n=128, stages=2, tma=True).check(flipped, Hopper())
    # the cp.async feed takes it (pointer arithmetic)
    FlashWgmmaTile(head_dim=64, warpgroups=3, block_n=128, stages=2).check(flipped, Hopper())
    with pytest.raises(ValueError, match="head dim at most 128 with 3 warpgroups, got head dim 256"):
        FlashWgmmaTile(head_dim=256, warpgroups=3, block_n=64, stages=2, tma=True).check(gqa_problem(d=256), Hopper())


def packed_decode_problem(group=16, n_q=8, n_k=4096, d=128, heads_inner=False, batch=4, heads_kv=8):
    """q (B, Hkv, G, Nq, D) over k / v (B, Hkv, 1, Nk, D); ``heads_inner``: q stored (B, Nq, Hkv,
    G, D), so its query heads are not a row stride apart."""
    if heads_inner:
        q_strides = (n_q * heads_kv * group * d, group * d, d, heads_kv * group * d, 1)
    else:
        q_strides = (heads_kv * group * n_q * d, group * n_q * d, n_q * d, d, 1)
    kv_strides = (heads_kv * n_k * d, n_k * d, 0, d, 1)
    return describe((batch, heads_kv, group, n_q, d), q_strides, (batch, heads_kv, 1, n_k, d), kv_strides,
                    (batch, heads_kv, 1, n_k, d), kv_strides, BFLOAT16, True, 0.1, True, (True,) * 3)


def test_packed_decode_rows_from_a_warpgroup_take_the_tma_tile():
    from cufuse._core.device import A100, H200
    from cufuse.ops.attention import select
    from cufuse.ops.attention.mma import FlashMmaTile

    tile = select.choose(packed_decode_problem(), H200)
    assert isinstance(tile, FlashWgmmaTile) and tile.packed and tile.tma and tile.splits > 1
    # under a warpgroup's rows, on the A100, or with q's heads not a row stride apart: the mma tile
    for problem, dev in ((packed_decode_problem(group=4, n_q=8), H200), (packed_decode_problem(), A100),
                         (packed_decode_problem(heads_inner=True), H200)):
        assert isinstance(select.choose(problem, dev), FlashMmaTile)


def test_packed_decode_plan_splits_and_merges():
    from cufuse._core.device import H200
    from cufuse.ops.attention import select

    problem = packed_decode_problem(n_k=5000)
    tile = select.choose(problem, H200)
    forward, merge = tile.plan(problem, H200).launches
    # 32 KV heads of 128 packed rows, one query tile each, times the splits
    assert forward.grid == (32 * tile.splits,) and merge.spec.name == "attention_merge" and merge.pdl
    args = forward.args
    assert [int(a) for a in args[4:11]] == [128, 5000, 128, 1, tile.splits, tile.keys_per_split, 8]
    assert tile.splits * tile.keys_per_split >= 5000 and tile.keys_per_split % tile.block_n == 0


def test_packed_and_split_configs_are_checked():
    from cufuse._core.device import H200

    problem = packed_decode_problem()
    with pytest.raises(ValueError, match="TMA tile"):
        FlashWgmmaTile(head_dim=128, warpgroups=2, block_n=128, stages=2, packed=True).check(problem, H200)
    with pytest.raises(ValueError, match="packed rows"):
        dataclasses.replace(TMA128, packed=True).check(packed_decode_problem(heads_inner=True), H200)
    with pytest.raises(ValueError, match="splits"):
        dataclasses.replace(TMA128, packed=True, splits=2, keys_per_split=128).check(problem, H200)
