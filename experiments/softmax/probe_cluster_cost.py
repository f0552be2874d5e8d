"""What a thread-block cluster and a column-strip access pattern cost on their own, outside
softmax (docs/softmax.md, "Cluster exchange": every cluster softmax variant measured about
half the speed of its one-block twin, and the axis=0 cluster strips reached 0.44-0.56x copy).

Run: ``python3 experiments/softmax/probe_cluster_cost.py`` (seconds, sm_90). Two probes, each against
``cupy.copyto`` of the same bytes in the same run:

1. Staged copy of 128 MiB: every block copies its 64 KB (or 96 KB) chunk into shared memory
   with cp.async, waits, meets its peers (``__syncthreads`` alone, or a cluster barrier, or a
   cluster barrier plus one distributed-shared-memory read of every peer's value and a second
   barrier, like a softmax statistics exchange), then writes the chunk out. One chunk a block
   (non-persistent) or a resident grid looping over chunks (persistent).
2. Column strips of a 16384 x 4096 float16 matrix (8 KB rows): blocks read (or copy) strips of
   W bytes of adjacent columns down all rows, or a part of the rows of each strip, with 8
   16-byte loads in flight a thread.

A standalone probe of the hardware, not part of cufuse (whose kernels go through cufuse._core.loader).
"""
import os
import sys

import cupy
import numpy as np
from cupy_backends.cuda.api import driver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from probe_read_ceiling import seconds_per_call  # noqa: E402  (experiments/common/)

SOURCE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// Sync: 0 block barrier only; 1 cluster barrier; 2 (pull) cluster barrier, every block reads
// each peer's value through DSMEM, a second barrier so that no peer overwrites or leaves while
// read; 3 (push) every block writes its value into each peer's slot (double-buffered by chunk
// parity), one barrier, then reads its own slots; 4 (async push) the same stores as st.async
// counted on each peer's mbarrier, one mbarrier wait and no barrier (cufuse's ClusterStats).
// Every block of a cluster runs the same number of iterations (a block without a chunk still
// meets its peers).
template <int VPT, int Cluster, int Sync>
__device__ __forceinline__ void staged_body(const uint4* __restrict__ x, uint4* __restrict__ y, long long chunks,
                                            long long first, long long step, unsigned* sink) {
    extern __shared__ uint4 buf[];
    __shared__ unsigned partial, slots[2][Cluster];
    __shared__ unsigned long long landed[2];
    constexpr long long per_chunk = VPT * 512;
    unsigned acc = 0;
    int parity = 0;
    if constexpr (Cluster > 1 && Sync == 4) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\nmbarrier.init.shared::cta.b64 [%1], 1;\n"
                         "fence.mbarrier_init.release.cluster;" ::"r"(smem_u32(&landed[0])), "r"(smem_u32(&landed[1])) : "memory");
        }
        cg::this_cluster().sync();  // every peer's mbarriers initialised
    }
    for (long long base = 0, round = 0; base < chunks; base += step, parity ^= 1, ++round) {
        const long long c = base + first;
        const bool has = c < chunks;
        const uint4* src = x + c * per_chunk;
        uint4* dst = y + c * per_chunk;
        if (has) {
#pragma unroll
            for (int v = 0; v < VPT; ++v) cp_async_16(buf + v * 512 + threadIdx.x, src + v * 512 + threadIdx.x);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        if constexpr (Cluster == 1) {
            if (threadIdx.x == 0) partial = buf[0].x;
            __syncthreads();
        } else {
            cg::cluster_group cluster = cg::this_cluster();
            if constexpr (Sync == 4) {
                const unsigned bar = smem_u32(&landed[parity]);
                if (threadIdx.x == 0)
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(Cluster * 4) : "memory");
                if (threadIdx.x < Cluster) {
                    unsigned remote, remote_bar;
                    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(&slots[parity][cluster.block_rank()])), "r"(threadIdx.x));
                    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(bar), "r"(threadIdx.x));
                    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote), "r"(buf[0].x), "r"(remote_bar) : "memory");
                }
                asm volatile("{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra wait_%=;\n}"
                             ::"r"(bar), "r"(static_cast<unsigned>((round >> 1) & 1)) : "memory");
                if (threadIdx.x < Cluster) acc ^= slots[parity][threadIdx.x];
            } else if constexpr (Sync == 3) {
                if (threadIdx.x < Cluster) cluster.map_shared_rank(&slots[parity][0], threadIdx.x)[cluster.block_rank()] = buf[0].x;
                cluster.sync();
                if (threadIdx.x < Cluster) acc ^= slots[parity][threadIdx.x];
            } else {
                if (threadIdx.x == 0) partial = buf[0].x;
                cluster.sync();
                if constexpr (Sync == 2) {
                    if (threadIdx.x < Cluster) acc ^= *cluster.map_shared_rank(&partial, threadIdx.x);
                    cluster.sync();  // no block overwrites `partial` while a peer reads it
                }
            }
        }
        if (has) {
#pragma unroll
            for (int v = 0; v < VPT; ++v) dst[v * 512 + threadIdx.x] = buf[v * 512 + threadIdx.x];
        }
        if constexpr (Cluster == 1) __syncthreads();  // `partial` of the next chunk
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int VPT, int BlocksPerSM>
__global__ void __launch_bounds__(512, BlocksPerSM) staged_plain(const uint4* x, uint4* y, long long chunks, unsigned* sink) {
    staged_body<VPT, 1, 0>(x, y, chunks, blockIdx.x, gridDim.x, sink);
}

