"""attention's ``window`` and ``softcap``, GPU: every kernel family (forced through ``config=``
and by the default selection) against the float64 oracle by FlashAttention's rule (oracle.py),
on windows narrow and wide, causal and not, rows that see no key (exactly 0, lse -inf),
softcaps alone and with windows on inputs scaled up until tanh saturates, Nq / Nk off the
tile multiples, Dv != D, grouped-query heads, key splits of the visible range, NaN keys
outside the window, prepared calls, and the argument checks on GPU arrays."""
from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import pytest

from cufuse import attention, reference
from cufuse._core.device import current_device_info
from cufuse.ops.attention import select
from cufuse.ops.attention.decode import DecodeTile, decode_head_dim
from cufuse.ops.attention.simt import SimtRows

from .oracle import (BF16, D64_LONG, D64_MID, D64_SHORT, D96_TILE, D128_TILE, D256_TILE, F16, F32, check_against_oracle, error_budget,
                     make_inputs, tma_twin)

F64 = np.dtype(np.float64)


@dataclasses.dataclass(frozen=True)
class Case:
    family: str  # simt, decode, mma64, mma128, mma128s, mma256, packed, wgmma, default
    n_q: int
    n_k: int
    d: int
    dv: int
    dtype: np.dtype
    causal: bool
    window: tuple | None = None
    softcap: float | None = None
    mode: str = "mha"  # make_inputs: mha, mqa, gqa (q (B, Hkv, G, Nq, D))
    group: int = 2
    enable_gqa: bool = False  # gqa inputs run as the 4-D layout (..., Hkv * G, Nq, D)
    splits: int = 1  # a forced config's key split (covering all Nk keys: forced_split)
    q_mult: float = 1.0  # q scaled up: scores of tens, tanh saturates
    scale: float | None = None
    return_lse: bool = True
    use_out: bool = False
    heads: int | None = None  # make_inputs' heads (KV heads for gqa); None: 2 for mqa, else 1
    tile: object = None  # the wgmma tile
    noop: bool = False  # window / softcap that leave the result as without them


def C(family, n_q, n_k, d, dv, dtype, causal, window=None, softcap=None, **kw):
    """A Case, the common fields positional."""
    return Case(family, n_q, n_k, d, dv, dtype, causal, window, softcap, **kw)


