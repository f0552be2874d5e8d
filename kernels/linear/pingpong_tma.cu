// fused_linear and fused_gated_linear on Hopper with ping-pong consumers (sm_90a):
// `linear_pingpong_tma`, `gated_linear_pingpong_tma`. A persistent block walks its output
// tiles through one TMA ring (common/tma_ring.cuh); its two consumer warpgroups take the tiles
// in turn, each a whole WM x BN tile, so one warpgroup's epilogue (bias, activation, the only
// store) runs while the other's wgmmas keep the tensor cores busy. The cooperative kernel
// (linear/wgmma_tma.cu) stops its main loop for every tile's epilogue; a persistent form of it
// measured no faster because that stop, not the launch, is what a wave loses (docs/linear.md).
//
// Turns: a warpgroup starts a tile once the other one has seen the previous tile's last stage
// land (a named barrier). The producer fills the ring in tile order, so the main loops alternate
// anyway; the turn keeps each first wait of a tile within one phase of its mbarrier (a parity
// wait for a phase two ahead would pass at once: tests/linear/test_pingpong.py's model).
#include "common/tma_ring.cuh"
#include "linear/wgmma_stage.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

// Named barriers 2 + w: warpgroup w's turn (0 is __syncthreads, 1 the split-K epilogue's).
constexpr int TURN_BARRIER = 2;

// Registers a thread after setmaxnreg: a warp of each warpgroup shares an SM sub-partition's
// 16 K registers (40 + 2 x 232 = 504 x 32 <= 16384).
constexpr int PINGPONG_PRODUCER_REGISTERS = 40, PINGPONG_CONSUMER_REGISTERS = 232;

// The block of both kernels: tiles blockIdx.x, blockIdx.x + gridDim.x, ... of the raster order
// over tiles of WM rows and OUT_N output columns (the gated kernel: BN / 2), the block's i-th
// tile to consumer warpgroup i % 2. `store(acc, work)` is a warpgroup's epilogue of one tile.
// Block: two consumer warpgroups, then a producer warpgroup whose first thread issues the
// loads (384 threads: at 168 registers a thread, what a block of 288 or 384 threads gets, the
// consumers' 128 accumulators and epilogue state spilled; setmaxnreg moves the producer's
// registers to them). No split-K: every tile takes all of K.
template <typename T, int WM, int BN, int BK, int STAGES, int PENDING, bool B_KMAJOR, int B_PARTS, int OUT_N,
          typename Store>
__device__ __forceinline__ void pingpong_block(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                               const TmaDescriptor& w2_map, int64 M, int64 N, int64 K,
                                               int raster_group, unsigned char* smem_raw, Store store) {
    static_assert(WM == 64 || WM == 128, "a warpgroup's tile is one or two wgmma slices of 64 rows");
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    constexpr int CONSUMERS = 256, SLICES = WM / 64;
    TmaWgmmaRing<T, WM, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR, false, B_PARTS, 128> ring(
        aligned_stages<T>(smem_raw));
    const int64 tiles = ((M + WM - 1) / WM) * ((N + OUT_N - 1) / OUT_N);
    const KRange k_range{0, K, int((K + BK - 1) / BK)};
    auto work_of = [&](int64 tile) { return TileWork{tile_corner<WM, OUT_N>(tile, M, N, raster_group), k_range}; };
    if (ring.is_producer()) {
        setmaxnreg_dec<PINGPONG_PRODUCER_REGISTERS>();
        if (threadIdx.x != CONSUMERS) return;
        int passed = 0;
        for (int64 tile = blockIdx.x; tile < tiles; tile += gridDim.x)
            ring.produce(x_map, w_map, w2_map, work_of(tile), passed);
        return;
    }
    setmaxnreg_inc<PINGPONG_CONSUMER_REGISTERS>();
    const int warpgroup = threadIdx.x >> 7;
    // The ring position of this warpgroup's next tile: the other warpgroup's tiles pass between.
    int passed = warpgroup * k_range.k_tiles;
    float acc[SLICES * BN / 2];
    for (int64 tile = blockIdx.x + int64(warpgroup) * gridDim.x; tile < tiles; tile += 2 * int64(gridDim.x)) {
        const TileWork work = work_of(tile);
        if (tile > blockIdx.x) named_barrier_sync(TURN_BARRIER + warpgroup, 256);
        const bool next = tile + gridDim.x < tiles;
        auto stage_mma = [&](float(&a)[SLICES * BN / 2], const T* stage) {
            wgmma_stage<T, WM, BN, BK, B_KMAJOR, SLICES>(a, stage, 0);
        };
        ring.consume(work, acc, stage_mma, passed, [&] {
            if (next) named_barrier_arrive(TURN_BARRIER + (warpgroup ^ 1), 256);
        });
        passed += k_range.k_tiles;
        store(acc, work);
    }
}

