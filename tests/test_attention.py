"""attention: config selection and batch layout (CPU), kernels against the float64 oracle (GPU).

Correctness uses FlashAttention's rule: the kernel's max error against the float64 oracle is
at most twice the error of the same computation done naively in the input dtype (scores,
probabilities and output rounded to the dtype at each step, emulated on the CPU), plus the
output dtype's rounding floor.
"""
from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from cufuse import attention, reference
from cufuse._configs import A100, H200
from cufuse._configs import attention as configs
from cufuse.attention import MAX_BATCH_DIMS, batch_layout

try:
    from conftest import allocations, poisoned
except ImportError:  # run as a script from elsewhere
    from tests.conftest import allocations, poisoned

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)

SHAPES = [(1, 1), (1, 239), (113, 203), (128, 217), (108, 256), (256, 512), (512, 256), (1023, 1024),
          (1024, 1023), (239, 1), (799, 3), (2048, 2048)]
HEAD_DIMS = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
MODES = ("mha", "mqa", "gqa")


# ---------------------------------------------------------------- CPU: configs and layout


@pytest.mark.parametrize("dev", [H200, A100], ids=["H200", "A100"])
def test_every_selected_tile_fits_and_is_instantiated(dev):
    specs = set(configs.instantiations(dev))
    for n_q, n_k, d, dv, batch, kv_rows_16b in itertools.product(
            (1, 4, 5, 16, 17, 4096), (1, 100, 65536), (1, 64, 128, 200, 256), (8, 128, 256), (1, 256), (False, True)):
        for dtype, causal, wgmma_operands in itertools.product((F16, BF16), (False, True), (False, True)):
            config = configs.select_config(n_q, n_k, d, dv, batch, dtype, dev, kv_rows_16b, causal,
                                           wgmma_operands and kv_rows_16b)
            tile = config.tile
            assert tile.head_dim >= max(d, dv)
            assert tile.spec(configs.ctype(dtype)) in specs
            streamed = kv_rows_16b and n_q <= configs.DECODE_STREAM_MAX_QUERIES
            assert isinstance(tile, configs.DecodeTile) == streamed
            if streamed:
                step = tile.group_keys
            else:
                assert tile.smem_bytes <= dev.max_smem_per_block
                assert (tile.block_m == 16) == (n_q <= configs.DECODE_MAX_QUERIES)
                assert isinstance(tile, configs.WgmmaTile) <= (dev.has_wgmma and config.splits == 1)
                step = tile.block_n
            if config.splits > 1:
                assert config.keys_per_split % step == 0
                # every split holds keys, none is left over
                assert (config.splits - 1) * config.keys_per_split < n_k <= config.splits * config.keys_per_split
    assert configs.select_config(5, 5, 8, 8, 1, F32, dev).tile is None
    assert configs.simt_spec("double") in specs and configs.merge_spec("__nv_bfloat16") in specs


def test_head_dim_buckets():
    assert [configs.head_dim_bucket(d) for d in (1, 32, 33, 64, 65, 111, 128, 129, 193, 256)] == [
        32, 32, 64, 64, 96, 128, 128, 192, 256, 256]
    with pytest.raises(ValueError):
        configs.head_dim_bucket(257)


def test_split_model():
    # A full grid is not split; a lone (batch, head) with a long key range is.
    assert configs.choose_splits(base_blocks=1024, n_tiles=128, slots=264) == 1
    assert configs.choose_splits(base_blocks=1, n_tiles=1024, slots=264) >= 64
    assert configs.choose_splits(base_blocks=8, n_tiles=1, slots=264) == 1
    # 4096 blocks on 132 slots: 2 splits model 0.05% faster, less than the merge costs
    assert configs.choose_splits(base_blocks=4096, n_tiles=128, slots=132) == 1
    assert configs.choose_splits(base_blocks=140, n_tiles=100, slots=132) > 1  # 1.06 waves
    # decode at B*H = 8 with 65536 keys fills the device, on both decode paths
    for kv_rows_16b in (False, True):
        plan = configs.select_config(1, 65536, 128, 128, 8, BF16, H200, kv_rows_16b)
        assert plan.splits * 8 >= H200.sm_count