template <int VPT, int BlocksPerSM, int Cluster, int Sync>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(512, BlocksPerSM)
    staged_cluster(const uint4* x, uint4* y, long long chunks, unsigned* sink) {
    staged_body<VPT, Cluster, Sync>(x, y, chunks, blockIdx.x, gridDim.x, sink);
}

// Strips of Lanes 16-byte vectors of adjacent columns; block b: strip b / parts, rows
// [part * rows / parts, ...); 512 threads = Lanes x slices, 8 loads in flight a thread.
template <int Lanes, bool Copy>
__global__ void __launch_bounds__(512) strip(const uint4* __restrict__ x, uint4* __restrict__ y, long long rows,
                                             long long row_vecs, int parts, unsigned* sink) {
    constexpr int Slices = 512 / Lanes;
    const long long s = blockIdx.x / parts, part = blockIdx.x % parts;
    const long long begin = part * rows / parts, end = (part + 1) * rows / parts;
    const long long col = s * Lanes + threadIdx.x % Lanes;
    unsigned acc = 0;
    for (long long r = begin + threadIdx.x / Lanes; r < end; r += 8 * Slices) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const long long q = r + u * Slices;
            v[u] = q < end ? __ldcs(x + q * row_vecs + col) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const long long q = r + u * Slices;
            if (Copy) {
                if (q < end) __stcs(y + q * row_vecs + col, v[u]);
            } else {
                acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
            }
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}
"""
NBYTES = 128 << 20
STAGED = [  # (name, template, VPT, blocks an SM, cluster)
    ("plain", "staged_plain<8, 3>", 8, 3, 1),
    ("plain", "staged_plain<12, 2>", 12, 2, 1),
] + [
    (f"cluster sync{sync}", f"staged_cluster<{vpt}, {per_sm}, {c}, {sync}>", vpt, per_sm, c)
    for vpt, per_sm in ((8, 3), (12, 2))
    for sync in (1, 2, 3, 4)
    for c in (2, 4, 8, 16)
]
STRIP_ROWS, STRIP_ROW_BYTES = 16384, 8192


def main():
    names = [t for _, t, *_ in STAGED] + [f"strip<{lanes}, {str(copy).lower()}>" for lanes in (2, 4, 8, 16, 32) for copy in (False, True)]
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)
    buffers = [cupy.random.random(NBYTES // 8).view(cupy.uint8) for _ in range(4)]
    out = cupy.empty_like(buffers[0])
    sink = cupy.zeros(1, cupy.uint32)
    copy = seconds_per_call(lambda b: cupy.copyto(out, b), buffers)
    print(f"copy 128 MiB: {2 * NBYTES / copy / 1e12:.2f} TB/s ({copy * 1e6:.1f} us)")
    print(f"{'staged copy':34s} {'grid':>6s} {'TB/s':>6s} {'of copy':>7s}")
    for label, template, vpt, per_sm, cluster in STAGED:
        kernel = module.get_function(template)
        smem = vpt * 512 * 16
        kernel.max_dynamic_shared_size_bytes = smem
        kernel.preferred_shared_memory_carveout = 100
        if cluster > 8:
            driver.funcSetAttribute(kernel.kernel.ptr, 14, 1)  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        chunks = NBYTES // smem
        for persistent in (False, True):
            grid = (132 * per_sm // cluster * cluster) if persistent else -(-chunks // cluster) * cluster
            if persistent and grid == 0:
                continue
            sec = seconds_per_call(
                lambda b: kernel((grid,), (512,), (b, out, np.int64(chunks), sink), shared_mem=smem), buffers)
            name = f"{label} c{cluster} {smem >> 10}KB {per_sm}/SM{' pers' if persistent else ''}"
            print(f"{name:34s} {grid:6d} {2 * NBYTES / sec / 1e12:6.2f} {copy / sec:7.3f}")
    print(f"{'strips of 16384 x 8 KB rows':34s} {'grid':>6s} {'TB/s':>6s} {'of copy':>7s}")
    row_vecs = STRIP_ROW_BYTES // 16
    for lanes in (2, 4, 8, 16, 32):
        for is_copy in (False, True):
            kernel = module.get_function(f"strip<{lanes}, {str(is_copy).lower()}>")
            strips = row_vecs // lanes
            for parts in (1, 4, 16):
                grid = strips * parts
                sec = seconds_per_call(
                    lambda b: kernel((grid,), (512,), (b, out, np.int64(STRIP_ROWS), np.int64(row_vecs), np.int32(parts), sink)),
                    buffers)
                traffic = NBYTES * (2 if is_copy else 1)
                name = f"{'copy' if is_copy else 'read'} {16 * lanes} B wide, {parts} parts"
                print(f"{name:34s} {grid:6d} {traffic / sec / 1e12:6.2f} {(traffic / sec) / (2 * NBYTES / copy):7.3f}")


if __name__ == "__main__":
    main()
