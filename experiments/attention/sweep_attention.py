"""Sweep of attention kernel variants on the attention benchmark's key shapes (H200, standalone).

Run as ``python3 experiments/attention/sweep_attention.py``; prints one line per (shape,
variant) and the peers (torch SDPA FLASH / CUDNN) measured in the same run; writes nothing.
``python3 experiments/attention/sweep_attention.py --wgmma-grid [bfloat16|float16]`` times
instead the Hopper wgmma prefill tiles (the default ones and ``WGMMA_CANDIDATES``) against the
default (the wgmma rule) and the v4 mma.sync tile on the whole prefill grid of the bench (D
64/128, N 512..16384, B = 32768 / N, H 16, causal and full), with the peers. Every variant
goes through the public ``cufuse.attention(..., config=...)`` and its output is compared
with the default configuration's (and the default with SDPA FLASH), so a fast but wrong
variant is flagged. One variant failing never stops the sweep; past TIME_LIMIT_S the
remaining variants are skipped.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import cupy  # noqa: E402

import cufuse  # noqa: E402
from cufuse._core.device import current_device_info  # noqa: E402
from cufuse._core.dtypes import ctype  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse.ops.attention import select  # noqa: E402
from cufuse.ops.attention.decode import DecodeTile  # noqa: E402
from cufuse.ops.attention.merge import merge_spec  # noqa: E402
from cufuse.ops.attention.mma import FlashMmaTile  # noqa: E402
from cufuse.ops.attention.wgmma import FlashWgmmaTile  # noqa: E402
from cufuse.bench import cases  # noqa: E402
from cufuse.bench.runner import relative_difference, release_memory  # noqa: E402
from cufuse.bench.timing import rotation_count, time_cuda_budget  # noqa: E402

TIME_LIMIT_S = 75.0
GRID_TIME_LIMIT_S = 100.0  # --wgmma-grid, per dtype list given
BUDGET_MS = 120.0  # timing budget per variant
MAX_REL_ERROR = 2e-2  # vs the default config, relative to max |out| (bf16 rounding is 4e-3)
ANCHORS = """peers (an earlier sweep, same H200): N2048 D128 bf16 full  SDPA flash 349 / cudnn 667 TFLOP/s
                           N2048 D128 bf16 causal SDPA flash 303 / cudnn 546 TFLOP/s
                           decode B8 H32 Nk8192 D128: flash 2.71 / cudnn 4.43 TB/s (target >= 3.8)