def test_default_tiles_are_the_measured_best():
    # round-3 sweep (H200 bf16): register-streaming decode
    decode = configs.select_config(1, 8192, 128, 128, 256, BF16, H200, True)
    assert decode.tile == configs.DecodeTile(128, 4, 8) and decode.splits > 1
    assert isinstance(configs.select_config(1, 8192, 59, 59, 256, BF16, H200, False).tile, configs.MmaTile)
    # round-4 sweep (/tmp/h200-run8): D64 4 warps x 16 rows x 64 keys, 3 blocks per SM, at every
    # length; D128 the 8-warp 128-key tile for long key ranges, the 2-block tile for short ones
    three_blocks = configs.MmaTile(64, 4, 1, 64, 2, 3, True, False)
    long_keys = configs.MmaTile(128, 8, 1, 128, 2, 1, True, False)
    short_keys = configs.MmaTile(128, 4, 1, 64, 2, 2, True, False)
    for n, causal in itertools.product((512, 2048, 16384), (False, True)):
        assert configs.select_config(n, n, 64, 64, 32768 // n * 16, F16, H200, True, causal).tile == three_blocks
    for n, causal, tile in ((512, False, short_keys), (512, True, short_keys), (2048, True, long_keys),
                            (2048, False, long_keys), (8192, False, long_keys), (16384, True, long_keys)):
        config = configs.select_config(n, n, 128, 128, 32768 // n * 16, BF16, H200, True, causal)
        assert config.tile == tile and config.splits == 1
    assert configs.prefill_tiles(128, A100)[0].block_n == 64  # 128-key tiles exceed A100's shared memory
    assert configs.prefill_tiles(256, A100)[0].block_n == 32


def test_mean_visible_keys():
    assert configs.mean_visible_keys(512, 512, False) == 512
    assert configs.mean_visible_keys(512, 512, True) == 256.5  # rows see 1..512 keys
    assert configs.mean_visible_keys(100, 300, True) == 250.5  # rows see 201..300
    assert configs.mean_visible_keys(300, 100, True) == 100 * 101 / 2 / 300  # 200 rows see none
    for n_q, n_k in ((1, 1), (7, 3), (3, 7), (64, 1000)):
        exact = sum(min(n_k, max(0, i + n_k - n_q + 1)) for i in range(n_q)) / n_q
        assert math.isclose(configs.mean_visible_keys(n_q, n_k, True), exact)


def test_wgmma_tiles_fit_and_are_instantiated():
    h200, a100 = set(configs.instantiations(H200)), set(configs.instantiations(A100))
    for head_dim, tiles in configs.WGMMA_TILES.items():
        for tile in tiles:
            assert tile.head_dim == head_dim and tile.block_n in (64, 128)
            assert tile.smem_bytes <= H200.max_smem_per_block
            assert tile.block_m == 64 * tile.warpgroups and tile.threads == 128 * tile.warpgroups
            assert configs.blocks_per_sm(tile, H200) >= tile.min_blocks
            for name in configs.MMA_CTYPES:
                spec = tile.spec(name)
                assert spec.name == "attention_fwd_wgmma" and spec.min_cc == 90
                assert spec in h200 and spec not in a100
    # 2 warpgroups x 128-key tiles at D128: Q 32 KB + 2 stages x (K + V) 64 KB + the 1 KB alignment
    assert configs.WgmmaTile(128, 2, 128, 2).smem_bytes == (32 + 128 + 1) * 1024


# The prefill grid (B = 32768 / N, H = 16) and the wgmma tile the default rule gives
# each point: the best tile of the H200 bf16 sweep of 14:17 (bench/NOTES.md, attention v6 / v7).
(_, D64_SHORT), (_, D64_MID), (_, D64_LONG) = configs.WGMMA_PREFILL[64]
((_, D128_TILE),) = configs.WGMMA_PREFILL[128]
MEASURED_BEST = [  # (n, head_dim, causal, tile)
    (512, 64, False, D64_SHORT), (512, 64, True, D64_SHORT), (2048, 64, False, D64_LONG),
    (2048, 64, True, D64_MID), (8192, 64, False, D64_LONG), (8192, 64, True, D64_LONG),
    (16384, 64, False, D64_LONG), (16384, 64, True, D64_LONG), (512, 128, False, D128_TILE),
    (512, 128, True, D128_TILE), (2048, 128, False, D128_TILE), (2048, 128, True, D128_TILE),
    (8192, 128, True, D128_TILE), (16384, 128, False, D128_TILE),
]


def test_wgmma_default_rule_is_the_measured_best():
    assert configs.WGMMA_PREFILL_DEFAULT
    assert (D64_SHORT.warpgroups, D64_SHORT.block_n, D64_SHORT.min_blocks, D64_SHORT.wg_ranges) == (2, 64, 2, True)
    assert (D64_MID.warpgroups, D64_MID.block_n, D64_MID.wg_ranges) == (3, 128, True)
    assert (D64_LONG.warpgroups, D64_LONG.block_n, D64_LONG.wg_ranges) == (3, 128, False)  # block ranges
    assert (D128_TILE.warpgroups, D128_TILE.block_n, D128_TILE.wg_ranges) == (3, 64, True)
    assert not any(tile.persistent or tile.ordered for bucket in configs.WGMMA_PREFILL.values() for _, tile in bucket)
    for (n, d, causal, tile), dtype in itertools.product(MEASURED_BEST, (F16, BF16)):
        config = configs.select_config(n, n, d, d, 32768 // n * 16, dtype, H200, True, causal, True)
        assert config == configs.AttentionConfig(tile), (n, d, causal)
    # the rule goes by the keys a row sees, not by N: a short query block against a long cache
    # sees many keys; padded head dims take their bucket's tiles
    assert configs.select_config(300, 4096, 64, 64, 512, BF16, H200, True, True, True).tile == D64_LONG
    assert configs.select_config(4096, 4096, 40, 56, 16, F16, H200, True, False, True).tile == D64_LONG
    assert configs.select_config(1000, 1000, 64, 64, 64, F16, H200, True, True, True).tile == D64_SHORT  # 500.5
    assert configs.select_config(1100, 1100, 64, 64, 64, F16, H200, True, True, True).tile == D64_MID  # 550.5
    assert configs.select_config(600, 600, 120, 120, 64, F16, H200, True, True, True).tile == D128_TILE


def test_wgmma_grid_and_persistent_tiles():
    # one block per (query tile, batch) item, or the resident blocks for a persistent tile
    plain, persistent = configs.WGMMA_TILES[128][0], configs.WgmmaTile(128, 3, 64, 2, persistent=True)
    assert configs.wgmma_grid(plain, 3072, H200) == 3072
    assert configs.wgmma_grid(persistent, 3072, H200) == H200.sm_count  # 384 threads: 1 block per SM
    assert configs.wgmma_grid(persistent, 100, H200) == 100  # fewer items than SMs
    two_per_sm = configs.WgmmaTile(64, 2, 64, 2, 2, persistent=True)
    assert configs.wgmma_grid(two_per_sm, 4096, H200) == 2 * H200.sm_count
    # the persistent tile double-buffers Q: D128 3 warpgroups: 2 x 48 KB Q + 2 stages x (K + V) 64 KB
    assert persistent.smem_bytes == (2 * 48 + 64 + 1) * 1024
    assert persistent.spec("__half").template_args[-1] is True
    with pytest.raises(ValueError, match="persistent wgmma tile expects 2 stages, got 3"):
        configs.WgmmaTile(128, 3, 64, 3, persistent=True)


def test_wgmma_default_only_where_it_applies():
    prefill = (4096, 4096, 128, 128, 16)
    assert isinstance(configs.select_config(*prefill, BF16, H200, True, False, True).tile, configs.WgmmaTile)
    # elsewhere the mma.sync / decode / SIMT paths: operands without 16-byte rows or a
    # non-positive scale, no wgmma (A100), a head-dim bucket without a wgmma tile, float32,
    # decode shapes, and a grid so small that the keys are split
    assert isinstance(configs.select_config(*prefill, BF16, H200, True, False, False).tile, configs.MmaTile)
    assert isinstance(configs.select_config(*prefill, BF16, A100, True, False, True).tile, configs.MmaTile)
    for d in (32, 96, 192, 256):
        assert isinstance(configs.select_config(4096, 4096, d, d, 16, BF16, H200, True, False, True).tile,
                          configs.MmaTile)
    assert configs.select_config(*prefill, F32, H200, True, False, True).tile is None
    assert isinstance(configs.select_config(16, 4096, 128, 128, 16, BF16, H200, False, False, True).tile,
                      configs.MmaTile)
    small = configs.select_config(200, 3000, 64, 64, 1, BF16, H200, True, True, True)
    assert isinstance(small.tile, configs.MmaTile) and small.splits > 1


@pytest.mark.parametrize("n_k,batch", [(1, 1), (239, 4), (5000, 1), (8192, 256), (65536, 256), (65536, 1)])
def test_decode_plan_covers_the_keys(n_k, batch):
    for tile in (configs.DecodeTile(128, 4, 8), configs.DecodeTile(64, 8, 4)):
        plan = configs.plan_decode(tile, 1, n_k, batch, H200)
        assert 1 <= plan.splits <= configs.MAX_SPLITS
        if plan.splits > 1:
            assert plan.keys_per_split % tile.group_keys == 0
            assert plan.keys_per_split >= configs.DECODE_MIN_KEYS_PER_SPLIT
            assert (plan.splits - 1) * plan.keys_per_split < n_k <= plan.splits * plan.keys_per_split
        forced = configs.plan_decode(tile, 1, n_k, batch, H200, splits=7)
        assert forced.splits <= 7 and (forced.splits == 1 or forced.keys_per_split * forced.splits >= n_k)
    # B*H = 256 with 8192 keys: thousands of blocks, not 256
    assert configs.plan_decode(configs.DecodeTile(128, 4, 8), 1, 8192, 256, H200).splits >= 8
    assert configs.DecodeTile(128, 4, 8).spec("__half").template_args == ("__half", 128, 4, 8)


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


# ---------------------------------------------------------------- GPU helpers


def make_inputs(rng, n_q, n_k, d, dv, mode, dtype, batch=1, heads=2, group=2):
    """q, k, v as NumPy arrays in ``dtype``; k/v broadcast over heads for MQA/GQA."""
    if mode == "mha":
        qs, ks = (batch, heads, n_q, d), (batch, heads, n_k, d)
    elif mode == "mqa":
        qs, ks = (batch, heads, n_q, d), (batch, 1, n_k, d)
    else:  # GQA: (B, Hkv, G, N, D) with k/v (B, Hkv, 1, N, D)
        qs, ks = (batch, heads, group, n_q, d), (batch, heads, 1, n_k, d)
    q = rng.standard_normal(qs).astype(dtype)
    k = rng.standard_normal(ks).astype(dtype)
    v = rng.standard_normal(ks[:-1] + (dv,)).astype(dtype)
    return q, k, v


def naive_in_dtype(q, k, v, causal, scale, dtype):
    """softmax(q k^T * scale) v with every intermediate rounded to ``dtype`` (float32 math)."""
    def rnd(x):
        return x.astype(dtype).astype(np.float32)

    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    scores = rnd(rnd(np.matmul(q32, np.swapaxes(k32, -1, -2))) * np.float32(scale))
    n_q, n_k = scores.shape[-2:]
    if causal:
        visible = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        scores = np.where(visible, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        m = scores.max(axis=-1, keepdims=True)
        p = np.where(np.isfinite(m), np.exp(scores - np.where(np.isfinite(m), m, 0)), 0)
        total = p.sum(axis=-1, keepdims=True)
        p = rnd(np.where(total > 0, p / np.where(total > 0, total, 1), 0))
    return rnd(np.matmul(p, v32))


def check_against_oracle(cp, q, k, v, *, causal, return_lse, use_out, scale=None, config=None, to_device=None):
    """Run the kernel on (q, k, v), compare with the float64 oracle by FlashAttention's rule.
    ``to_device`` maps each operand to the device array the kernel gets (default
    ``cp.asarray``; e.g. a strided view). Returns a list of failure messages (empty when it passes)."""
    to_device = to_device or cp.asarray
    dtype = q.dtype
    scale_value = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    ref, ref_lse = reference.attention(q, k, v, causal=causal, scale=scale_value, return_lse=True)
    kwargs = dict(causal=causal, scale=scale, return_lse=return_lse, config=config)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = poisoned(cp, batch + (q.shape[-2], v.shape[-1]), dtype) if use_out else None
    result = attention(to_device(q), to_device(k), to_device(v), out=out, **kwargs)
    got, lse = result if return_lse else (result, None)
    if use_out and got is not out:
        return ["out was not returned"]
    got = cp.asnumpy(got).astype(np.float64)
    failures = []
    if not np.isfinite(got).all():
        failures.append(f"{np.count_nonzero(~np.isfinite(got))} non-finite outputs")
    naive = naive_in_dtype(q, k, v, causal, scale_value, dtype)
    naive_err = np.abs(naive.astype(np.float64) - ref).max(initial=0)
    floor = 2 * np.abs((ref + 0.3 - 0.3).astype(dtype).astype(np.float64) - ref).max(initial=0) + 1e-5
    err = np.abs(got - ref).max(initial=0)
    if not err <= 2 * naive_err + floor:
        failures.append(f"max error {err:.3g} > 2 * naive {naive_err:.3g} + floor {floor:.3g}")
    if return_lse:
        lse = cp.asnumpy(lse)
        if lse.dtype != np.float32 or lse.shape != ref_lse.shape:
            failures.append(f"lse {lse.dtype} {lse.shape}, expected float32 {ref_lse.shape}")
        else:
            same_inf = np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
            finite = np.isfinite(ref_lse)
            lse_err = np.abs(lse[finite] - ref_lse[finite]).max(initial=0)
            if not same_inf or lse_err > 2e-3 * (1 + np.abs(ref_lse[finite]).max(initial=0)):
                failures.append(f"lse error {lse_err:.3g} (same -inf pattern: {same_inf})")
    return failures


def covering_cases():
    """A covering design over the factors (not the cross product): every (Nq, Nk), head dim,
    Dv != D, causal, mode, dtype and return_lse value appears; f32 on a subset."""
    cases = []
    for i in range(24):
        n_q, n_k = SHAPES[i % len(SHAPES)]
        d = HEAD_DIMS[(7 * i) % len(HEAD_DIMS)]
        dv = d if i % 4 else HEAD_DIMS[(7 * i + 5) % len(HEAD_DIMS)]
        causal = bool((i // 2) % 2) if i < 12 else bool(i % 2)
        mode = MODES[i % 3]
        dtype = (F16, BF16)[(i // 3) % 2]
        return_lse = bool((i // 4) % 2) or i % 5 == 0
        use_out = i % 3 == 1
        cases.append((n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out))
    cases += [
        (113, 203, 40, 40, True, "gqa", F32, True, True),
        (1, 239, 128, 64, False, "mqa", F32, True, False),
        (256, 512, 256, 256, True, "mha", F32, False, False),
    ]
    return cases


def _case_id(case):
    n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
    return f"{n_q}x{n_k}-d{d}-dv{dv}-{'causal' if causal else 'full'}-{mode}-{dtype.name}" + (
        "-lse" if return_lse else "") + ("-out" if use_out else "")


def test_covering_design_covers_every_value():
    cases = covering_cases()
    assert {(c[0], c[1]) for c in cases} == set(SHAPES)
    assert set(HEAD_DIMS) <= {c[2] for c in cases}
    assert any(c[2] != c[3] for c in cases)
    assert {c[4] for c in cases} == {False, True} and {c[7] for c in cases} == {False, True}
    assert {c[5] for c in cases} == set(MODES)
    assert {c[6] for c in cases} == {F16, BF16, F32}
    for dtype in (F16, BF16):  # both 16-bit dtypes meet both masks and every mode
        assert {c[4] for c in cases if c[6] == dtype} == {False, True}
        assert {c[5] for c in cases if c[6] == dtype} == set(MODES)


# ---------------------------------------------------------------- GPU tests


@pytest.mark.parametrize("case", covering_cases(), ids=_case_id)
def test_matches_oracle(cp, rng, case):
    n_q, n_k, d, dv, causal, mode, dtype, return_lse, use_out = case
    big = n_q * n_k >= 1 << 20
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, heads=1 if big else 2)
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=use_out) == []


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_split_keys_prefill_and_decode(cp, rng, dtype):
    # One (batch, head) with many keys: the wave model splits them; then merge.
    for n_q, n_k, causal in ((200, 3000, True), (16, 5000, False), (3, 4099, True)):
        plan = configs.select_config(n_q, n_k, 64, 64, 1, dtype, configs_device(cp), True)
        assert plan.splits > 1
        q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", dtype, heads=1)
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []


# Explicit configs of the variants the sweep (bench/sweep_attention.py) tries: the register
# decode kernel (one query row per block, K/V straight to registers) and a branch-free MMA
# tile on padded head dims (the zero padding must make the skipped steps harmless).
OVERRIDE_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, tile, splits)
    (1, 239, 128, 128, False, "mha", BF16, configs.DecodeTile(128, 4, 8), None),
    (1, 5000, 64, 64, True, "gqa", F16, configs.DecodeTile(64, 4, 8), None),
    (3, 4099, 128, 96, True, "mqa", BF16, configs.DecodeTile(128, 8, 4), 5),
    (16, 700, 40, 40, False, "gqa", F16, configs.DecodeTile(64, 2, 8), 3),
    (5, 3, 32, 32, True, "mha", BF16, configs.DecodeTile(32, 4, 4), None),
    (113, 203, 40, 56, True, "gqa", BF16, configs.MmaTile(64, 8, 1, 64, 2, 1, True, False), None),
    (256, 517, 111, 104, False, "mha", F16, configs.MmaTile(128, 8, 1, 64, 2, 1, True, False), None),
    # pipelined QK^T: causal diagonal, a ragged last tile, one-tile and empty key ranges, key splits
    (113, 203, 40, 56, True, "gqa", BF16, configs.MmaTile(64, 8, 1, 64, 3, 1, True, False, True), None),
    (256, 517, 111, 104, False, "mha", BF16, configs.MmaTile(128, 8, 1, 64, 3, 1, True, False, True), None),
    (239, 1, 64, 64, True, "mqa", BF16, configs.MmaTile(64, 8, 1, 64, 3, 1, True, False, True), None),
    (200, 3000, 64, 64, True, "mha", BF16, configs.MmaTile(64, 8, 1, 64, 3, 1, True, False, True), None),
    # the long-key default tile without a key split: O staged in shared memory, then stored
    # element-wise (odd Dv) or in 16-byte chunks, on ragged last query tiles (300 = 2 x 128 + 44)
    (300, 700, 128, 111, True, "mha", BF16, configs.MmaTile(128, 8, 1, 128, 2, 1, True, False), 1),
    (300, 700, 96, 128, False, "gqa", F16, configs.MmaTile(128, 8, 1, 128, 2, 1, True, False), 1),
]


def override_config(case, q, k, dev):
    """The AttentionConfig of an OVERRIDE_CASES entry for inputs q, k (an MMA tile with
    splits 1: unsplit; None: the planner's splits)."""
    n_q, n_k, tile, splits = case[0], case[1], case[7], case[8]
    batch = int(np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2])))
    if isinstance(tile, configs.DecodeTile):
        return configs.plan_decode(tile, n_q, n_k, batch, dev, splits)
    if splits == 1:
        return configs.AttentionConfig(tile)
    return configs.plan_splits(tile, n_q, n_k, batch, dev)


@pytest.mark.parametrize("case", OVERRIDE_CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-{type(c[7]).__name__}")
def test_config_override_variants(cp, rng, case):
    n_q, n_k, d, dv, causal, mode, dtype, tile, splits = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
    config = override_config(case, q, k, configs_device(cp))
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True, config=config) == []


def test_decode_tile_nan_key_and_unaligned_rows(cp, rng):
    # causal, Nq = 4, Nk = 3000: row i sees key j iff j <= i + 2996
    q, k, v = make_inputs(rng, 4, 3000, 64, 64, "mha", BF16, heads=1)
    config = configs.plan_decode(configs.DecodeTile(64, 4, 8), 4, 3000, 1, configs_device(cp), 3)
    for bad, first_seeing in ((100, 0), (2998, 2)):
        k_bad = k.copy()
        k_bad[..., bad, 5] = np.nan
        got = attention(cp.asarray(q), cp.asarray(k_bad), cp.asarray(v), causal=True, config=config)
        got = cp.asnumpy(got).astype(np.float32)
        assert np.isfinite(got[..., :first_seeing, :]).all() and np.isnan(got[..., first_seeing:, :]).all()
    # k rows not 16-byte aligned: the decode tile refuses instead of misreading
    wide = cp.asarray(rng.standard_normal((1, 3000, 65)).astype(BF16))
    with pytest.raises(ValueError, match="attention: argument 'config' expected k and v with 16-byte"):
        attention(cp.asarray(q[0]), wide[:, :, 1:], wide[:, :, 1:], config=config)


def configs_device(cp):
    from cufuse._configs import current_device_info

    return current_device_info()


def test_strided_views_and_scalar_path(cp, rng):
    # (B, N, H, D) storage viewed as (B, H, N, D): strided rows, no copy, 16-byte loads.
    stores = [rng.standard_normal((2, n, 3, dd)).astype(F16) for n, dd in ((300, 64), (257, 64), (257, 48))]
    views = [np.swapaxes(x, 1, 2) for x in stores]
    ref = reference.attention(*views, causal=True)
    # out 2 bytes off 16-byte alignment (Dv 48): the epilogue's element-wise store path
    out = cp.full(math.prod(ref.shape) + 1, np.nan, dtype=F16)[1:].reshape(ref.shape)
    got = attention(*(cp.asarray(x).swapaxes(1, 2) for x in stores), causal=True, out=out)
    assert got is out
    naive_err = np.abs(naive_in_dtype(*views, True, 1 / 8, F16) - ref).max()
    assert np.abs(cp.asnumpy(got).astype(np.float64) - ref).max() <= 2 * naive_err + 1e-3
    # a non-unit last-axis stride, a misaligned base and an odd Dv take the scalar-load path
    wide = cp.asarray(rng.standard_normal((2, 130, 64)).astype(BF16))
    views = wide[:, :, ::2], wide[:, 1:, 1:33], wide[:, 1:, 33:]
    host = [cp.asnumpy(x) for x in views]
    ref = reference.attention(*host, scale=0.3)
    got = attention(*views, scale=0.3)
    naive_err = np.abs(naive_in_dtype(*host, False, 0.3, BF16) - ref).max()
    assert np.abs(cp.asnumpy(got).astype(np.float64) - ref).max() <= 2 * naive_err + 1e-2


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_causal_rows_without_keys_are_exactly_zero(cp, rng, dtype):
    n_q, n_k = 300, 100  # query i sees key j iff j <= i - 200: rows 0..199 see nothing
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", dtype)
    out = poisoned(cp, (1, 2, n_q, 64), dtype)
    got, lse = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, return_lse=True, out=out)
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse)
    assert (got[..., :200, :] == 0).all() and np.isneginf(lse[..., :200]).all()
    assert np.isfinite(got[..., 200:, :]).all() and np.isfinite(lse[..., 200:]).all()
    # decode-shaped: Nq = 8 > Nk = 3, split path not needed
    q, k, v = make_inputs(rng, 8, 3, 32, 32, "mha", dtype)
    got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True)).astype(np.float64)
    assert (got[..., :5, :] == 0).all() and np.isfinite(got).all()


