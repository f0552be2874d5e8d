"""The linear classes on Hopper in one run: fused_linear (relu, gelu) and fused_gated_linear
(silu) over the model projections at every M of MODEL_ROWS, both weight layouts, against their
peers; and the variants the gated defaults were chosen from.

    python experiments/linear/measure_classes.py OUT.json [--linear] [--gated] [--sweep] [--budget-ms 60]

--linear: ``cufuse.bench.cases.linear_act_case`` (relu, gelu) over MODEL_PROJECTIONS x
MODEL_ROWS x both layouts against cuBLASLt's epilogue (``torch._addmm_activation``) and the
unfused CuPy composition, plus gelu_tanh / silu at 16 and 4096 rows (their cost against relu).
--gated: ``gated_case`` over MODEL_GATED x MODEL_ROWS x both layouts, against one cuBLASLt GEMM
on [w_gate | w_up] + torch's silu and multiply, the unfused CuPy composition and the former
default (``gated_linear_mma``). --sweep: the gated swapped stream's (bk, stages) at M = 1 / 16 /
64, the gated TMA GEMM's tiles and splits at M = 128 / 512 / 4096, every candidate as one more
implementation of the same case (same inputs). Prints every case's row and, per class (op x
activation x layout x M), the minimum over the (K, N) shapes of each peer's time over
cufuse's; the JSON holds every measurement.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import cufuse
from cufuse._core.device import H200
from cufuse.bench import cases as bench_cases
from cufuse.bench.runner import Ceilings, format_table, measure, release_memory
from cufuse.ops.linear.mma import SMALL_TILE, STREAM64_TILE, STREAM_TILE, GatedMmaConfig
from cufuse.ops.linear.swap_tma import GatedSwapConfig, GatedSwapTile, swap_padding
from cufuse.ops.linear.tiling import choose_k_splits, stream_splits, tile_count
from cufuse.ops.linear.wgmma import GATED_TMA_TILES, GatedTmaConfig



def with_configs(case, configs):
    """``case`` with one more cufuse implementation per (name, config)."""
    extra = tuple(bench_cases.Impl(name, lambda x, wg, wu, out, c=config: cufuse.fused_gated_linear(
        x, wg, wu, activation="silu", out=out, config=c), peer=False) for name, config in configs)
    return dataclasses.replace(case, impls=case.impls + extra)


def mma_config(m, k, n):
    """What the gated selection picked before the Hopper kernels (gated_linear_mma's rules)."""
    tile = STREAM_TILE if m <= 16 else STREAM64_TILE if m <= 64 else SMALL_TILE
    if m <= 16:
        return GatedMmaConfig(tile=tile, splits=stream_splits(m, 2 * n, k, tile, H200))
    if tile_count(m, 2 * n, tile) < H200.sm_count * tile.blocks_per_sm(H200):
        return GatedMmaConfig(tile=tile, splits=choose_k_splits(m, 2 * n, k, tile, H200))
    return GatedMmaConfig(tile=tile)


def grid_cases():
    return [with_configs(bench_cases.gated_case(m, k, n, "bfloat16", "silu", layout),
                         [("mma (former default)", mma_config(m, k, n))])
            for k, n in bench_cases.MODEL_GATED for m in bench_cases.MODEL_ROWS for layout in ("kn", "nk")]


def sweep_cases():
    cases = []
    for m in (1, 16, 64):
        mx = swap_padding(m)
        for k, n in ((4096, 11008), (4096, 14336), (8192, 28672)):
            for layout in ("kn", "nk"):
                configs = []
                for bk, stages in ((64, 10), (128, 4), (128, 6), (256, 3)):
                    if stages * (mx + 128) * bk * 2 + 1024 + 16 * stages > 232448:
                        continue
                    tile = GatedSwapTile(bn=128, mx=mx, stages=stages, bk=bk, l2_hints=True)
                    splits = stream_splits(m, 2 * n, k, tile, H200)
                    configs.append((f"swap bk{bk} s{stages}", GatedSwapConfig(tile=tile, splits=splits)))
                no_hints = GatedSwapTile(bn=128, mx=mx, stages=6 if mx < 64 else 4, bk=128)
                configs.append(("swap bk128 s6 no hints", GatedSwapConfig(tile=no_hints)))
                if m == 64:
                    configs += [(f"tma 64x256 split {s}", GatedTmaConfig(tile=GATED_TMA_TILES[2], splits=s))
                                for s in (1, 2, 4)]
                cases.append(with_configs(bench_cases.gated_case(m, k, n, "bfloat16", "silu", layout), configs))
    for m in (128, 512, 4096):
        for k, n in ((4096, 11008), (8192, 28672)):
            configs = [(f"tma {t.bm}x{t.bn} split {s}", GatedTmaConfig(tile=t, splits=s)) for t in GATED_TMA_TILES
                       for s in ((1, 2, 4) if m <= 512 else (1,))]
            cases.append(with_configs(bench_cases.gated_case(m, k, n, "bfloat16", "silu", "nk"), configs))
    return cases


def precompile(cases) -> None:
    """Compile every forced config's kernels in parallel first (the defaults: `cufuse precompile`)."""
    from cufuse._core import loader

    specs = {impl.call.__defaults__[0].spec(bench_cases.resolve_dtype(case.dtype), kmajor)
             for case in cases for impl in case.impls if impl.call.__defaults__ for kmajor in (True, False)}
    failed = [(spec, error) for spec, _, error in loader.precompile(sorted(specs, key=str), "sm_90a") if error]
    for spec, error in failed:
        print("compile error", spec.expression, error[:2000])


def linear_cases():
    cases = [bench_cases.linear_act_case(m, 4096, 11008, "bfloat16", act, "nk") for m in (16, 4096)
             for act in ("gelu_tanh", "silu")]
    return cases + [bench_cases.linear_act_case(m, k, n, "bfloat16", act, layout)
                    for k, n in bench_cases.MODEL_PROJECTIONS for m in bench_cases.MODEL_ROWS
                    for layout in ("kn", "nk") for act in ("relu", "gelu")]


def class_minima(results):
    """{(kind and activation, layout, M): {peer: (min over shapes of peer ms / cufuse ms, shape)}}."""
    minima = {}
    for result in results:
        case = result.case
        words = case.label.split()
        gated = words[0] == "gated"
        shape = words[1] if gated else words[0]
        m = int(shape.split("x")[0])
        key = (("gated " if gated else "linear ") + words[-1], "nk" if "(N,K).T" in case.label else "kn", m)
        for peer, ms in result.ms.items():
            if peer == case.fused.name or not ms or not result.fused_ms or peer.startswith(("swap", "tma")):
                continue
            ratio = ms / result.fused_ms
            entry = minima.setdefault(key, {})
            if peer not in entry or ratio < entry[peer][0]:
                entry[peer] = (ratio, shape, result.fraction_of_ceiling())
    return minima


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--linear", action="store_true")
    parser.add_argument("--gated", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--budget-ms", type=float, default=60.0)
    args = parser.parse_args(argv)
    ceilings, results = Ceilings(), {}
    groups = [(name, make()) for name, make, wanted in (("linear", linear_cases, args.linear),
                                                         ("gated", grid_cases, args.gated),
                                                         ("sweep", sweep_cases, args.sweep)) if wanted]
    precompile([case for _, cases in groups for case in cases])
    for name, cases in groups:
        results[name] = []
        for case in cases:
            results[name].append(measure(case, ceilings, budget_ms=args.budget_ms))
            release_memory()
        with open(args.out, "w") as handle:
            json.dump({"ceilings": ceilings.as_dict(),
                       **{g: [r.to_dict() for r in rs] for g, rs in results.items()}}, handle, indent=1)
    for name, rs in results.items():
        print(f"==== {name}")
        print(format_table(rs))
    classes = class_minima([r for name in ("linear", "gated") for r in results.get(name, [])])
    if classes:
        print("==== class minima over the (K, N) shapes: peer time / cufuse time (cufuse's fraction of its ceiling)")
        for (kind, layout, m), peers in sorted(classes.items()):
            cells = "  ".join(f"{peer} {ratio:.2f}x ({fraction or 0:.2f}, {shape})"
                              for peer, (ratio, shape, fraction) in sorted(peers.items()))
            print(f"{kind:13} {layout:3} M={m:6d}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