anchors-h200.json: FA2 300-350 TFLOP/s at D128, cuDNN 510-613; decode FA2 2.6, cuDNN 4.3-4.7 TB/s
cufuse's first mma tiles: full 217, causal 163 TFLOP/s, decode 1.81 TB/s
decode sweep: 8w x16r bn128 nobranch full 238 / causal 199 (D128), decode simt 4w u8 4.2-4.5 TB/s
mma prefill sweep: D128 N2048 full 236 / causal 184; D64 3 blk/SM 188 / 158; N512 D128 causal 2 blk/SM 138"""

M, Dec, W = FlashMmaTile, DecodeTile, FlashWgmmaTile
# (label, tile) per padded head dim; None = the default selection. Each distinct tile is one
# NVRTC compile (per dtype). The mma defaults (from the mma prefill sweep): D64
# the 3-blocks/SM tile everywhere; D128 the 8-warp 128-key tile for long key ranges, the
# 2-blocks/SM tile when a row sees <= 512 keys on average. Each is swept explicitly against
# the other candidates, and the O store now goes through shared memory (16-byte stores).
PREFILL_VARIANTS = {
    128: [
        ("default", None),
        ("8w x16r bn128 s2 Qreg nobranch (long keys)", M(head_dim=128, warps=8, m_tiles=1, block_n=128, stages=2,
                                                         min_blocks=1, q_in_regs=True, skip_pad_cols=False)),
        ("4w x16r bn64 s2 Qreg nobranch (2 blk/SM, short keys)",
         M(head_dim=128, warps=4, m_tiles=1, block_n=64, stages=2, min_blocks=2, q_in_regs=True, skip_pad_cols=False)),
        ("old default 4w x32r bn64 s2 Qsmem", M(head_dim=128, warps=4, m_tiles=2, block_n=64, stages=2)),
    ],
    64: [
        ("default", None),
        ("4w x16r bn64 s2 Qreg nobranch (3 blk/SM)", M(head_dim=64, warps=4, m_tiles=1, block_n=64, stages=2,
                                                       min_blocks=3, q_in_regs=True, skip_pad_cols=False)),
        ("8w x16r bn128 s2 Qreg nobranch (v3 default)", M(head_dim=64, warps=8, m_tiles=1, block_n=128, stages=2,
                                                          min_blocks=1, q_in_regs=True, skip_pad_cols=False)),
        ("4w x16r bn128 s2 Qreg nobranch (2 blk/SM)", M(head_dim=64, warps=4, m_tiles=1, block_n=128, stages=2,
                                                        min_blocks=2, q_in_regs=True, skip_pad_cols=False)),
    ],
}
# (label, tile, splits); splits None = the tile's own planner.
DECODE_VARIANTS = [
    ("default (simt 4w u8)", None, None),
    ("old default mma 1w bn64 s3", M(head_dim=128, warps=1, m_tiles=1, block_n=64, stages=3), None),
    ("simt 4w u8 splits=8", Dec(head_dim=128, warps=4, unroll=8), 8),
    ("simt 8w u8", Dec(head_dim=128, warps=8, unroll=8), None),
]
PREFILL_SHAPES = [  # (batch, heads, n, head_dim, causal, dtype)
    (16, 16, 2048, 128, False, "bfloat16"),
    (16, 16, 2048, 128, True, "bfloat16"),
    (16, 16, 2048, 64, False, "bfloat16"),
    (16, 16, 2048, 64, True, "bfloat16"),
    (4, 16, 8192, 128, False, "bfloat16"),
    (64, 16, 512, 128, True, "bfloat16"),
    (64, 16, 512, 64, False, "bfloat16"),
    (2, 16, 16384, 64, True, "bfloat16"),
    (16, 16, 2048, 128, True, "float16"),
]
DECODE_KEYS = (8192, 65536)


# Swept wgmma tiles besides the default ones (select.WGMMA_PREFILL), all lost to them in the
# wgmma sweeps (docs/attention.md). The kernel's ordered, persistent and no-overlap forms
# are gone; git history has them.
WGMMA_CANDIDATES = {
    64: (W(head_dim=64, warpgroups=1, block_n=128, stages=2, min_blocks=3),
         W(head_dim=64, warpgroups=1, block_n=64, stages=2, min_blocks=4)),
    128: (W(head_dim=128, warpgroups=2, block_n=128, stages=2), W(head_dim=128, warpgroups=2, block_n=64, stages=2),
          W(head_dim=128, warpgroups=3, block_n=64, stages=2, wg_ranges=False)),
}
WGMMA_TILES = {hd: tuple(dict.fromkeys([t for _, t in select.WGMMA_PREFILL[hd]] + list(WGMMA_CANDIDATES[hd])))
               for hd in WGMMA_CANDIDATES}


def wgmma_label(tile):
    return (f"wgmma {tile.warpgroups}wg x64r bn{tile.block_n} s{tile.stages}"
            + (f" {tile.min_blocks} blk/SM" if tile.min_blocks > 1 else "")
            + ("" if tile.wg_ranges else " block-ranges"))


WGMMA_VARIANTS = {hd: [("default", None)] + [(wgmma_label(t), t) for t in tiles] for hd, tiles in WGMMA_TILES.items()}
MMA_SYNC_LABEL = "mma.sync (v4 default)"
GRID_SHAPES = [(cases.ATTENTION_TOKENS // n, cases.ATTENTION_HEADS, n, hd, causal)
               for hd in cases.ATTENTION_HEAD_DIMS for n in cases.ATTENTION_N for causal in (False, True)]

START = time.time()


def input_sets(case):
    """Rotated input sets spanning 4x the L2 (one set when a single one already does)."""
    rng = cupy.random.default_rng(0)
    first = case.make_inputs(cupy, rng)
    nbytes = sum(a.nbytes for a in first)
    count = 1 if nbytes > 8 * current_device_info().l2_bytes else rotation_count(nbytes)
    return [first] + [case.make_inputs(cupy, rng) for _ in range(count - 1)]


def line(shape, variant, ms, rate, unit, err, status):
    ms_text = f"{ms:8.3f}" if ms is not None else "       -"
    rate_text = f"{rate:8.1f} {unit}" if rate is not None else " " * (9 + len(unit))
    err_text = f"{err:8.1e}" if err is not None else "       -"
    print(f"{shape:34s} {variant:48s} {ms_text} ms {rate_text}  err {err_text}  {status}", flush=True)


def time_peer(case, impl_name, sets, label):
    impl = case.impl(impl_name)
    if impl is None or not impl.available():
        line(label, impl_name, None, None, "", None, "unavailable")
        return None
    try:
        prepared = [impl.prepare(s) for s in sets]
        ms = time_cuda_budget(impl.call, prepared, budget_ms=BUDGET_MS)
        unit = case.metric
        line(label, impl_name, ms, case.rate(ms), unit, None, "peer")
        return impl.call(*prepared[0])
    except Exception as exc:  # a peer that cannot run is reported, never fatal
        line(label, impl_name, None, None, "", None, f"failed: {type(exc).__name__}: {str(exc)[:80]}")
        return None


def sweep_case(case, variants, make_config, causal, time_limit=TIME_LIMIT_S):
    """Time each variant of ``case``; the first variant (config None) is the reference.

    Every variant is run once (compiled, launched, checked) before any is timed, then timed in
    two passes, the second in reverse order, each with half the budget; the faster median
    counts. (In one forward pass the first-timed variant, the default, often read 5-20 % low:
    the GPU coming off the previous shape's peers.)"""
    label = f"{case.label} {case.dtype}"
    try:
        sets = input_sets(case)
    except Exception as exc:
        line(label, "inputs", None, None, "", None, f"failed: {type(exc).__name__}: {exc}")
        return
    reference = None
    runs = []  # (label, call, err) of the variants that ran
    for name, tile, splits in variants:
        if time.time() - START > time_limit:
            line(label, name, None, None, "", None, "skipped: sweep time limit")
            continue
        try:
            config = None if tile is None else make_config(tile, splits)
            desc = "" if config is None else f" [splits {getattr(config, 'splits', 1)}]"

            def call(q, k, v, out, config=config):
                return cufuse.attention(q, k, v, causal=causal, out=out, config=config)

            q, k, v, _ = sets[0]
            result = cufuse.attention(q, k, v, causal=causal, config=config)
            if reference is None:
                reference, err = result, None
            else:
                err = relative_difference(result, reference)
            runs.append((name + desc, call, err))
        except Exception as exc:
            line(label, name, None, None, "", None, f"failed: {type(exc).__name__}: {str(exc)[:100]}")
    best = {}
    for order in (runs, runs[::-1]):
        for name, call, _ in order:
            try:
                ms = time_cuda_budget(call, sets, budget_ms=BUDGET_MS / 2)
                best[name] = min(ms, best.get(name, ms))
            except Exception as exc:
                best[name] = exc
    for name, _, err in runs:
        ms = best.get(name)
        if not isinstance(ms, float):
            line(label, name, None, None, "", None, f"failed: {type(ms).__name__}: {str(ms)[:100]}")
            continue
        bad = err is not None and not err <= MAX_REL_ERROR
        line(label, name, ms, case.rate(ms), case.metric, err, "WRONG" if bad else "ok")
    for peer in ("sdpa flash", "sdpa cudnn"):
        if time.time() - START > time_limit + 5:
            line(label, peer, None, None, "", None, "skipped: sweep time limit")
            continue
        peer_out = time_peer(case, peer, sets, label)
        if peer == "sdpa flash" and peer_out is not None and reference is not None:
            err = relative_difference(reference, cupy.asarray(peer_out.float()))
            line(label, "default vs sdpa flash", None, None, "", err, "ok" if err <= MAX_REL_ERROR else "WRONG")
    del sets, reference
    release_memory()


def precompile_variants(dev):
    """Every kernel the sweep launches, compiled into the disk cache in parallel processes."""
    bf16 = "__nv_bfloat16"
    specs = [merge_spec(bf16)]
    for batch, heads, n, head_dim, causal, dtype in PREFILL_SHAPES:
        name = ctype(cases.resolve_dtype(dtype))
        specs.append(select.choose_by_sizes(n, n, head_dim, head_dim, batch * heads, cases.resolve_dtype(dtype),
                                          dev, True, causal).spec(name))
        specs += [tile.spec(name) for _, tile in PREFILL_VARIANTS[head_dim] if tile is not None]
    specs.append(select.choose_by_sizes(1, DECODE_KEYS[0], 128, 128, cases.DECODE_BATCH * cases.DECODE_HEADS,
                                      cases.resolve_dtype("bfloat16"), dev, True).spec(bf16))
    specs += [tile.spec(bf16) for _, tile, _ in DECODE_VARIANTS if tile is not None]
    precompile_specs(specs)


def precompile_specs(specs):
    try:
        failed = [(s, err) for s, _, err in precompile(specs, arch_for(device_cc(0))) if err]
    except Exception as exc:  # the variants then compile one by one on first use
        failed = [("precompile", exc)]
    for spec, err in failed:
        print(f"compile failed: {getattr(spec, 'template_args', spec)}: {str(err)[:200]}")
    print(f"precompiled {len(set(specs))} kernels in {time.time() - START:.0f} s", flush=True)


def wgmma_grid(dev, dtypes):
    """The wgmma tiles against the default (the wgmma rule), the mma.sync tile
    and the peers on the prefill grid."""
    if not dev.has_wgmma:
        print("--wgmma-grid: the wgmma kernel needs compute capability 9.0")
        return
    specs = []
    for dtype in dtypes:
        name = ctype(cases.resolve_dtype(dtype))
        for batch, heads, n, head_dim, causal in GRID_SHAPES:
            specs.append(select.choose_by_sizes(n, n, head_dim, head_dim, batch * heads, cases.resolve_dtype(dtype),
                                              dev, True, causal, True).spec(name))
            specs.append(select.prefill_tile(head_dim, dev, n, n, causal).spec(name))
        specs += [tile.spec(name) for tiles in WGMMA_TILES.values() for tile in tiles]
    precompile_specs(specs)
    print(f"wgmma prefill grid on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
          f"err = max|out - default| / max|default|", flush=True)
    for dtype in dtypes:
        for batch, heads, n, head_dim, causal in GRID_SHAPES:
            case = cases.attention_case(batch, heads, n, n, head_dim, dtype, causal=causal)
            variants = [(label, tile, None) for label, tile in WGMMA_VARIANTS[head_dim]]
            variants.insert(1, (MMA_SYNC_LABEL, select.prefill_tile(head_dim, dev, n, n, causal), None))
            sweep_case(case, variants, lambda tile, _splits: tile, causal, GRID_TIME_LIMIT_S)
    print(f"sweep done in {time.time() - START:.0f} s")


def main():
    dev = current_device_info()
    if "--wgmma-grid" in sys.argv:
        dtypes = [a for a in sys.argv[sys.argv.index("--wgmma-grid") + 1:] if a in cases.ATTENTION_DTYPES]
        return wgmma_grid(dev, dtypes or list(cases.ATTENTION_DTYPES))
    precompile_variants(dev)
    print(f"attention sweep on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()} "
          f"({dev.sm_count} SMs); err = max|out - default| / max|default|")
    print(ANCHORS, flush=True)
    # decode first: the new kernel's numbers matter most if the time limit cuts the sweep
    for n_k in DECODE_KEYS:
        case = cases.decode_case(n_k)
        batch = cases.DECODE_BATCH * cases.DECODE_HEADS

        def decode_config(tile, splits, n_k=n_k, b=batch):
            if isinstance(tile, Dec):
                return select.split_decode_keys(tile, 1, n_k, b, dev, splits)
            return select.split_keys(tile, 1, n_k, b, dev)

        sweep_case(case, DECODE_VARIANTS, decode_config, False)
    for batch, heads, n, head_dim, causal, dtype in PREFILL_SHAPES:
        case = cases.attention_case(batch, heads, n, n, head_dim, dtype, causal=causal)
        variants = [(name, tile, None) for name, tile in PREFILL_VARIANTS[head_dim]]
        # thousands of query tiles: no key split (the wave model can tie at 1 block per SM)
        sweep_case(case, variants, lambda tile, _splits: tile, causal)
    print(f"sweep done in {time.time() - START:.0f} s")


if __name__ == "__main__":
    main()