@pytest.mark.parametrize("n_q,n_k", [(200, 200), (4, 4096)])
def test_nan_key_reaches_only_rows_that_see_it(cp, rng, n_q, n_k):
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", BF16, heads=1)
    bad = n_k - 2 if n_q < 16 else 70  # causal: rows i >= bad - (n_k - n_q) see it
    k[..., bad, 5] = np.nan
    got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True)).astype(np.float64)
    first_seeing = bad - (n_k - n_q)
    assert np.isnan(got[..., first_seeing:, :]).all()
    assert np.isfinite(got[..., :first_seeing, :]).all()
    ref = reference.attention(q, k, v, causal=True)[..., :first_seeing, :]
    naive_err = np.abs(naive_in_dtype(q, k, v, True, 1 / 8, BF16)[..., :first_seeing, :] - ref).max(initial=0)
    assert np.abs(got[..., :first_seeing, :] - ref).max(initial=0) <= 2 * naive_err + 1e-2


def test_float64_simt_path(cp, rng):
    q, k, v = make_inputs(rng, 37, 71, 24, 40, "gqa", np.dtype(np.float64))
    got, lse = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, return_lse=True)
    ref, ref_lse = reference.attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(lse), ref_lse.astype(np.float32), rtol=1e-6)


def _counting_kernels(monkeypatch):
    """Patch the loader so every launch through get_kernel is recorded."""
    import cufuse._loader as loader

    launches = []
    real = loader.get_kernel

    def get_kernel(source, name, *args, **kwargs):
        kernel = real(source, name, *args, **kwargs)

        def launch(*a, **kw):
            launches.append(name)
            return kernel(*a, **kw)

        return launch

    monkeypatch.setattr(loader, "get_kernel", get_kernel)
    return launches


