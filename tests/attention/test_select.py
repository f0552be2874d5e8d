"""attention, CPU: the default selection rules, the key-split models, the batch layout, the
variants' checks and plans (pure: no GPU)."""
from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from cufuse._core.device import A100, H200
from cufuse._core.dtypes import ctype
from cufuse._core.plans import Scratch, Temporary
from cufuse.ops.attention import select
from cufuse.ops.attention.decode import DecodeTile
from cufuse.ops.attention.layout import MAX_BATCH_DIMS, batch_layout
from cufuse._core.lse_merge import merge_threads
from cufuse.ops.attention.merge import merge_spec
from cufuse.ops.attention.mma import FlashMmaTile
from cufuse.ops.attention.plan import plan_attention
from cufuse.ops.attention.simt import SimtRows
from cufuse.ops.attention.wgmma import FlashWgmmaTile

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
(_, D64_SHORT), (_, D64_MID), (_, D64_LONG) = select.WGMMA_PREFILL_CP_ASYNC[64]
((_, D128_TILE),) = select.WGMMA_PREFILL_CP_ASYNC[128]
(_, D64_TMA) = select.WGMMA_PREFILL[64][1]
((_, D128_TMA),) = select.WGMMA_PREFILL[128]
WGMMA_TABLES = (select.WGMMA_PREFILL, select.WGMMA_PREFILL_CP_ASYNC)


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_every_selected_tile_fits_and_is_instantiated(dev):
    specs = set(select.instantiations(dev))
    for n_q, n_k, d, dv, batch, kv_rows_16b, group in itertools.product(
            (1, 4, 5, 16, 17, 4096), (1, 100, 65536), (1, 64, 128, 200, 256), (8, 128, 256), (1, 256), (False, True),
            (1, 8)):
        for dtype, causal, wgmma_operands in itertools.product((F16, BF16), (False, True), (False, True)):
            config = select.choose_by_sizes(n_q, n_k, d, dv, batch * group, dtype, dev, kv_rows_16b, causal,
                                          wgmma_operands and kv_rows_16b, group)
            assert config.head_dim >= max(d, dv)
            assert config.spec(ctype(dtype)) in specs
            streamed = group == 1 and kv_rows_16b and n_q <= select.DECODE_STREAM_MAX_QUERIES
            assert isinstance(config, DecodeTile) == streamed
            splits = getattr(config, "splits", 1)
            if streamed:
                step = config.group_keys
            else:
                assert config.smem_bytes <= dev.max_smem_per_block
                packed = n_q <= select.DECODE_MAX_QUERIES
                assert getattr(config, "key_warps", False) == packed
                if packed:  # the group's rows in as few 16-row slices as the tile holds
                    assert config.block_m >= min(16 * math.ceil(n_q * group / 16),
                                                 16 * select.max_decode_m_tiles(config.head_dim))
                assert isinstance(config, FlashWgmmaTile) <= dev.has_wgmma
                step = config.stage_keys
            if splits > 1:
                assert config.keys_per_split % step == 0
                # every split holds keys, none is left over
                assert (splits - 1) * config.keys_per_split < n_k <= splits * config.keys_per_split
    assert select.choose_by_sizes(5, 5, 8, 8, 1, F32, dev) == SimtRows()
    assert SimtRows().spec("double") in specs and merge_spec("__nv_bfloat16") in specs


def test_instantiations_per_device():
    h200, a100 = set(select.instantiations(H200)), set(select.instantiations(A100))
    wgmma = {s for s in h200 if s.name.startswith("attention_fwd_wgmma")}
    # the ten default tiles (four TMA-fed, six cp.async-fed) in both 16-bit dtypes, sm_90a only;
    # nothing else of the kernels
    assert len(wgmma) == 20 and all(s.min_cc == 90 for s in wgmma)
    assert not any(s.name.startswith("attention_fwd_wgmma") for s in a100)
    assert {s.expression for s in wgmma} == {t.spec(n).expression for table in WGMMA_TABLES for rules in table.values()
                                             for _, t in rules for n in ("__half", "__nv_bfloat16")}
    assert all(s.source.startswith("attention/") for s in h200 | a100)


