// fused_linear_relu on Hopper warpgroup MMA fed by TMA, persistent (sm_90a):
// `linear_relu_wgmma_persistent`. linear_relu_wgmma_tma's tiles, stages, wgmmas and epilogue,
// but a grid of at most one wave of blocks, each walking output tiles blockIdx.x, + gridDim.x,
// ... in the raster order, through one mbarrier ring (common/tma_ring.cuh): the producer loads
// the next tile's first stages while the consumers run the current tile's epilogue, and no
// block pays the pipeline fill more than once. The producer is a whole warpgroup (one thread
// issues) so that setmaxnreg can hand its registers to the consumers: the loop state of the
// walk does not fit beside 128 accumulators in the 168 registers of a 9-warp block.
//
// Picked when (cufuse/ops/linear/select.py) the problem takes an unsplit one-block-an-SM TMA
// tile of linear_relu_wgmma_tma and its tiles fill more than one wave (docs/linear.md).
#include "common/tma_ring.cuh"
#include "linear/wgmma_stage.cuh"

using namespace cufuse;
using namespace cufuse::linear;

// Grid: (min(tiles, SMs), 1, 1). Block: BM / 64 consumer warpgroups, then the producer
// warpgroup (2 x BM + 128 threads); registers at launch 168 a thread (65536 / 384), then 56 for
// the producer and CONSUMER_REGS for the consumers (2 x 128 x 224 + 128 x 56 = 65536 - 1024).
// Parameters: linear_relu_wgmma_tma's (the workspace, counters and k_tiles_per_split are
// unused: no split-K).
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM + 128, 1)
linear_relu_wgmma_persistent(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                             const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ workspace,
                             int* __restrict__ counters, int64 M, int64 N, int64 K, int64 bias_stride,
                             int k_tiles_per_split, int raster_group, int paired_store, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ACC = BN / 2, CONSUMERS = 2 * BM;
    constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = BM == 128 ? 224 : 240;
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
    extern __shared__ unsigned char smem_raw[];
    TmaWgmmaRing<T, BM, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR> ring(aligned_stages<T>(smem_raw));
    // Tile indices fit 32 bits (the host's grid bound); 64-bit ones cost the consumers the
    // registers their 128 accumulators leave (168 a thread at 9 warps).
    const int tiles = int(((M + BM - 1) / BM) * ((N + BN - 1) / BN));
    const KRange k_range{0, K, int((K + BK - 1) / BK)};
    int passed = 0;
    if (ring.is_producer()) {
        warpgroup_release_registers<PRODUCER_REGS>();
        if (threadIdx.x == CONSUMERS)
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
                ring.produce(x_map, w_map, TileWork{tile_corner<BM, BN>(tile, M, N, raster_group), k_range}, passed);
        return;
    }
    warpgroup_claim_registers<CONSUMER_REGS>();
    const int warpgroup = threadIdx.x >> 7;
    float acc[ACC];
#pragma unroll 1
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileWork work{tile_corner<BM, BN>(tile, M, N, raster_group), k_range};
        ring.consume(work, acc, [&](float(&a)[ACC], const T* stage) { wgmma_stage<T, BM, BN, BK, B_KMAJOR>(a, stage, warpgroup); },
                     passed);
        wgmma_store<T, BN, CONSUMERS>(acc, out, bias, bias_stride, workspace, counters, work, M, N, paired_store,
                                      CONSUMERS, activation);
    }
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}
