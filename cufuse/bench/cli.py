"""``python -m cufuse.bench``: cufuse against its ceilings and peers, in one run.

    python -m cufuse.bench [--op OP[,OP...]|all] [--quick] [--budget-ms MS]
                           [--json FILE] [--plot FILE.png] [--trace]

On a GPU: measures the copy and GEMM ceilings, times every case of the op grids with its
peers on the same rotated inputs, prints one table per op (with each case's best peer) and
the class minima against the best peer, and optionally writes the results as JSON and a
roofline as PNG. Optional peers (FlashAttention-4, QuACK) that cannot be imported are
skipped, with one line saying so. ``--trace`` instead shows, per op,
the kernels and allocations of one cufuse call next to the unfused CuPy composition's.
Without a GPU: says so, and runs the NumPy reference path on small inputs.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import sys
import time

import numpy as np

import cufuse

from ..tracing import cuda_device_count, trace
from .cases import OPS, UNFUSED, cases_for, cpu_cases
from .cases.peers import peer_versions
from .runner import (CEILING_COPY_BYTES, CEILING_GEMM_DTYPES, Ceilings, describe_failure, failures,
                     format_class_minima, format_table, measure, measure_cpu, release_memory, skipped_peers)
from .timing import BUDGET_MS


def op_list(text: str) -> list:
    """``--op``: "all", or one op or several, comma-separated."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in (*OPS, "all"):
            raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join((*OPS, 'all'))})")
    return list(OPS) if "all" in names else names


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m cufuse.bench", description=(
        "cufuse against its ceilings (a device copy, cupy.matmul) and its peers (the unfused CuPy composition, "
        "PyTorch / cuDNN, FlashAttention-4 and QuACK where importable), in one run; without a GPU, the NumPy "
        "reference path on small inputs."))
    parser.add_argument("--op", type=op_list, default=list(OPS), metavar="OP[,OP...]",
                        help=f"which ops' grids to run: {', '.join(OPS)} or all (default: all)")
    parser.add_argument("--quick", action="store_true", help="a few shapes per op (under a minute on an H200)")
    parser.add_argument("--budget-ms", type=float, default=None, metavar="MS",
                        help=f"timing budget per implementation and case (default {BUDGET_MS:.0f}, --quick 100)")
    parser.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the roofline (needs matplotlib)")
    parser.add_argument("--trace", action="store_true",
                        help="show kernels launched and memory allocated per call, cufuse next to unfused CuPy")
    return parser.parse_args(argv)


def gpu_status():
    """(True, device description) or (False, why no GPU can be used)."""
    count, why = cuda_device_count()
    if not count:
        return False, why
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return True, f"{props['name'].decode()} (compute capability {props['major']}.{props['minor']}, {props['multiProcessorCount']} SMs)"