def test_launch_counts(cp, rng, monkeypatch):
    launches = _counting_kernels(monkeypatch)
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 1, 8192, 128, 128, "mha", BF16, batch=2, heads=2))
    attention(q, k, v)  # 4 (batch, head) pairs: split-KV decode
    assert launches == ["attention_decode", "attention_merge"]
    launches.clear()
    attention(q[..., :127], k[..., :127], v)  # k rows not 16-byte aligned: the MMA decode tile
    assert launches == ["attention_fwd_mma", "attention_merge"]
    launches.clear()
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 1024, 1024, 128, 128, "mha", BF16, batch=4, heads=16))
    attention(q, k, v, causal=True)  # prefill: the wgmma kernel on compute capability 9.0
    assert launches == ["attention_fwd_wgmma" if configs_device(cp).has_wgmma else "attention_fwd_mma"]
    launches.clear()
    attention(q, k, v, scale=-0.1)  # a negative scale keeps the mma.sync kernel
    assert launches == ["attention_fwd_mma"]


def test_memory_is_linear_in_sequence_length(cp, rng):
    n, d = 16384, 64
    q, k, v = (cp.asarray(rng.standard_normal((1, 1, n, d)).astype(F16)) for _ in range(3))
    (out, lse), requested = allocations(cp, lambda: attention(q, k, v, causal=True, return_lse=True))
    cp.cuda.get_current_stream().synchronize()
    # out + lse + the split workspace (splits * N * (Dv + 1) float32): O(N);
    # one score matrix alone would be N^2 * 2 bytes = 512 MiB.
    bound = out.nbytes + lse.nbytes + 16 * n * (d + 1) * 4  # the wave model picks <= 16 splits here
    assert sum(requested) <= bound < n * n * 2 // 4
    assert np.isfinite(cp.asnumpy(out[0, 0, ::512]).astype(np.float32)).all()