// A warpgroup's accumulators as m16n8 tiles: slice s, n8 tile j, value r (rows 64 apart).
template <int WM, int BN>
using SliceTiles = float[WM / 64][BN / 8][4];

}  // namespace cufuse::linear

// Grid: (min(tiles, SMs), 1, 1), persistent. Block: 384 threads (two consumer warpgroups, one
// producer warpgroup). The arguments are linear_wgmma_tma's (x_map with boxes of WM rows, w_map
// with boxes of BN rows K-major or BK rows N-major); the workspace and counters are unused
// (null: the tiles are never split) and k_tiles_per_split is K's whole count. Dynamic shared
// memory: STAGES stages of (WM + BN) x BK elements after 1 KB of alignment, then 2 x STAGES
// mbarriers.
template <typename T, int WM, int BN, int BK, int STAGES, int PENDING, bool B_KMAJOR>
__global__ void __launch_bounds__(384, 1)
linear_pingpong_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                    const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ /* workspace */,
                    int* __restrict__ /* counters */, int64 M, int64 N, int64 K, int64 bias_stride,
                    int /* k_tiles_per_split */, int raster_group, int paired_store, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    pingpong_block<T, WM, BN, BK, STAGES, PENDING, B_KMAJOR, 1, BN>(
        x_map, w_map, w_map, M, N, K, raster_group, smem_raw, [&](float(&acc)[WM * BN / 128], const TileWork& work) {
            const FragmentOrigin at = fragment_origin(work, 0);  // the warpgroup holds every slice
            store_bias_act<T, 64>(reinterpret_cast<SliceTiles<WM, BN>&>(acc), out, bias, bias_stride, at.row, at.col,
                                  M, N, paired_store, activation);
        });
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// fused_gated_linear: act(x @ w_gate) * (x @ w_up), each stage's weight tile w_gate's BN / 2
// columns then w_up's (gate_map, up_map: K-major boxes of BN / 2 rows), a tile BN / 2 output
// columns (store_gated); no bias, the other arguments as linear_pingpong_tma's.
template <typename T, int WM, int BN, int BK, int STAGES, int PENDING, bool B_KMAJOR>
__global__ void __launch_bounds__(384, 1)
gated_linear_pingpong_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor gate_map,
                          const __grid_constant__ TmaDescriptor up_map, T* __restrict__ out,
                          float* __restrict__ /* workspace */, int* __restrict__ /* counters */, int64 M, int64 N,
                          int64 K, int /* k_tiles_per_split */, int raster_group, int paired_store, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    pingpong_block<T, WM, BN, BK, STAGES, PENDING, B_KMAJOR, 2, BN / 2>(
        x_map, gate_map, up_map, M, N, K, raster_group, smem_raw,
        [&](float(&acc)[WM * BN / 128], const TileWork& work) {
            const FragmentOrigin at = fragment_origin(work, 0);
            store_gated<T, 64>(reinterpret_cast<SliceTiles<WM, BN>&>(acc), out, at.row, at.col, M, N, paired_store,
                               activation);
        });
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}