def test_head_dim_buckets():
    assert [select.head_dim_bucket(d) for d in (1, 32, 33, 64, 65, 111, 128, 129, 193, 256)] == [
        32, 32, 64, 64, 96, 128, 128, 192, 256, 256]
    with pytest.raises(ValueError):
        select.head_dim_bucket(257)


def test_key_split_model():
    # A full grid is not split; a lone (batch, head) with a long key range is.
    assert select.choose_key_splits(base_blocks=1024, n_tiles=128, slots=264) == 1
    assert select.choose_key_splits(base_blocks=1, n_tiles=1024, slots=264) >= 64
    assert select.choose_key_splits(base_blocks=8, n_tiles=1, slots=264) == 1
    # 4096 blocks on 132 slots: 2 splits model 0.05% faster, less than the merge costs
    assert select.choose_key_splits(base_blocks=4096, n_tiles=128, slots=132) == 1
    assert select.choose_key_splits(base_blocks=140, n_tiles=100, slots=132) > 1  # 1.06 waves
    # decode at B*H = 8 with 65536 keys fills the device, on both decode paths
    for kv_rows_16b in (False, True):
        config = select.choose_by_sizes(1, 65536, 128, 128, 8, BF16, H200, kv_rows_16b)
        assert config.splits * 8 >= H200.sm_count
    # Nk = 0 (the API launches nothing): the prefill wave model divides by zero (today's
    # behaviour), the packed decode split keeps one split
    with pytest.raises(ZeroDivisionError):
        select.choose_by_sizes(17, 0, 64, 64, 8, F16, H200, True)
    assert select.choose_by_sizes(5, 0, 64, 64, 8, F16, H200, True).splits == 1


def test_default_mma_tiles_fit_each_device():
    # decode on 16-byte rows streams K/V through registers (split); unaligned rows take the mma tile
    decode = select.choose_by_sizes(1, 8192, 128, 128, 256, BF16, H200, True)
    assert isinstance(decode, DecodeTile) and decode.splits > 1
    assert isinstance(select.choose_by_sizes(1, 8192, 59, 59, 256, BF16, H200, False), FlashMmaTile)
    assert select.prefill_tiles(128, A100)[0].block_n == 64  # 128-key tiles exceed A100's shared memory
    assert select.prefill_tiles(256, A100)[0].block_n == 32


def test_mean_visible_keys():
    assert select.mean_visible_keys(512, 512, False) == 512
    assert select.mean_visible_keys(512, 512, True) == 256.5  # rows see 1..512 keys
    assert select.mean_visible_keys(100, 300, True) == 250.5  # rows see 201..300
    assert select.mean_visible_keys(300, 100, True) == 100 * 101 / 2 / 300  # 200 rows see none
    for n_q, n_k in ((1, 1), (7, 3), (3, 7), (64, 1000)):
        exact = sum(min(n_k, max(0, i + n_k - n_q + 1)) for i in range(n_q)) / n_q
        assert math.isclose(select.mean_visible_keys(n_q, n_k, True), exact)


def _visible(n_q, n_k, causal, window):
    """Keys each query row sees, brute force: reference.visible_keys' rule."""
    from cufuse import reference
    sides = tuple(None if side < 0 else side for side in window)
    seen = reference.visible_keys(np.arange(n_k), n_q, n_k, causal, sides)
    return np.full(n_q, n_k) if seen is None else seen.sum(axis=1)


WINDOWS = ((0, 0), (1, 0), (5, 3), (64, -1), (-1, 64), (256, 0), (100, 100), (1000, 17), (-1, -1))


def test_mean_visible_keys_with_windows():
    for (n_q, n_k), causal, window in itertools.product(((1, 1), (7, 3), (3, 7), (300, 700), (777, 777)),
                                                         (False, True), WINDOWS):
        exact = _visible(n_q, n_k, causal, window).mean()
        assert math.isclose(select.mean_visible_keys(n_q, n_k, causal, window), exact), (n_q, n_k, causal, window)