def test_q_beyond_2_pow_31_elements(cp, rng):
    d, n_k = 128, 64
    n_q = (1 << 31) // d + 300  # q has more than 2^31 elements
    q = cp.zeros((1, n_q, d), dtype=BF16)
    head = rng.standard_normal((64, d)).astype(BF16)
    tail = rng.standard_normal((300, d)).astype(BF16)
    q[0, :64] = cp.asarray(head)
    q[0, -300:] = cp.asarray(tail)
    k, v = (rng.standard_normal((1, n_k, d)).astype(BF16) for _ in range(2))
    got = attention(q, cp.asarray(k), cp.asarray(v), causal=True)
    for rows, sl in ((head, slice(0, 64)), (tail, slice(n_q - 300, n_q))):
        # bottom-right causal: query i sees keys j <= i + n_k - n_q (none for the head rows)
        offset = sl.start + n_k - n_q
        visible = np.arange(n_k)[None, :] <= np.arange(len(rows))[:, None] + offset
        scores = rows.astype(np.float64) @ k[0].astype(np.float64).T / math.sqrt(d)
        scores = np.where(visible, scores, -np.inf)
        with np.errstate(invalid="ignore"):
            m = scores.max(axis=-1, keepdims=True)
            p = np.where(np.isfinite(m), np.exp(scores - np.where(np.isfinite(m), m, 0)), 0)
            total = p.sum(axis=-1, keepdims=True)
            ref = np.where(total > 0, p / np.where(total > 0, total, 1), 0) @ v[0].astype(np.float64)
        np.testing.assert_allclose(cp.asnumpy(got[0, sl]).astype(np.float64), ref, atol=3e-2)