CASES = [
    # SimtRows: float32 / float64, any head dim, one warp a row
    C("simt", 300, 700, 64, 48, F32, True, (5, 3), use_out=True),
    C("simt", 130, 4099, 40, 24, F64, False, (100, 100), 5.0, mode="gqa"),
    C("simt", 777, 777, 32, 32, F32, True, (256, 0), 30.0, mode="mqa", q_mult=8, return_lse=False, use_out=True),
    C("simt", 300, 100, 16, 16, F64, False, (0, 0), use_out=True),  # rows 0..199 (p < 0) see no key
    C("simt", 1, 5000, 64, 64, F32, False, (64, None)),
    # DecodeTile (Nq <= 4, one query row a block), unsplit and forced splits of the visible keys
    C("decode", 1, 5000, 128, 128, BF16, False, (64, None), use_out=True),
    C("decode", 1, 5000, 128, 128, BF16, True, (1000, 17), splits=3),
    C("decode", 3, 4099, 128, 96, BF16, True, (100, 100), 30.0, mode="mqa", splits=5, q_mult=8, use_out=True),
    C("decode", 3, 4099, 64, 64, F16, False, (5, 3), 5.0, splits=2, q_mult=4, return_lse=False),
    C("decode", 3, 2, 64, 64, F16, False, (0, 0), use_out=True),  # row 0 (p = -1) sees no key
    C("decode", 3, 239, 64, 64, F16, True, (None, 64), mode="mqa", splits=2, noop=True),  # = causal
    # FlashMmaTile prefill tiles (64, 128 long-key and short-key, 256 buckets), unsplit and split
    C("mma64", 300, 700, 64, 64, BF16, True, (256, 0), use_out=True),
    C("mma64", 777, 777, 64, 40, F16, False, (5, 3), 5.0, q_mult=4, return_lse=False),
    C("mma64", 130, 4099, 64, 64, BF16, True, (1000, 17), mode="gqa", splits=3, use_out=True),
    C("mma64", 300, 100, 64, 64, BF16, False, (0, 0), use_out=True),  # rows 0..199 see no key
    C("mma64", 300, 100, 64, 64, F16, True, (5, 3)),  # causal Nq > Nk: rows 0..199 see no key
    C("mma64", 300, 700, 64, 64, BF16, False, (5, 3), 5.0, mode="gqa", group=4, enable_gqa=True, splits=2,
      q_mult=4),
    C("mma128", 300, 700, 128, 96, F16, False, None, 30.0, q_mult=8),  # softcap alone
    C("mma128", 200, 3000, 128, 128, BF16, True, (100, 100), 30.0, splits=4, q_mult=8, use_out=True),
    C("mma128", 300, 700, 128, 128, F16, False, (64, 64), 5.0, scale=-0.1),  # negative scale, softcap
    C("mma128s", 777, 777, 128, 96, BF16, False, (None, 64), 5.0, mode="mqa", q_mult=4, return_lse=False,
      use_out=True),
    C("mma128s", 300, 257, 128, 128, F16, True, (1000, 1000), noop=True),  # wider than Nk: causal alone
    C("mma256", 130, 700, 200, 256, BF16, True, (1, 0), use_out=True),
    C("mma256", 300, 700, 256, 256, F16, False, (1000, 17), 5.0, splits=2),
    # key_warps FlashMmaTile: G query heads x Nq queries packed into the rows of one KV head
    C("packed", 1, 5000, 128, 128, BF16, True, (256, 0), mode="gqa", group=4, use_out=True),
    C("packed", 3, 4099, 64, 64, F16, False, (5, 3), 30.0, mode="gqa", group=8, splits=4, q_mult=8),
    C("packed", 16, 700, 200, 200, BF16, True, (100, 100), mode="gqa", group=4, enable_gqa=True, splits=2,
      use_out=True),
    C("packed", 5, 3, 64, 64, F16, False, (0, 0), mode="gqa", group=2, use_out=True),  # rows 0, 1 see no key
    C("packed", 2, 5000, 128, 128, BF16, False, (1000, 17), 5.0, mode="gqa", group=8, splits=3, q_mult=4,
      return_lse=False),
    # FlashWgmmaTile (compute capability 9.0): the default rule's tiles
    C("wgmma", 300, 300, 64, 64, BF16, True, (64, None), tile=D64_SHORT, use_out=True),
    C("wgmma", 300, 100, 64, 64, F16, True, (5, 3), tile=D64_SHORT),  # rows 0..199 see no key
    C("wgmma", 777, 777, 64, 48, F16, False, None, 30.0, tile=D64_MID, q_mult=8),  # softcap alone
    C("wgmma", 777, 777, 64, 64, BF16, False, (100, 100), 5.0, tile=D64_MID, use_out=True),
    C("wgmma", 1, 5000, 64, 64, F16, True, (1, 0), tile=D64_MID),
    C("wgmma", 300, 2000, 64, 64, BF16, True, (1000, 17), tile=D64_LONG, use_out=True),  # block-wide ranges
    C("wgmma", 130, 4099, 64, 64, F16, False, (5, 3), 5.0, tile=D64_LONG, q_mult=4, return_lse=False),
    C("wgmma", 300, 700, 128, 96, F16, True, (256, 0), tile=D128_TILE, use_out=True),
    C("wgmma", 300, 100, 128, 128, BF16, False, (0, 0), tile=D128_TILE, use_out=True),  # rows 0..199 see no key
    C("wgmma", 257, 700, 120, 128, BF16, False, (None, 64), 30.0, tile=D128_TILE, mode="gqa", group=4,
      enable_gqa=True, q_mult=8),
    C("wgmma", 300, 700, 256, 192, BF16, True, (256, 0), 30.0, tile=D256_TILE, q_mult=4),
    C("wgmma", 300, 700, 96, 80, F16, True, (100, 0), 5.0, tile=D96_TILE, q_mult=4, use_out=True),
    C("wgmma", 257, 523, 160, 160, F16, False, (100, 17), tile=D256_TILE, use_out=True),
    # the default selection: decode, packed decode, wgmma or mma prefill, simt, splits by the span
    C("default", 1, 5000, 128, 128, BF16, True, (256, 0), use_out=True),
    C("default", 1, 5000, 128, 128, BF16, False, (0, 0)),
    C("default", 1, 5000, 64, 64, F16, True, (2 ** 40, 0), noop=True),  # a side far beyond 32 bits
    C("default", 3, 4099, 128, 128, BF16, False, (1000, 17), 30.0, mode="gqa", group=8, q_mult=8),
    C("default", 777, 777, 128, 128, F16, True, (100, 100), use_out=True),
    C("default", 130, 4099, 64, 64, F16, False, (64, None), return_lse=False),
    C("default", 300, 700, 128, 128, BF16, False, (5, 3), 5.0, mode="gqa", group=4, enable_gqa=True, q_mult=4),
    C("default", 300, 700, 64, 64, F32, True, None, 5.0),  # simt, softcap alone
    C("default", 2048, 2048, 128, 128, BF16, True, (256, 0), use_out=True),  # sliding-window prefill
    C("default", 300, 100, 64, 64, BF16, True, (50, 0), use_out=True),  # rows 0..199 see no key
    C("default", 300, 700, 64, 64, F16, False, (64, 64), 5.0, scale=-0.1),  # negative scale, softcap
    C("default", 777, 777, 64, 64, BF16, False, None, 30.0, q_mult=8, return_lse=False),  # softcap alone
    C("default", 300, 257, 64, 64, F16, False, (1000, 1000), noop=True),  # wider than Nk both ways
]