def test_key_span_covers_every_block_of_rows():
    from cufuse.ops.attention.problem import key_span
    from cufuse import reference
    for (n_q, n_k), causal, window, rows in itertools.product(((300, 700), (777, 777), (1, 5000), (130, 4099)),
                                                              (False, True), WINDOWS, (1, 16, 64, 192)):
        sides = tuple(None if side < 0 else side for side in window)
        seen = reference.visible_keys(np.arange(n_k), n_q, n_k, causal, sides)
        if seen is None:
            seen = np.ones((n_q, n_k), dtype=bool)
        widest = 0
        for r0 in range(0, n_q, rows):
            keys = np.flatnonzero(seen[r0:r0 + rows].any(axis=0))
            widest = max(widest, keys[-1] - keys[0] + 1 if keys.size else 0)
        assert widest <= key_span(min(rows, n_q), n_k, causal, window), (n_q, n_k, causal, window, rows)


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_windowed_splits_cover_the_span(dev):
    for n_q, n_k, d, window, causal, group in itertools.product((1, 3, 16, 4096), (1000, 65536, 1 << 20), (64, 128),
                                                                ((4096, 0), (256, 256), (0, 0)), (False, True),
                                                                (1, 8)):
        config = select.choose_by_sizes(n_q, n_k, d, d, 8 * group, BF16, dev, True, causal, True, group, window)
        if isinstance(config, (FlashMmaTile, DecodeTile)):
            positions = 1 if isinstance(config, DecodeTile) else min(config.block_m, n_q)
            span = select.key_span(positions, n_k, causal, window)
            assert config.splits == 1 or config.splits * config.keys_per_split >= span
            # a split gets keys: no split past the span
            assert config.splits == 1 or (config.splits - 1) * config.keys_per_split < span


def test_forced_split_must_cover_a_blocks_keys():
    tile = FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2, min_blocks=3, q_in_regs=True,
                        skip_pad_cols=False, splits=2, keys_per_split=64)
    strides = (2048 * 64, 64, 1)
    args = ((1, 2048, 64), strides, (1, 2048, 64), strides, (1, 2048, 64), strides, BF16, True, 0.125, False,
            (True,) * 3, H200)
    with pytest.raises(ValueError, match="splits \\* keys_per_split"):
        plan_attention(*args, config=tile)
    # a window of 100 keys: 64 rows see at most 164 keys, which 2 x 128 covers
    covering = FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2, min_blocks=3, q_in_regs=True,
                            skip_pad_cols=False, splits=2, keys_per_split=128)
    plan_attention(*args, config=covering, window=(100, 0))
    with pytest.raises(ValueError, match="splits \\* keys_per_split"):
        plan_attention(*args, config=covering)


def test_windowed_plans_pass_the_band():
    strides = (4096 * 64, 64, 1)
    shape = (1, 4096, 64)
    for window, causal, band in (((100, 0), True, (-100, 0)), ((None, 5), False, (-(1 << 30), 5)),
                                 ((7, None), True, (-7, 0)), ((3, None), False, (-3, 1 << 30)),
                                 ((10**9, 10**9), False, (-8192, 8192))):
        plan = plan_attention(shape, strides, shape, strides, shape, strides, BF16, causal, 0.125, False,
                              (True,) * 3, H200, window=window)
        scalars = [a for a in plan.launches[0].args[:-2] if not isinstance(a, str)]  # before (sinks, H)
        assert tuple(int(x) for x in scalars if isinstance(x, np.int32))[-2:] == band, (window, causal)


