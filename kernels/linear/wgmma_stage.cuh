// Device code of the Hopper (sm_90a) kernels of fused_linear_relu (linear_wgmma,
// linear_wgmma_tma, linear_swap_tma): stage alignment, one stage's warpgroup MMAs
// and the epilogue of the straight (unswapped) tiles.
//
// Block tile BM x BN x BK (BM = 64 or 128: one or two warpgroups of 64 rows; BN = 64, 128 or
// 256: the wgmma instruction's N); x (A) and the weight (B) come from shared memory through
// matrix descriptors, as 128-byte swizzled rows (x, and a K-major weight: a transposed (N, K)
// array) or, for a row-major (K, N) weight, as 128-byte swizzle atoms that run along N, read
// transposed (imm-trans-b = 1, 16-bit types only).
#pragma once
#include "common/split_k.cuh"
#include "common/wgmma.cuh"
#include "linear/epilogue.cuh"

namespace cufuse::linear {

// The dynamic shared memory of the wgmma kernels from its first 1024-byte boundary (the
// 128-byte swizzle repeats every 1024 bytes; the hosts add 1 KB for it).
template <typename T>
__device__ __forceinline__ T* aligned_stages(unsigned char* smem_raw) {
    return reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
}

// A stage holds x as [BM][BK] (BK / 64 column atoms, kmajor_atom_offset), then the weight:
// K-major as [BN][BK] the same way, N-major as BN / 64 atoms of [BK][64] (nmajor_atom_offset).
// This warpgroup's wgmmas of one stage (landed and visible to the async proxy), one group:
// SLICES row slices of 64 from slice `first_slice` of x (acc's BN / 2 values a slice), every
// slice against the same weight columns.
template <typename T, int BM, int BN, int BK, bool B_KMAJOR, int SLICES = 1>
__device__ __forceinline__ void wgmma_stage(float (&acc)[SLICES * BN / 2], const T* stage, int first_slice) {
    const T* sb = stage + BM * BK;
    // This warpgroup's first 64 rows of x in the first column atom.
    const unsigned long long desc_a = sw128_kmajor_desc(stage + first_slice * 64 * WGMMA_ATOM_N);
    const unsigned long long desc_b = B_KMAJOR ? sw128_kmajor_desc(sb) : sw128_nmajor_desc<BK>(sb);
    constexpr unsigned slice_step = 64 * WGMMA_ATOM_N * sizeof(T) / 16;  // 64 rows of 128 bytes
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        // k16 steps (descriptor addresses in 16-byte units): K-major tiles as
        // kmajor_k16_step; the N-major B two 1024-byte groups of 8 k rows further.
        const unsigned b_step = B_KMAJOR ? kmajor_k16_step<BN>(kk) : kk * (2 * 1024 / 16);
#pragma unroll
        for (int s = 0; s < SLICES; ++s)
            Wgmma<BN, T>::template ss<B_KMAJOR ? 0 : 1>(reinterpret_cast<float(&)[BN / 2]>(acc[s * BN / 2]),
                                                        desc_a + s * slice_step + kmajor_k16_step<BM>(kk),
                                                        desc_b + b_step, 1);
    }
    wgmma_commit();
}

// The first row and column of this thread's accumulators in a tile, its warpgroup's first row
// 64 x `slice` rows in (wgmma layout: warp q of a warpgroup owns rows 16q..16q+15 of each 64).
struct FragmentOrigin {
    int64 row, col;
};
__device__ __forceinline__ FragmentOrigin fragment_origin(const TileWork& work, int slice) {
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    return {work.m0 + slice * 64 + warp * 16 + (lane >> 2), work.n0 + 2 * (lane & 3)};
}

// The epilogue of the straight wgmma kernels, called by the THREADS consumer threads (the
// first of the block): split-K through slots when gridDim.z > 1 (`sync_threads` as
// reduce_split_slots), then bias + activation and the only store. wgmma accumulator layout: warp q
// of a warpgroup owns rows 16q..16q+15 of its 64, as mma.sync m16n8 tiles along N: d[4j + r]
// at row lane/4 + 8(r/2), column 8j + 2(lane%4) + r%2.
template <typename T, int BN, int THREADS>
__device__ __forceinline__ void wgmma_store(float (&acc)[BN / 2], T* __restrict__ out, const T* __restrict__ bias,
                                            int64 bias_stride, float* __restrict__ workspace,
                                            int* __restrict__ counters, const TileWork& work, int64 M, int64 N,
                                            int paired_store, int sync_threads, int activation) {
    float(&tiles)[1][BN / 8][4] = reinterpret_cast<float(&)[1][BN / 8][4]>(acc);
    if (gridDim.z > 1 && !reduce_split_slots<THREADS>(tiles, workspace, counters, sync_threads)) return;
    const FragmentOrigin at = fragment_origin(work, threadIdx.x >> 7);
    store_bias_act<T>(tiles, out, bias, bias_stride, at.row, at.col, M, N, paired_store, activation);
}

// The gated kernel's epilogue: as wgmma_store, with the tile's BN columns half gate, half up
// (n8 tiles j and j + BN / 16 of one output column), act(gate) * up stored (store_gated) over
// BN / 2 output columns from work.n0.
template <typename T, int BN, int THREADS>
__device__ __forceinline__ void wgmma_store_gated(float (&acc)[BN / 2], T* __restrict__ out,
                                                  float* __restrict__ workspace, int* __restrict__ counters,
                                                  const TileWork& work, int64 M, int64 N, int paired_store,
                                                  int activation) {
    float(&tiles)[1][BN / 8][4] = reinterpret_cast<float(&)[1][BN / 8][4]>(acc);
    if (gridDim.z > 1 && !reduce_split_slots<THREADS>(tiles, workspace, counters, THREADS)) return;
    const FragmentOrigin at = fragment_origin(work, threadIdx.x >> 7);
    store_gated<T>(tiles, out, at.row, at.col, M, N, paired_store, activation);
}

}  // namespace cufuse::linear