WINDOWS = [(0, 0), (1, 0), (5, 3), (64, None), (None, 64), (256, 0), (100, 100), (1000, 17)]
FAMILIES = ("simt", "decode", "mma64", "mma128", "mma128s", "mma256", "packed", "wgmma", "default")


def case_id(c):
    window = "none" if c.window is None else f"{c.window[0]}-{c.window[1]}".replace("None", "inf")
    return (f"{c.family}-{c.n_q}x{c.n_k}-d{c.d}-dv{c.dv}-{c.mode}-{c.dtype.name}-{'causal' if c.causal else 'full'}"
            f"-w{window}" + (f"-cap{c.softcap:g}" if c.softcap else "") + (f"-s{c.splits}" if c.splits > 1 else "")
            + ("-4d" if c.enable_gqa else "") + ("-lse" if c.return_lse else "") + ("-out" if c.use_out else ""))


def case_inputs(rng, c):
    heads = c.heads or (2 if c.mode == "mqa" else 1)
    q, k, v = make_inputs(rng, c.n_q, c.n_k, c.d, c.dv, c.mode, c.dtype, heads=heads, group=c.group)
    if c.q_mult != 1:
        q = (q.astype(np.float32) * np.float32(c.q_mult)).astype(c.dtype)
    return q, k, v


def forced_split(tile, n_k, splits):
    """``tile`` with ``splits`` key splits of equal multiples of its granule covering all
    ``n_k`` keys (so every block's visible range, however it is placed); one split unsplit."""
    if splits == 1:
        return dataclasses.replace(tile, splits=1, keys_per_split=0)
    granule = tile.group_keys if isinstance(tile, DecodeTile) else tile.stage_keys
    keys_per_split = math.ceil(math.ceil(n_k / splits) / granule) * granule
    return dataclasses.replace(tile, splits=splits, keys_per_split=keys_per_split)


def case_config(c, dev):
    """The config a case forces (None for the default selection)."""
    width = max(c.d, c.dv)
    bucket = select.head_dim_bucket(width)
    if c.family == "default":
        return None
    if c.family == "simt":
        return SimtRows()
    if c.family == "wgmma":
        return c.tile
    if c.family == "decode":
        tile = DecodeTile(head_dim=decode_head_dim(width), warps=4, unroll=8)
    elif c.family == "packed":
        tile = select.decode_tile(bucket, c.group * c.n_q, dev)
    else:
        tiles = select.prefill_tiles(bucket, dev)
        tile = tiles[1] if c.family == "mma128s" else tiles[0]
    return forced_split(tile, c.n_k, c.splits)


def require_wgmma():
    if not current_device_info().has_wgmma:
        pytest.skip("attention_fwd_wgmma needs compute capability 9.0")