def test_wgmma_tiles_fit():
    for table in WGMMA_TABLES:
        for head_dim, rules in table.items():
            for _, tile in rules:
                assert tile.head_dim == head_dim and tile.block_n in (64, 128)
                assert tile.smem_bytes <= H200.max_smem_per_block
                assert tile.block_m == 64 * tile.warpgroups and tile.threads == 128 * (tile.warpgroups + tile.tma)
                assert select.blocks_per_sm(tile, H200) >= tile.min_blocks
    # 3 warpgroups x 64-key tiles at D128: Q 48 KB + 2 stages x (K + V) 32 KB + the 1 KB alignment
    assert D128_TILE.smem_bytes == (48 + 64 + 1) * 1024
    assert select.WGMMA_PREFILL_CP_ASYNC[96][0][1].smem_bytes == D128_TILE.smem_bytes  # whole 64-column atoms
    # TMA at D128: Q 32 KB + 2 stages x (K + V) 64 KB, Q's full and 8 stage mbarriers, the alignment
    assert D128_TMA.smem_bytes == (32 + 128 + 1) * 1024 + 9 * 8


def test_wgmma_default_rule_goes_by_the_keys_a_row_sees():
    # the tiles per keys a row sees (the points each measured best are in the dispatch snapshot):
    # a short query block against a long cache sees many keys; padded head dims take their
    # bucket's tiles; the thresholds fall between 500.5 and 550.5 mean keys
    for tma_maps, long, mid, d128 in ((True, D64_TMA, D64_TMA, D128_TMA), (False, D64_LONG, D64_MID, D128_TILE)):
        assert select.choose_by_sizes(300, 4096, 64, 64, 512, BF16, H200, True, True, True, tma_maps=tma_maps) == long
        assert select.choose_by_sizes(4096, 4096, 40, 56, 16, F16, H200, True, False, True, tma_maps=tma_maps) == long
        assert select.choose_by_sizes(1000, 1000, 64, 64, 64, F16, H200, True, True, True,
                                      tma_maps=tma_maps) == D64_SHORT  # 500.5
        assert select.choose_by_sizes(1100, 1100, 64, 64, 64, F16, H200, True, True, True,
                                      tma_maps=tma_maps) == mid  # 550.5
        assert select.choose_by_sizes(600, 600, 120, 120, 64, F16, H200, True, True, True, tma_maps=tma_maps) == d128
    # tiles grow with the keys a row sees: 2-block 64-key rows, then 128-key tiles, block ranges last
    rungs = [tile for _, tile in select.WGMMA_PREFILL_CP_ASYNC[64]]
    assert [t.block_n for t in rungs] == sorted(t.block_n for t in rungs) and rungs[-1].wg_ranges is False
    # beyond 512 keys a row at D64, and everywhere else, the TMA-fed tiles
    assert all(tile.tma for rules in select.WGMMA_PREFILL.values() for keys, tile in rules if keys > 512)


def test_wgmma_default_only_where_it_applies():
    prefill = (4096, 4096, 128, 128, 16)
    assert isinstance(select.choose_by_sizes(*prefill, BF16, H200, True, False, True), FlashWgmmaTile)
    # every head dim, on the smallest tile holding it (1.1-2.6x the mma tiles)
    for d, dv, tile_head_dim in ((32, 32, 64), (80, 80, 96), (96, 96, 96), (104, 96, 128), (160, 160, 256),
                                 (192, 128, 256),
                                 (256, 256, 256), (8, 256, 256)):
        config = select.choose_by_sizes(4096, 4096, d, dv, 16, BF16, H200, True, False, True)
        assert isinstance(config, FlashWgmmaTile) and config.head_dim == tile_head_dim
    # a grid of one wave or more runs unsplit on wgmma, even where the wave model would split:
    # one sequence x 32 heads x 4096 causal keys on the cp.async tile (22 blocks of 192 rows a head, 5.3 waves)
    assert select.key_splits(D128_TILE, 4096, 4096, 32, H200)[0] > 1
    assert select.choose_by_sizes(4096, 4096, 128, 128, 32, BF16, H200, True, True, True, tma_maps=False) == D128_TILE
    # elsewhere the mma.sync / decode / SIMT paths: operands without 16-byte rows or a
    # non-positive scale, no wgmma (A100), float32, decode shapes, and a grid under one wave
    # whose keys are split
    assert isinstance(select.choose_by_sizes(*prefill, BF16, H200, True, False, False), FlashMmaTile)
    assert isinstance(select.choose_by_sizes(*prefill, BF16, A100, True, False, True), FlashMmaTile)
    assert select.choose_by_sizes(*prefill, F32, H200, True, False, True) == SimtRows()
    assert isinstance(select.choose_by_sizes(16, 4096, 128, 128, 16, BF16, H200, False, False, True), FlashMmaTile)
    small = select.choose_by_sizes(200, 3000, 64, 64, 1, BF16, H200, True, True, True)
    assert isinstance(small, FlashMmaTile) and small.splits > 1