# ---------------------------------------------------------------- GPU: Hopper wgmma prefill

W64, W128 = configs.WGMMA_TILES[64][0], configs.WGMMA_TILES[128][0]
NON_PERSISTENT = {hd: tuple(t for t in tiles if not t.persistent) for hd, tiles in configs.WGMMA_TILES.items()}
# Ordered so that the first failure points at one part of attention_fwd_wgmma: (1) one full key
# tile of D64, no masking: S = Q K^T (Q/K descriptors), P as A fragments, V N-major, epilogue;
# (2) several key tiles: the cp.async ring and the S(j) / P V(j-1) pipeline; (3) D128: the
# second 64-column swizzle atom of Q/K and of V; then ragged, causal, empty rows, GQA/MQA,
# padded head dims, lse off, and every other swept tile.
WGMMA_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse)
    (128, 128, 64, 64, False, "mha", BF16, W64, True),
    (128, 512, 64, 64, False, "mha", F16, W64, True),
    (128, 512, 128, 128, False, "mha", BF16, W128, True),
    (113, 203, 64, 64, True, "gqa", BF16, W64, True),
    (1023, 1024, 128, 128, True, "mha", F16, W128, True),
    (1024, 1023, 64, 64, False, "mqa", F16, W64, False),
    (1024, 1023, 128, 128, True, "gqa", BF16, W128, True),
    (239, 1, 128, 128, True, "mha", BF16, W128, True),  # Nq > Nk: whole blocks and rows see no key
    (1, 239, 64, 64, True, "mha", F16, W64, True),  # one query row
    (300, 700, 40, 56, True, "mqa", BF16, W64, True),  # head dims padded to 64
    (257, 300, 96, 128, False, "mha", F16, W128, False),  # D padded to 128
    # every other candidate tile, causal (per-warpgroup ranges on the diagonal, the ordered
    # turns with warpgroups that skip) and full (1023 rows: idle warpgroups in the last block)
    *[(1023, 1024, t.head_dim, t.head_dim, causal, "gqa", (F16, BF16)[i % 2], t, True)
      for i, t in enumerate(NON_PERSISTENT[64][1:] + NON_PERSISTENT[128][1:]) for causal in (True, False)],
]