def test_case_table_covers_the_brief():
    assert {c.family for c in CASES} == set(FAMILIES)
    assert set(WINDOWS) <= {c.window for c in CASES}
    for family in FAMILIES:
        of = [c for c in CASES if c.family == family]
        assert {c.causal for c in of} == {False, True}, family
        assert any(c.softcap for c in of) and any(c.window for c in of), family
        assert any(c.use_out for c in of) and any(c.return_lse for c in of), family
    for family in ("decode", "mma64", "mma128", "mma256", "packed"):  # forced splits > 1
        assert any(c.splits > 1 for c in CASES if c.family == family), family
    assert {c.dtype for c in CASES} == {F16, BF16, F32, F64}
    assert {c.tile for c in CASES if c.family == "wgmma"} == {D64_SHORT, D64_MID, D64_LONG, D96_TILE, D128_TILE, D256_TILE}
    assert {c.family for c in CASES if c.enable_gqa} >= {"mma64", "packed", "wgmma", "default"}
    assert {c.family for c in CASES if c.d != c.dv} >= {"simt", "decode", "mma64", "mma128", "wgmma"}
    for n_q, n_k in ((300, 700), (1, 5000), (130, 4099), (777, 777)):
        assert any((c.n_q, c.n_k) == (n_q, n_k) for c in CASES)
    # softcaps that saturate (q scaled up) and windows that leave rows without keys
    assert any(c.softcap and c.q_mult > 1 for c in CASES) and any(c.softcap and c.window for c in CASES)
    keyless = {c.family for c in CASES if c.window is not None
               and not reference.visible_keys(np.arange(c.n_k), c.n_q, c.n_k, c.causal, c.window).any(axis=1).all()}
    assert keyless >= set(FAMILIES) - {"mma128", "mma128s", "mma256"}
    assert all(c.return_lse for c in CASES if c.window is not None and c.n_q > c.n_k)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cases_change_the_result(case):
    """CPU: each case's window / softcap moves the oracle's result by more than twice the
    error the kernels are allowed (so a kernel ignoring them fails), or, for the ``noop``
    ones, not at all."""
    c = case
    rng = np.random.default_rng(zlib.crc32(case_id(c).encode()))
    q, k, v = case_inputs(rng, dataclasses.replace(c, heads=1, group=1))
    scale = 1 / math.sqrt(c.d) if c.scale is None else c.scale
    plain = reference.attention(q, k, v, causal=c.causal, scale=scale)
    got = reference.attention(q, k, v, causal=c.causal, scale=scale, window=c.window, softcap=c.softcap)
    diff = np.abs(got - plain).max()
    if c.noop:
        assert diff < 1e-12
    else:
        naive_err, floor = error_budget(q, k, v, got, c.causal, scale, c.window, c.softcap)
        assert diff > 2 * (2 * naive_err + floor), (diff, naive_err, floor)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_oracle(cp, rng, case):
    c = case
    if c.family == "wgmma":
        require_wgmma()
    q, k, v = case_inputs(rng, c)
    config = case_config(c, current_device_info())
    failures = check_against_oracle(cp, q, k, v, causal=c.causal, return_lse=c.return_lse, use_out=c.use_out,
                                    scale=c.scale, config=config, enable_gqa=c.enable_gqa, window=c.window,
                                    softcap=c.softcap)
    assert failures == []


@pytest.mark.parametrize("case", [dataclasses.replace(c, tile=tma_twin(c.tile)) for c in CASES if c.family == "wgmma"],
                         ids=lambda c: case_id(c) + "-tma")
def test_tma_tiles_match_oracle(cp, rng, case):
    # the windowed and softcapped wgmma cases on the TMA-fed kernel
    test_matches_oracle(cp, rng, case)


def _families_for_split_tests(dev):
    """(name, tile, n_q, mode): the tiles whose splits cover only the visible keys."""
    return [
        ("decode", DecodeTile(head_dim=64, warps=4, unroll=8), 1, "mha"),
        ("mma64", select.prefill_tiles(64, dev)[0], 200, "mha"),
        ("packed", select.decode_tile(64, 4 * 3, dev), 3, "gqa"),
    ]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["decode", "mma64", "packed"])
def test_forced_split_covers_the_visible_keys_not_all_keys(cp, rng, index):
    """Splits divide each block's visible key range: 2 x 128 keys cover a (100, 0) window's
    (at most 64 rows + 100 keys a block) but not 3000 keys."""
    dev = current_device_info()
    name, tile, n_q, mode = _families_for_split_tests(dev)[index]
    granule = tile.group_keys if isinstance(tile, DecodeTile) else tile.stage_keys
    keys_per_split = math.ceil(128 / granule) * granule
    config = dataclasses.replace(tile, splits=2, keys_per_split=keys_per_split)
    q, k, v = make_inputs(rng, n_q, 3000, 64, 64, mode, BF16, group=4)
    for causal, window in ((True, (100, 0)), (False, (50, 50)), (True, (100, 7))):
        assert check_against_oracle(cp, q, k, v, causal=causal, return_lse=True, use_out=True, config=config,
                                    window=window) == [], (causal, window)
    for window in (None, (1000, 0), (None, 0)):
        with pytest.raises(ValueError, match=r"attention: argument 'config'"):
            attention(*(cp.asarray(x) for x in (q, k, v)), causal=True, window=window, config=config)


