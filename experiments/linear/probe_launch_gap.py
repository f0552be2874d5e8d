"""Where the time between back-to-back small-M GEMMs goes, and what programmatic dependent
launch (PDL) buys a ~35 us weight stream (docs/linear.md, "Programmatic dependent launch").

Run: ``python3 experiments/linear/probe_launch_gap.py [trace_dir]`` (about a minute, needs torch for the
peer). Three parts:

1. ``readchunk`` (one contiguous 128 MiB read a call, one block an SM) launched back to back:
   by CuPy, and through cufuse's ``cuLaunchKernelEx`` launch (cufuse/_core/launch.py) with the
   programmatic-stream-serialisation attribute, in three kernel variants (no grid-dependency control at all: the bound of what
   overlap can give; trigger + wait at the start; trigger, L2 prefetch of the block's first
   bytes, then wait). Time per call from CUDA events over 40 calls on four buffers.
2. cufuse and cuBLASLt (``torch._addmm_activation``) at M = 1 / 16 / 64 x 8192^2 bfloat16, both
   weight layouts: batched eager (what the benchmark sees) against a replayed CUDA graph.
3. A CUPTI timeline (torch.profiler) of 24 eager calls of each: median kernel duration and
   median gap from one kernel's end to the next one's start.

A standalone probe of the hardware, not part of cufuse (whose kernels go through cufuse._core.loader).
"""
import os
import statistics
import sys

import cupy
import numpy as np

import cufuse
from cufuse.bench.cases import linear_case, to_torch
from cufuse.bench.runner import input_sets
from cufuse._core.launch import POINTER, DriverLaunch
from cufuse.bench.timing import time_cuda_budget

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from probe_read_ceiling import READ_CHUNK  # noqa: E402  (experiments/common/)
from sweep_linear import graph_ms  # noqa: E402  (this script's directory)

SOURCE = READ_CHUNK + r"""
template <int MODE>  // 0: no grid-dependency control; 1: trigger + wait; 2: trigger, L2 prefetch, wait
__global__ void readchunk(const uint4* __restrict__ p, long long n, unsigned* out) {
    const long long per = (n + gridDim.x - 1) / gridDim.x;
    const long long begin = blockIdx.x * per, end = min(n, begin + per);
    if (MODE >= 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (MODE == 2) {  // the block's first 64 KB into L2 while the previous grid finishes
        const char* first = reinterpret_cast<const char*>(p + begin);
        asm volatile("prefetch.global.L2 [%0];" :: "l"(first + 128 * (threadIdx.x % 512)) : "memory");
    }
    if (MODE >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
    read_chunk(p, begin, end, out);
}
"""
NBYTES = 8192 * 8192 * 2


def per_call_ms(fn, count, reps=40):
    for i in range(8):
        fn(i % count)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for i in range(reps):
        fn(i % count)
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / reps


def part_read_stream():
    names = [f"readchunk<{mode}>" for mode in range(3)]
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    buffers = [cupy.random.random(NBYTES // 8).view(cupy.uint8) for _ in range(4)]
    sink = cupy.zeros(1, cupy.uint32)
    vectors = np.int64(NBYTES // 16)
    grid, block = (132, 1, 1), (1024, 1, 1)
    print("part 1: readchunk, 128 MiB a call, 132 x 1024 threads, 40 calls back to back", flush=True)
    for mode, name in enumerate(names):
        function = module.get_function(name)
        pdl = DriverLaunch(function, grid, block, 0, (POINTER, vectors, POINTER), pdl=True)
        launches = {  # CuPy's plain launch, and cufuse's launch with the PDL attribute
            False: lambda i: function(grid, block, (buffers[i], vectors, sink)),
            True: lambda i: pdl(cupy.cuda.get_current_stream().ptr, (buffers[i].data.ptr, sink.data.ptr)),
        }
        for with_pdl, launch in launches.items():
            ms = per_call_ms(launch, len(buffers))
            print(f"  mode {mode} pdl {int(with_pdl)}: {ms * 1e3:7.2f} us  {NBYTES / ms / 1e9:5.2f} TB/s", flush=True)


def graph_ms_torch(torch, fn, sets, rounds=4):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for s in sets:
            fn(*s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(rounds):
            for s in sets:
                fn(*s)
    graph.replay()
    torch.cuda.synchronize()
    reps = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        reps.append(start.elapsed_time(stop) / (rounds * len(sets)))
    return statistics.median(reps)


def timeline(torch, fn, sets, calls=24, trace=None):
    """(median kernel us, median gap us) of ``calls`` eager calls from a CUPTI trace."""
    from torch.profiler import ProfilerActivity, profile

    for i in range(8):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())
    durations = [end - start for start, end, _ in kernels]
    gaps = [b[0] - a[1] for a, b in zip(kernels, kernels[1:])]
    name = kernels[0][2][:60] if kernels else "-"
    return statistics.median(durations), statistics.median(gaps) if gaps else float("nan"), min(gaps, default=0), name


def part_gemv(trace_dir=None):
    import torch

    print("part 2/3: M x 8192 x 8192 bfloat16; TB/s eager | graph; CUPTI kernel us, gap us (median, min)", flush=True)
    for m in (1, 16, 64):
        for layout in ("kn", "nk"):
            case = linear_case(m, 8192, 8192, "bfloat16", layout)
            sets = input_sets(case)
            rate = case.rate

            def ours(x, w, b, out):
                return cufuse.fused_linear_relu(x, w, b, out=out)

            torch_sets = [tuple(to_torch(a) for a in s[:-1]) for s in sets]

            def peer(x, w, b):
                return torch._addmm_activation(b, x, w)

            rows = (("cufuse", ours, sets, lambda f, s: graph_ms(f, s)),
                    ("cuBLASLt", peer, torch_sets, lambda f, s: graph_ms_torch(torch, f, s)))
            for name, fn, s, graph in rows:
                eager = time_cuda_budget(fn, s)
                replay = graph(fn, s)
                trace = f"{trace_dir}/trace_{m}_{layout}_{name}.json" if trace_dir and m == 16 and layout == "kn" else None
                kernel_us, gap_us, min_gap, kname = timeline(torch, fn, s, trace=trace)
                print(f"  {case.label:22} {name:9} eager {rate(eager):5.2f} | graph {rate(replay):5.2f} TB/s; "
                      f"kernel {kernel_us:6.2f} us gap {gap_us:5.2f} (min {min_gap:5.2f})  {kname}", flush=True)
            del sets, torch_sets
            cupy.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()


def main():
    part_read_stream()
    part_gemv(sys.argv[1] if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    np.random.seed(0)
    main()