def assert_decode_split(split, n_k, granule, max_splits):
    """A decode key split: within the cap, splits of whole granules and of at least
    DECODE_MIN_KEYS_PER_SPLIT keys, every split holding keys."""
    assert 1 <= split.splits <= max_splits
    if split.splits > 1:
        assert split.keys_per_split % granule == 0
        assert split.keys_per_split >= select.DECODE_MIN_KEYS_PER_SPLIT
        assert (split.splits - 1) * split.keys_per_split < n_k <= split.splits * split.keys_per_split


@pytest.mark.parametrize("n_k,batch", [(1, 1), (239, 4), (5000, 1), (8192, 256), (65536, 256), (65536, 1)])
def test_decode_split_covers_the_keys(n_k, batch):
    for tile in (DecodeTile(head_dim=128, warps=4, unroll=8), DecodeTile(head_dim=64, warps=8, unroll=4)):
        split = select.split_decode_keys(tile, 1, n_k, batch, H200)
        assert_decode_split(split, n_k, tile.group_keys, select.DECODE_MAX_SPLITS)
        forced = select.split_decode_keys(tile, 1, n_k, batch, H200, splits=7)
        assert forced.splits <= 7 and (forced.splits == 1 or forced.keys_per_split * forced.splits >= n_k)
    # B*H = 256 with 8192 keys: thousands of blocks, not 256
    assert select.split_decode_keys(DecodeTile(head_dim=128, warps=4, unroll=8), 1, 8192, 256, H200).splits >= 8
    assert DecodeTile(head_dim=128, warps=4, unroll=8).spec("__half").template_args == ("__half", 128, 4, 8)


@pytest.mark.parametrize("n_k,batch", [(1, 1), (239, 4), (5000, 1), (1 << 20, 1), (8192, 256), (65536, 1024)])
def test_packed_decode_split_fills_the_device(n_k, batch):
    tile = select.decode_tile(128, 32, H200)
    split = select.split_packed_decode_keys(tile, 32, n_k, batch, H200)
    assert_decode_split(split, n_k, tile.stage_keys, select.DECODE_MAX_SPLITS)
    slots = H200.sm_count * select.blocks_per_sm(tile, H200)
    assert split.splits == 1 or split.splits * batch <= slots  # never a partial second wave
    if n_k >= select.DECODE_MIN_KEYS_PER_SPLIT * slots:  # enough keys: ~a block a resident slot
        assert split.splits * batch >= 0.95 * slots


def test_decode_tiles_by_rows():
    # rows = G x Nq: one 16-row slice up to 16 rows, then 2 or 4 slices as the O registers allow
    assert [select.decode_tile(64, rows, H200).m_tiles for rows in (1, 16, 17, 32, 33, 64, 128)] == [1, 1, 2, 2, 4, 4, 4]
    assert [select.decode_tile(128, rows, H200).m_tiles for rows in (1, 16, 17, 128)] == [1, 1, 2, 2]
    assert [select.decode_tile(256, rows, H200).m_tiles for rows in (1, 64)] == [1, 1]
    tile = select.decode_tile(128, 8, H200)
    assert tile.key_warps and tile.block_m == 16 and tile.stage_keys == 64 and tile.q_in_regs
    assert tile.spec("__half").template_args[-1] is True  # KEY_WARPS


