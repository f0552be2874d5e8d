// fused_linear_relu on Hopper warpgroup MMA with operands loaded by cp.async (sm_90a):
// `linear_wgmma`. Block-synchronous pipeline: every thread issues its share of a k tile's
// copies, a block barrier per k tile, then each warpgroup's wgmmas (linear/wgmma_stage.cuh).
//
// Picked when (cufuse/ops/linear/select.py) the problem would take the TMA-fed kernel
// (linear/wgmma_tma.cu) on compute capability 9.0 but no tensor map can describe its
// operands (x rows broadcast with row stride 0, rows that overlap, K = 0): M = 17..64 on the
// 64x64 stream tile, and M > 64 wherever the wgmma tiles beat the mma ones.
#include "linear/gemm_tile.cuh"
#include "linear/wgmma_stage.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

// cp.async of a K-major [ROWS][BK] tile (x, or a K-major weight: src + row * ld + k) as
// BK / 64 column atoms of [ROWS][64] (kmajor_atom_offset: the layout sw128_kmajor_desc
// describes) by THREADS threads (`thread`: this one's index among them). Consecutive threads
// take consecutive 16-byte chunks of a row; chunks outside rows or k_end are zero-filled.
template <int ROWS, int BK, int THREADS, typename T>
__device__ __forceinline__ void wgmma_load_kmajor(T* dst, const T* __restrict__ src, int64 row0, int64 rows,
                                                  int64 k0, int64 k_end, int64 ld, int thread) {
    constexpr int row_chunks = BK / 8, chunks = ROWS * row_chunks;
#pragma unroll
    for (int i = 0; i < (chunks + THREADS - 1) / THREADS; ++i) {
        const int c = thread + i * THREADS;
        if (chunks % THREADS != 0 && c >= chunks) break;
        const int row = c / row_chunks, col = (c % row_chunks) * 8;
        const bool ok = row0 + row < rows && k0 + col < k_end;
        cp_async_16(dst + kmajor_atom_offset<ROWS>(row, col), ok ? src + (row0 + row) * ld + k0 + col : src, ok);
    }
}

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block: BM / 64 warpgroups (2 x BM threads), tile
// BM x BN x BK (BK 64 or 128: a k tile per barrier), STAGES-deep cp.async pipeline
// (dynamic shared memory STAGES x (BM + BN) x 2 BK bytes + 1 KB to align the stages to
// 1024 bytes). Operand rules, B_KMAJOR, split-K (k tiles per split, counters) as
// linear_mma; split-K always reduces through slots.
// PENDING wgmma groups (k tiles) stay in flight while the next stage is waited for, so the
// tensor cores run across the barrier; those stages cannot be refilled yet, so the loads
// run STAGES - 1 - PENDING tiles ahead (the trade: MMA overlap against load depth).
// MIN_BLOCKS: blocks per SM the registers must allow (__launch_bounds__).
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, int MIN_BLOCKS, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM, MIN_BLOCKS)
linear_wgmma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                  float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                  int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store,
                  int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ACC = BN / 2;
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    static_assert(BM == 64 || BM == 128, "one or two warpgroups of 64 rows");
    constexpr int AHEAD = STAGES - 1 - PENDING;  // k tiles whose loads are in flight
    static_assert(PENDING >= 0 && AHEAD >= 1, "at least one tile loads ahead");
    using Tile = GemmTile<T, BM, BN, BK, BM / 64, 4, STAGES, true>;  // stage sizes and 2 x BM threads
    extern __shared__ unsigned char smem_raw[];
    T* smem = aligned_stages<T>(smem_raw);

    const TileWork work = tile_work<BM, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    const int warpgroup = threadIdx.x >> 7;

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;

    // k tile kt into its stage (an empty group past the split keeps the wait counts uniform at the tail).
    auto load = [&](int kt) {
        if (kt < work.k_tiles) {
            T* stage = smem + (kt % STAGES) * Tile::stage_elems;
            const int64 k0 = work.k_begin + int64(kt) * BK;
            wgmma_load_kmajor<BM, BK, Tile::threads>(stage, x, work.m0, M, k0, work.k_end, ldx, threadIdx.x);
            if constexpr (B_KMAJOR)
                wgmma_load_kmajor<BN, BK, Tile::threads>(stage + Tile::a_elems, w, work.n0, N, k0, work.k_end, ldw,
                                                         threadIdx.x);
            else
                wgmma_load_b_nmajor<T, BN, BK, Tile::threads>(stage + Tile::a_elems, w, work.n0, k0, N, work.k_end,
                                                              ldw, threadIdx.x);
        }
        cp_async_commit();
    };

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) load(s);
    for (int kt = 0; kt < work.k_tiles; ++kt) {
        cp_async_wait<AHEAD - 1>();
        fence_proxy_async_shared();
        // Stage kt landed for all; every warp's wgmmas up to tile kt - 1 - PENDING are done,
        // and that is the stage the next load refills.
        __syncthreads();
        load(kt + AHEAD);
        wgmma_stage<T, BM, BN, BK, B_KMAJOR>(acc, smem + (kt % STAGES) * Tile::stage_elems, warpgroup);
        wgmma_wait<PENDING>();
#pragma unroll
        for (int i = 0; i < ACC; ++i) pin(acc[i]);
    }
    cp_async_wait<0>();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) pin(acc[i]);
    wgmma_store<T, BN, Tile::threads>(acc, out, bias, bias_stride, workspace, counters, work, M, N, paired_store, 0,
                             activation);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}