def _wgmma_id(case):
    n_q, n_k, d, dv, causal, mode, dtype, tile, lse = case
    return (f"{n_q}x{n_k}-d{d}-dv{dv}-{'causal' if causal else 'full'}-{mode}-{dtype.name}-"
            f"hd{tile.head_dim}w{tile.warpgroups}n{tile.block_n}s{tile.stages}b{tile.min_blocks}"
            + ("" if tile.overlap else "-nooverlap") + ("" if tile.wg_ranges else "-blockranges")
            + ("-ordered" if tile.ordered else "") + ("-lse" if lse else ""))


def require_wgmma(cp):
    if not configs_device(cp).has_wgmma:
        pytest.skip("attention_fwd_wgmma needs compute capability 9.0")


def error_map(got, ref, tol):
    """Where |got - ref| > tol, as the pattern of bad rows and columns modulo the kernel's
    tiling: a descriptor or swizzle error shows up in particular 8-row groups or 8-column
    chunks of the 64-wide atoms, a pipeline error in whole key/query tiles."""
    err = np.abs(got.astype(np.float64) - ref).reshape(-1, *ref.shape[-2:]).max(axis=0)
    bad = ~(err <= tol)
    rows, cols = np.nonzero(bad.any(axis=1))[0], np.nonzero(bad.any(axis=0))[0]
    if not rows.size:
        return "no element beyond tolerance"
    return (f"bad rows {rows.size}/{err.shape[0]} (first {rows[:8].tolist()}; per row % 64 // 8: "
            f"{np.bincount(rows % 64 // 8, minlength=8).tolist()}), bad cols {cols.size}/{err.shape[1]} "
            f"(per col % 64 // 8: {np.bincount(cols % 64 // 8, minlength=8).tolist()}), max error {err.max():.3g}")


def check_wgmma(cp, q, k, v, tile, *, causal, return_lse, scale=None):
    """check_against_oracle for a wgmma tile (poisoned out); on failure adds the error map."""
    config = configs.AttentionConfig(tile)
    failures = check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=True, scale=scale,
                                    config=config)
    if failures:
        got = cp.asnumpy(attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal, scale=scale,
                                   config=config))
        ref = reference.attention(q, k, v, causal=causal, scale=scale)
        failures.append(error_map(got, ref, 2e-2))
    return failures


# The default rule's wgmma tiles through config=None (48 (batch, head) pairs: enough query
# tiles that the wave model does not split the keys, which would fall back to mma.sync).
DEFAULT_RULE_CASES = [  # (n_q, n_k, d, dv, causal, dtype, tile)
    (300, 300, 64, 64, True, BF16, D64_SHORT),
    (250, 1000, 64, 64, False, F16, D64_MID),
    (250, 2000, 64, 64, True, F16, D64_LONG),
    (300, 300, 128, 128, True, F16, D128_TILE),
    (257, 700, 128, 96, False, BF16, D128_TILE),
]


@pytest.mark.parametrize("case", DEFAULT_RULE_CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-{'causal' if c[4] else 'full'}")
def test_wgmma_default_rule_dispatch(cp, rng, monkeypatch, case):
    require_wgmma(cp)
    n_q, n_k, d, dv, causal, dtype, tile = case
    config = configs.select_config(n_q, n_k, d, dv, 48, dtype, configs_device(cp), True, causal, True)
    assert config == configs.AttentionConfig(tile)
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, "mha", dtype, batch=3, heads=16)
    launches = _counting_kernels(monkeypatch)
    assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True) == []
    assert launches == ["attention_fwd_wgmma"]


def test_wgmma_uniform_scores_isolate_p_v(cp, rng):
    # scale 1e-6: every probability is ~1/Nk whatever S is, so the output is the mean of V:
    # this passes with a wrong S = Q K^T (or a permuted P fragment) and fails with a wrong V
    # layout, P V descriptor, row sum or store. (In the other tests lse depends on S alone:
    # a right lse with a wrong output points at P / V, a wrong lse at Q / K or the masking.)
    require_wgmma(cp)
    q, k, v = make_inputs(rng, 128, 128, 64, 64, "mha", BF16)
    assert check_wgmma(cp, q, k, v, W64, causal=False, return_lse=True, scale=1e-6) == []


@pytest.mark.parametrize("case", WGMMA_CASES, ids=_wgmma_id)
def test_wgmma_matches_oracle(cp, rng, case):
    require_wgmma(cp)
    n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype)
    assert check_wgmma(cp, q, k, v, tile, causal=causal, return_lse=return_lse) == []


# Persistent tiles (grid = resident blocks, H200: 132, or 264 for D64's 2 blocks per SM):
# several items per block and a ragged last round, ragged last query tiles (400 = 2 x 192 + 16
# rows; 3 x 128 + 16) and key tiles, causal with items whose rows see no key (Nq > Nk: the
# handover after a keyless item), GQA / MQA, Dv != D, lse on and off.
(P64,) = (t for t in configs.WGMMA_TILES[64] if t.persistent)
P128, P128_2 = (t for t in configs.WGMMA_TILES[128] if t.persistent)
PERSISTENT_CASES = [  # (n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse, batch, heads)
    (400, 333, 64, 64, False, "gqa", BF16, P64, True, 2, 30),  # 480 items (D64 2/SM: 264 blocks)
    (400, 333, 128, 128, True, "mha", F16, P128, True, 3, 40),  # 360 items, causal
    (700, 300, 64, 64, True, "mqa", F16, P64, False, 1, 60),  # 360 items, 3 of 6 per head keyless
    (400, 1000, 128, 96, False, "gqa", BF16, P128_2, True, 2, 15),  # 480 items
    (400, 150, 128, 128, True, "mha", BF16, P128, True, 1, 60),  # 180 items, 1 of 3 per head keyless
]