@pytest.mark.parametrize("family", ["simt", "decode", "mma64", "wgmma", "default"])
def test_nan_key_outside_the_window_reaches_no_row(cp, rng, family):
    """A NaN key makes exactly the rows whose window holds it NaN; the rest stay finite (masked
    or skipped keys never enter a row's sums)."""
    if family == "wgmma":
        require_wgmma()
    dev = current_device_info()
    n_q, n_k = (4, 3000) if family == "decode" else (200, 200)
    dtype = F32 if family == "simt" else BF16
    q, k, v = make_inputs(rng, n_q, n_k, 64, 64, "mha", dtype, heads=1)
    config = {"simt": SimtRows(), "decode": forced_split(DecodeTile(head_dim=64, warps=4, unroll=8), n_k, 3),
              "mma64": forced_split(select.prefill_tiles(64, dev)[0], n_k, 2), "wgmma": D64_MID,
              "default": None}[family]
    window = (2, 0) if family == "decode" else (10, 3)
    for bad in (n_k - 3, n_k // 2, 5):
        k_bad = k.copy()
        k_bad[..., bad, 7] = np.nan
        got = attention(cp.asarray(q), cp.asarray(k_bad), cp.asarray(v), causal=family != "mma64", window=window,
                        config=config)
        got = cp.asnumpy(got).astype(np.float64)
        visible = reference.visible_keys(np.arange(n_k), n_q, n_k, family != "mma64", window)
        sees = visible[:, bad]
        assert np.isnan(got[..., sees, :]).all() and np.isfinite(got[..., ~sees, :]).all(), bad


def test_prepared_calls_key_on_window_and_softcap(cp, rng):
    """Repeated signatures with other windows / softcaps run their own masks; an equal window
    given as a list or with NumPy ints is the same; a float side is still refused after an
    int one was prepared; results are bitwise reproducible."""
    q, k, v = make_inputs(rng, 3, 3000, 64, 64, "mha", BF16)
    dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
    calls = [dict(window=(5, 0)), dict(window=(100, 0)), dict(), dict(window=(5, 0), softcap=2.0),
             dict(window=(5, 0), softcap=20.0), dict(window=(5, 0))]
    for _ in range(2):
        for kw in calls:
            got = cp.asnumpy(attention(dq, dk, dv, causal=True, **kw)).astype(np.float64)
            want = reference.attention(q, k, v, causal=True, **kw)
            assert np.abs(got - want).max() < 0.05, kw
    first = attention(dq, dk, dv, window=(5, 3), return_lse=True)
    for window in ((5, 3), [5, 3], (np.int64(5), np.int32(3))):
        again = attention(dq, dk, dv, window=window, return_lse=True)
        assert all(bool((a.view(cp.uint8) == b.view(cp.uint8)).all()) for a, b in zip(first, again)), window
    with pytest.raises(ValueError, match=r"attention: argument 'window' expected"):
        attention(dq, dk, dv, window=(5.0, 3))
    with pytest.raises(ValueError, match=r"attention: argument 'window' expected"):
        attention(dq, dk, dv, window=(5, True))
    attention(dq, dk, dv, softcap=1.0)
    with pytest.raises(TypeError, match=r"attention: argument 'softcap' expected"):
        attention(dq, dk, dv, softcap=True)


@pytest.mark.parametrize("kw,error", [
    (dict(window=3), TypeError), (dict(window=(1, 2, 3)), TypeError), (dict(window=(-1, 0)), ValueError),
    (dict(window=(0, -5)), ValueError), (dict(window=(1.5, None)), ValueError), (dict(softcap=0.0), ValueError),
    (dict(softcap=-3.0), ValueError), (dict(softcap=float("inf")), ValueError), (dict(softcap="5"), TypeError),
], ids=lambda x: x.__name__ if isinstance(x, type) else "-".join(f"{k}={v!r}" for k, v in x.items()))
def test_bad_window_and_softcap_on_gpu_arrays(cp, rng, kw, error):
    q, k, v = (cp.asarray(x) for x in make_inputs(rng, 4, 100, 64, 64, "mha", BF16))
    name = next(iter(kw))
    for _ in range(2):  # the second call after a prepared good one of the same signature
        with pytest.raises(error, match=rf"^attention: argument '{name}' expected "):
            attention(q, k, v, **kw)
        attention(q, k, v, window=(2, 2), softcap=4.0)