def versions() -> dict:
    found = {"cufuse": cufuse.__version__, "numpy": np.__version__, "python": platform.python_version()}
    for name in ("cupy", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = module.__version__
    if "torch" in found:
        found.update(peer_versions())
    if "cupy" in found:
        import cupy

        found["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        found["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    return found


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def selected_cases(args) -> list:
    return [case for op in args.op for case in cases_for(op, args.quick)]


def run_gpu(args, device: str) -> int:
    cases = selected_cases(args)
    print(f"GPU: {device}")
    skipped = skipped_peers(cases)
    for line in skipped:
        print(line)
    progress("measuring ceilings ...")
    ceilings = Ceilings()
    copy = ceilings.copy_tbps(CEILING_COPY_BYTES)
    gemm = {dtype: ceilings.gemm_tflops(dtype) for dtype in CEILING_GEMM_DTYPES}
    print(f"ceilings: copy {copy:.2f} TB/s (read + write, 1 GiB); cupy.matmul 8192^3 "
          + ", ".join(f"{dtype} {'failed' if rate is None else f'{rate:.0f} TFLOP/s'}" for dtype, rate in gemm.items()))
    results = []
    start = time.perf_counter()
    for index, case in enumerate(cases, 1):
        progress(f"[{index}/{len(cases)}] {case.key} ({time.perf_counter() - start:.0f} s)")
        results.append(measure(case, ceilings, budget_ms=args.budget_ms or (100.0 if args.quick else BUDGET_MS)))
    print()
    print(format_table(results))
    print("\nclass minima: per op, class and dtype, the case where cufuse's speed-up over its best peer is lowest")
    print(format_class_minima(results))
    print("\nrate: TB/s counts inputs read once and the output written once; TFLOP/s counts 2*M*N*K "
          "(linear) or 4*B*H*N^2*D, halved for causal (attention). % ceil: of the copy of the same bytes, "
          "or of cupy.matmul at 8192^3. check: cufuse's output against the unfused CuPy composition "
          "on float32 copies of the inputs. "
          "best peer: the fastest peer that ran (not cufuse's own variants, not a ceiling) and peer time / "
          "cufuse time; unsupported: the peer has no call for the case. "
          "vs peer: peer time / cufuse time (peer's rate); h: the peer is host-bound (enqueueing a call takes "
          ">= 75% of its time, so the GPU waits on Python: its figure is its launch rate and varies from run "
          "to run with the host).")
    problems = failures(results)
    if problems:
        print("\nproblems:\n  " + "\n  ".join(problems))
    print(f"\n{len(cases)} cases in {time.perf_counter() - start:.0f} s; "
          + ", ".join(f"{name} {version}" for name, version in versions().items()))
    if args.json:
        write_json(args, device, ceilings, results, skipped)
    if args.plot:
        from .roofline import plot_roofline

        plot_roofline(results, ceilings, args.plot, title=f"cufuse on {device.split(' (')[0]}")
        print(f"roofline written to {args.plot}")
    return 0


def write_json(args, device: str, ceilings, results, skipped=()) -> None:
    document = {
        "device": device,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m cufuse.bench", *args.argv]),
        "versions": versions(),
        "ceilings": ceilings.as_dict() if ceilings else None,
        "skipped_peers": list(skipped),
        "results": [result.to_dict() for result in results],
    }
    with open(args.json, "w") as handle:
        json.dump(document, handle, indent=1)
    print(f"results written to {args.json}")


def run_traces(args) -> int:
    import cupy

    for op in args.op:
        case = OPS[op](quick=True)[0]
        inputs = case.make_inputs(cupy, cupy.random.default_rng(0))
        model = case.traffic
        print(f"== {case.key}: the traffic model moves {model.min_bytes / 2**20:.0f} MiB fused, "
              f"{model.unfused_bytes / 2**20:.0f} MiB unfused ({model.saving:.1f}x)")
        for impl in (case.fused, case.impl(UNFUSED)):
            try:
                print(dataclasses.replace(trace(impl.call, *impl.prepare(inputs)), label=impl.name))
            except NotImplementedError:
                print(f"{impl.name}: not built")
            except Exception as exc:
                print(f"{impl.name}: {describe_failure(exc)}")
        del inputs
        release_memory()
        print()
    return 0


def run_cpu(args, reason: str) -> int:
    print(f"No CUDA GPU found ({reason}).")
    print("cufuse's kernels need one. Running the NumPy reference path (float64 oracles, CPU) on small "
          "inputs instead: these times say nothing about the GPU kernels.\n")
    if args.trace:
        print("--trace needs a GPU; nothing to trace.")
    cases = [case for case in cpu_cases() if case.op in args.op]
    results = []
    for case in cases:
        progress(f"{case.key} (NumPy reference path)")
        results.append(measure_cpu(case))
    for result in results:
        model = result.case.traffic
        print(f"{result.case.op:10s} {result.case.label:28s} {result.case.dtype:8s} {result.fused_ms:8.2f} ms on the CPU; "
              f"GPU traffic model: {model.flops:.3g} FLOP, {model.min_bytes:.3g} B fused vs "
              f"{model.unfused_bytes:.3g} B unfused ({model.saving:.1f}x), intensity {model.intensity:.3g} FLOP/B")
    if args.json:
        write_json(args, f"none ({reason})", None, results)
    if args.plot:
        print("--plot needs GPU measurements; no roofline drawn.")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    args.argv = argv
    has_gpu, detail = gpu_status()
    if not has_gpu:
        return run_cpu(args, detail)
    if args.trace:
        return run_traces(args)
    return run_gpu(args, detail)