@pytest.mark.parametrize("case", PERSISTENT_CASES, ids=lambda c: _wgmma_id(c[:9]) + f"-b{c[9]}h{c[10]}-persistent")
def test_wgmma_persistent_matches_oracle(cp, rng, case):
    require_wgmma(cp)
    n_q, n_k, d, dv, causal, mode, dtype, tile, return_lse, batch, heads = case
    q, k, v = make_inputs(rng, n_q, n_k, d, dv, mode, dtype, batch=batch, heads=heads)
    items = -(-n_q // tile.block_m) * math.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    assert items > configs.wgmma_grid(tile, items, configs_device(cp))  # blocks loop over items
    assert check_wgmma(cp, q, k, v, tile, causal=causal, return_lse=return_lse) == []


@pytest.mark.parametrize("tile", [W64, W128], ids=["hd64", "hd128"])
def test_wgmma_strided_views_and_misaligned_out(cp, rng, tile):
    # (B, N, H, D) storage viewed as (B, H, N, D): rows H * D apart; out 2 bytes off 16-byte
    # alignment takes the element-wise store; causal with Nq > Nk: rows without keys are 0
    require_wgmma(cp)
    d = tile.head_dim
    q_store = rng.standard_normal((2, 300, 3, d)).astype(F16)
    k_store, v_store = (rng.standard_normal((2, 257, 3, d)).astype(F16) for _ in range(2))
    views = [np.swapaxes(x, 1, 2) for x in (q_store, k_store, v_store)]
    ref, ref_lse = reference.attention(*views, causal=True, return_lse=True)
    out = cp.full(math.prod(ref.shape) + 1, np.nan, dtype=F16)[1:].reshape(ref.shape)
    got, lse = attention(*(cp.asarray(x).swapaxes(1, 2) for x in (q_store, k_store, v_store)), causal=True,
                         return_lse=True, out=out, config=configs.AttentionConfig(tile))
    assert got is out
    got, lse = cp.asnumpy(got).astype(np.float64), cp.asnumpy(lse)
    assert (got[..., :43, :] == 0).all() and np.isneginf(lse[..., :43]).all()
    naive_err = np.abs(naive_in_dtype(*views, True, 1 / math.sqrt(d), F16) - ref).max()
    assert np.abs(got - ref).max() <= 2 * naive_err + 1e-3, error_map(got, ref, 2 * naive_err + 1e-3)
    assert np.abs(lse[..., 43:] - ref_lse[..., 43:]).max() <= 2e-3 * (1 + np.abs(ref_lse[..., 43:]).max())


# attention v8 (per-thread K/V/Q streams, fixed-column O store) on the default tiles: operands
# stored (B, N, H, D) and viewed (B, H, N, D), so rows are H * D apart (the streams' row steps),
# Nq and Nk off the tile multiples, causal with Nq > Nk (keyless rows) and Nq < Nk, Dv < D,
# lse on and off, poisoned (16-byte aligned) out.
STREAM_CASES = [  # (n_q, n_k, d, dv, causal, dtype, tile, return_lse)
    (300, 257, 64, 64, True, BF16, D64_SHORT, True),
    (257, 700, 64, 48, False, F16, D64_MID, False),
    (333, 1100, 64, 64, True, BF16, D64_LONG, True),
    (300, 257, 128, 128, True, F16, D128_TILE, False),
    (200, 523, 128, 96, True, BF16, D128_TILE, True),
    (1000, 77, 128, 128, False, BF16, D128_TILE, True),
]


@pytest.mark.parametrize("case", STREAM_CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-dv{c[3]}-{'causal' if c[4] else 'full'}-"
                         f"w{c[6].warpgroups}n{c[6].block_n}")
def test_wgmma_default_tiles_on_strided_rows(cp, rng, case):
    require_wgmma(cp)
    assert check_stream_case(cp, rng, case) == []


def check_stream_case(cp, rng, case):
    """A STREAM_CASES case (also run by sanitize_attention.py); failure messages as check_against_oracle."""
    n_q, n_k, d, dv, causal, dtype, tile, return_lse = case
    q, k, v = (rng.standard_normal((2, 3, n, width)).astype(dtype) for n, width in ((n_q, d), (n_k, d), (n_k, dv)))

    def strided(x):  # the same values, stored (B, N, H, D)
        return cp.asarray(np.ascontiguousarray(np.swapaxes(x, 1, 2))).swapaxes(1, 2)

    return check_against_oracle(cp, q, k, v, causal=causal, return_lse=return_lse, use_out=True,
                                config=configs.AttentionConfig(tile), to_device=strided)


def test_wgmma_nan_key_reaches_only_rows_that_see_it(cp, rng):
    require_wgmma(cp)
    q, k, v = make_inputs(rng, 200, 200, 64, 64, "mha", BF16, heads=1)
    k[..., 70, 5] = np.nan  # causal, Nq = Nk: rows >= 70 see key 70
    got = attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=True, config=configs.AttentionConfig(W64))
    got = cp.asnumpy(got).astype(np.float64)
    assert np.isnan(got[..., 70:, :]).all() and np.isfinite(got[..., :70, :]).all()


def test_wgmma_config_preconditions(cp, rng):
    require_wgmma(cp)
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 128, 128, 64, 64, "mha", BF16))
    config = configs.AttentionConfig(W64)
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        attention(q, k, v, scale=-0.125, config=config)
    with pytest.raises(ValueError, match="attention: argument 'config' expected q, k and v with unit last-axis"):
        attention(q[..., ::2], k[..., ::2], v, config=config)  # D 32 but columns 2 elements apart
    with pytest.raises(ValueError, match="attention: argument 'config' expected one key split"):
        attention(q, k, v, config=configs.AttentionConfig(W64, 2, 64))
    with pytest.raises(ValueError, match="attention: argument 'config' asks for the wgmma kernel, which takes"):
        attention(q.astype(F32), k.astype(F32), v.astype(F32), config=config)