def test_batch_layout_broadcast_and_collapse():
    # GQA: q (2, 8, 3), k/v (2, 1, 1) heads; contiguous (8, 3) collapses into one dim of q.
    sizes, strides = batch_layout((2, 8, 3), {
        "q": ((2, 8, 3, 5, 4), (480, 60, 20, 4, 1)),
        "k": ((2, 1, 1, 5, 4), (20, 20, 20, 4, 1)),
        "v": ((1, 5, 4), (20, 4, 1)),
    })
    assert sizes == (1, 1, 2, 24)
    assert strides == {"q": (0, 0, 480, 20), "k": (0, 0, 20, 0), "v": (0, 0, 0, 0)}
    # a transposed (B, N, H, D) view keeps both strides
    sizes, strides = batch_layout((3, 4), {n: ((3, 4, 7, 8), (224, 8, 32, 1)) for n in "qkv"})
    assert sizes == (1, 1, 3, 4) and strides["q"] == (0, 0, 224, 8)


def test_batch_layout_too_many_dims():
    shape = (2,) * (MAX_BATCH_DIMS + 1) + (3, 4)
    strides = tuple(12 * 3 ** (MAX_BATCH_DIMS - i) for i in range(MAX_BATCH_DIMS + 1)) + (4, 1)  # every third slot
    with pytest.raises(ValueError, match="attention: arguments 'q', 'k', 'v' expected leading dims"):
        batch_layout(shape[:-2], {n: (shape, strides) for n in "qkv"})


# ---------------------------------------------------------------- plans and the variants' checks


def _contiguous(shape):
    return tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))


def _plan(q, k, v, dtype=BF16, dev=H200, causal=False, scale=None, return_lse=False, aligned=(True,) * 3,
          strides=None, config=None):
    strides = strides or {}
    scale = 1 / math.sqrt(q[-1]) if scale is None else scale
    return plan_attention(q, strides.get("q", _contiguous(q)), k, strides.get("k", _contiguous(k)), v,
                          strides.get("v", _contiguous(v)), dtype, causal, scale, return_lse, aligned, dev, config)


def test_plan_of_a_key_split_merges_its_partials():
    plan = _plan((2, 4, 1, 128), (2, 4, 8192, 128), (2, 4, 8192, 128), return_lse=True)
    forward, merge = plan.launches
    splits = forward.args[11]
    assert forward.spec.name == "attention_decode" and splits > 1
    # a decode's workspace is reused per stream
    assert forward.args[:7] == ("q", "k", "v", "out", "lse", Scratch(0), Scratch(1)) and plan.temporaries == ()
    assert plan.scratch.buffers == ((np.float32, splits * 8 * 128, False), (np.float32, splits * 8, False))
    assert merge.block == (merge_threads(splits),) and merge.grid == (8, 4)  # 8 rows x 128 columns
    assert merge.args[:4] == (Scratch(0), Scratch(1), "out", "lse") and merge.args[-1] == 1


def test_large_split_workspaces_are_temporaries_of_the_call():
    # 2 x 16 heads x 16384 rows x 2 splits x (128 + 1) float32 = 270 MB: not held per stream
    forward, merge = _plan((2, 16, 16384, 128), (2, 16, 16384, 128), (2, 16, 16384, 128),
                           config=FlashMmaTile(head_dim=128, warps=8, m_tiles=1, block_n=128, stages=2, min_blocks=1,
                                               q_in_regs=True, skip_pad_cols=False, splits=2,
                                               keys_per_split=8192)).launches
    assert forward.args[5:7] == merge.args[:2] == (Temporary(0), Temporary(1))


def test_merge_blocks_take_eight_splits_a_warp():
    assert [merge_threads(s) for s in (1, 8, 9, 64, 256, 512, 4096)] == [32, 32, 64, 256, 1024, 1024, 1024]


