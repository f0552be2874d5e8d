"""Read-only and copy bandwidth of 128 MiB (the bytes of an 8192 x 8192 16-bit weight): the
ceiling a small-M weight stream can reach (docs/linear.md).

Run: ``python3 experiments/common/probe_read_ceiling.py`` (seconds). Two read kernels, each at a few
grid shapes: ``readsum`` (grid-stride 16-byte loads) and ``readchunk`` (one contiguous chunk
a block, 8 loads in flight a thread); then ``cupy.copyto`` of the same bytes. A standalone
probe of the hardware, not part of cufuse (whose kernels all go through cufuse._core.loader).
"""
import cupy
import numpy as np

# One block's contiguous chunk [begin, end) of 16-byte words, 8 loads in flight a thread (also
# experiments/linear/probe_launch_gap.py's kernel).
READ_CHUNK = r"""
__device__ __forceinline__ void read_chunk(const uint4* __restrict__ p, long long begin, long long end,
                                           unsigned* out) {
    unsigned acc = 0;
    for (long long i = begin + threadIdx.x; i < end; i += 8 * blockDim.x) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const long long j = i + u * blockDim.x;
            v[u] = j < end ? __ldg(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) out[0] = acc;  // never true in practice: keeps the loads alive
}
"""

SOURCE = READ_CHUNK + r"""
extern "C" __global__ void readsum(const uint4* __restrict__ p, long long n, unsigned* out) {
    unsigned acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 8
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[0] = acc;  // never true in practice: keeps the loads alive
}
extern "C" __global__ void readchunk(const uint4* __restrict__ p, long long n, unsigned* out) {
    const long long per = (n + gridDim.x - 1) / gridDim.x;
    const long long begin = blockIdx.x * per;
    read_chunk(p, begin, min(n, begin + per), out);
}
"""
NBYTES = 8192 * 8192 * 2
GRIDS = ((132 * 4, 256), (132 * 8, 256), (132 * 16, 256), (132 * 2, 1024), (132, 1024))


def seconds_per_call(fn, buffers, reps=40):
    for i in range(8):
        fn(buffers[i % len(buffers)])
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for i in range(reps):  # four buffers of 128 MiB: none is served from the L2 of the last call
        fn(buffers[i % len(buffers)])
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / reps * 1e-3


def main():
    module = cupy.RawModule(code=SOURCE)
    buffers = [cupy.random.random(NBYTES // 8).view(cupy.uint8) for _ in range(4)]
    sink = cupy.zeros(1, cupy.uint32)
    vectors = np.int64(NBYTES // 16)
    for name in ("readsum", "readchunk"):
        kernel = module.get_function(name)
        for blocks, threads in GRIDS:
            sec = seconds_per_call(lambda b: kernel((blocks,), (threads,), (b, vectors, sink)), buffers)
            print(f"{name:10s} {blocks:5d} x {threads:4d}: {NBYTES / sec / 1e12:.2f} TB/s read ({sec * 1e6:.1f} us)")
    destination = cupy.empty_like(buffers[0])
    sec = seconds_per_call(lambda b: cupy.copyto(destination, b), buffers)
    print(f"copy 128 MiB: {2 * NBYTES / sec / 1e12:.2f} TB/s (read + write, {sec * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
