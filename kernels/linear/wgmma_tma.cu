// fused_linear_relu on Hopper warpgroup MMA fed by TMA (sm_90a): `linear_wgmma_tma`.
// The tiles, stage layout, wgmmas and epilogue of linear_wgmma (linear/wgmma_stage.cuh),
// but a producer warp loads the stages through tensor maps into an mbarrier ring
// (common/tma_ring.cuh): no block barrier in the main loop.
//
// Picked when (cufuse/ops/linear/select.py) the problem is 16-bit, M > 64, on compute
// capability 9.0, tensor maps describe both operands, and a wgmma tile beats the mma tiles:
// once 128x256 tiles fill the SMs, the best-scoring of 128x256 / 128x128 / 64x256 (wave fill),
// else the best-scoring of all five, K split through slots where the tiles leave block slots idle.
// `gated_linear_wgmma_tma` (fused_gated_linear): the same ring and tiles with each stage's
// weight columns half w_gate's, half w_up's; picked for every 16-bit gated problem with M > 64
// on compute capability 9.0 whose operands tensor maps describe (select.choose).
#include "common/tma_ring.cuh"
#include "linear/wgmma_stage.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

// One output tile's accumulators through the TMA ring: BM / 64 consumer warpgroups (the
// block's first 2 x BM threads) and one producer warp; B_PARTS weight maps fill each stage's
// BN columns (linear: 1; gated: w_gate's BN / 2 then w_up's). Returns false in the producer
// warp, true in the consumers with acc complete.
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, bool B_KMAJOR, int B_PARTS>
__device__ __forceinline__ bool wgmma_tma_tile(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                               const TmaDescriptor& w2_map, const TileWork& work,
                                               unsigned char* smem_raw, float (&acc)[BN / 2]) {
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
    T* smem = aligned_stages<T>(smem_raw);
    const int warpgroup = threadIdx.x >> 7;
    return tma_wgmma_ring<T, BM, BN, BK, STAGES, PENDING, 2 * BM, B_KMAJOR, false, B_PARTS>(
        x_map, w_map, w2_map, work, smem, acc,
        [&](float(&a)[BN / 2], const T* stage) { wgmma_stage<T, BM, BN, BK, B_KMAJOR>(a, stage, warpgroup); });
}

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block: BM / 64 consumer warpgroups, then one
// producer warp (2 x BM + 32 threads). The loads run up to STAGES - PENDING tiles ahead; the
// split-K epilogue syncs the consumers only (named barrier).
// Parameters: x_map over x as {K, M} (row stride ldx), w_map over the weight as {K, N}
// (K-major) or {N, K} (N-major), both with 128-byte swizzle and boxes of 64 inner
// elements (cufuse/_core/tma.py; box rows BM, BN or BK). Dynamic shared memory: the stages of
// linear_wgmma (with its 1 KB of alignment), then 2 x STAGES mbarriers.
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, int MIN_BLOCKS, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM + 32, MIN_BLOCKS)
linear_wgmma_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                      const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ workspace,
                      int* __restrict__ counters, int64 M, int64 N, int64 K, int64 bias_stride, int k_tiles_per_split,
                      int raster_group, int paired_store, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const TileWork work = tile_work<BM, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    float acc[BN / 2];
    if (!wgmma_tma_tile<T, BM, BN, BK, STAGES, PENDING, B_KMAJOR, 1>(x_map, w_map, w_map, work, smem_raw, acc)) return;
    wgmma_store<T, BN, 2 * BM>(acc, out, bias, bias_stride, workspace, counters, work, M, N, paired_store, 2 * BM,
                               activation);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// fused_gated_linear: act(x @ w_gate) * (x @ w_up). A block covers BN / 2 output columns;
// each stage's weight tile is w_gate's BN / 2 columns, then w_up's (gate_map, up_map: the
// weight map of linear_wgmma_tma over each, K-major boxes of BN / 2 rows), so a thread's
// n8 tiles j and j + BN / 16 hold the gate and the up value of one output (store_gated). No
// bias; the other arguments as linear_wgmma_tma's.
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, int MIN_BLOCKS, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM + 32, MIN_BLOCKS)
gated_linear_wgmma_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor gate_map,
                       const __grid_constant__ TmaDescriptor up_map, T* __restrict__ out,
                       float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K,
                       int k_tiles_per_split, int raster_group, int paired_store, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const TileWork work = tile_work<BM, BN / 2, BK>(M, N, K, k_tiles_per_split, raster_group);
    float acc[BN / 2];
    if (!wgmma_tma_tile<T, BM, BN, BK, STAGES, PENDING, B_KMAJOR, 2>(x_map, gate_map, up_map, work, smem_raw, acc))
        return;
    wgmma_store_gated<T, BN, 2 * BM>(acc, out, workspace, counters, work, M, N, paired_store, activation);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}