def test_plan_without_split_or_lse():
    # one split: the partial pointers repeat the lse argument, which is "out" without lse
    (forward,) = _plan((64, 16, 1024, 96), (64, 16, 1024, 96), (64, 16, 1024, 96), causal=True,
                       aligned=(False, True, True)).launches
    assert forward.spec.name == "attention_fwd_mma" and forward.args[:7] == ("q", "k", "v", "out") + ("out",) * 3
    (launch,) = _plan((64, 16, 2048, 64), (64, 16, 2048, 64), (64, 16, 2048, 64)).launches
    assert launch.spec == D64_TMA.spec("__nv_bfloat16") and launch.grid == (64 * 16 * 11,)  # 11 tiles of 192 rows
    assert launch.args[:2] == ("out", "out")  # q, k and v come through the tensor maps
    # a negative batch stride has no tensor map: the cp.async tile of the same keys
    flipped = {"q": (-16 * 2048 * 64, 2048 * 64, 64, 1)}
    (launch,) = _plan((64, 16, 2048, 64), (64, 16, 2048, 64), (64, 16, 2048, 64), strides=flipped).launches
    assert launch.spec == D64_LONG.spec("__nv_bfloat16") and launch.args[:5] == ("q", "k", "v", "out", "out")


def test_grouped_query_decode_packs_the_group_into_rows():
    # q (B, Hkv, G, Nq, D) over k / v (B, Hkv, 1, Nk, D): the G x Nq rows of a KV head in one tile
    b, hkv, g, nq, nk, d = 2, 4, 8, 2, 8192, 128
    # q contiguous, then stored (B, Nq, Hkv, G, D): group stride d, row stride Hkv * G * d
    for strides in (None, {"q": (nq * hkv * g * d, g * d, d, hkv * g * d, 1)}):
        forward, merge = _plan((b, hkv, g, nq, d), (b, hkv, 1, nk, d), (b, hkv, 1, nk, d), causal=True,
                               strides=strides).launches
        assert forward.spec.name == "attention_fwd_mma" and forward.spec.template_args[-1] is True
        n_q, q_tiles, queries, group_stride = forward.args[7], forward.args[11], forward.args[12], forward.args[13]
        assert (n_q, q_tiles, queries) == (g * nq, 1, nq)
        assert group_stride == (strides["q"][2] if strides else nq * d)
        splits = forward.args[14]
        assert forward.grid == (b * hkv * splits,) and merge.grid == (b * hkv * g * nq, d // 32)
    # enable_gqa's view of (B, Hq, Nq, D): the same packing; and no packing where k has its heads
    (forward,) = _plan((2, 4, 8, 1, 64), (2, 4, 8, 100, 64), (2, 4, 8, 100, 64)).launches[:1]
    assert forward.spec.name == "attention_decode"


def test_forced_variants_are_checked():
    shapes = ((2, 128, 64),) * 3
    with pytest.raises(ValueError, match="attention: argument 'config' expected a tile head dim >= 64, got 32"):
        _plan(*shapes, config=FlashMmaTile(head_dim=32, warps=4, m_tiles=1, block_n=64, stages=2))
    with pytest.raises(ValueError, match="attention: argument 'config' asks for attention_fwd_mma, which takes"):
        _plan(*shapes, dtype=F32, config=FlashMmaTile(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2))
    with pytest.raises(ValueError, match="which needs compute capability 9.0, got 8.0"):
        _plan(*shapes, dev=A100, config=D64_MID)
    with pytest.raises(ValueError, match="attention: argument 'config' asks for the wgmma kernel, which takes"):
        _plan(*shapes, dtype=F32, config=D64_MID)
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        _plan(*shapes, scale=-0.125, config=D64_MID)
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        _plan(*shapes, strides={"q": (128 * 128, 128, 2)}, config=D64_MID)  # columns 2 elements apart
    with pytest.raises(ValueError, match="attention: argument 'config' expected k and v with 16-byte"):
        _plan(*shapes, aligned=(True, False, True), config=DecodeTile(head_dim=64, warps=4, unroll=8))
    # what passes the checks plans as the default would
    assert _plan(*((64, 1024, 64),) * 3, config=D64_TMA) == _plan(*((64, 1024, 64),) * 3)
    assert _plan(*shapes, dtype=F32, config=SimtRows()) == _plan(*shapes, dtype=F32)
