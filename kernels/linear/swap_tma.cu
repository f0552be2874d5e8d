// fused_linear_relu's weight stream for M <= 64 on Hopper (sm_90a): `linear_swap_tma`,
// the operands swapped (out^T = W^T x^T) so that the weight's columns are wgmma's M (64 per
// consumer warpgroup) and x's rows, padded to MX = 8, 16 or 64, its N; the TMA ring of
// common/tma_ring.cuh with x boxes of MX rows (where the straight kernel's box is 64), 64 to
// 256 k a stage, L2 told to evict the streamed weight first and keep x.
//
// Picked when (cufuse/ops/linear/select.py) the problem is 16-bit with M <= 64 on compute
// capability 9.0 and tensor maps describe both operands (either weight layout): 8 / 16 / 64
// padded rows by M, split-K only while the blocks do not fill the SMs once.
// `gated_linear_swap_tma`: fused_gated_linear's stream on the same rules (tensor maps over x
// and both weights), each stage's weight rows w_gate's 64 columns then w_up's.
#include "common/tma_ring.cuh"
#include "linear/wgmma_stage.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

// One stage's wgmma chain over 64 weight columns (rows `first` .. first + 63 of the stage's BN
// weight rows) into acc, without fence or commit. A = the weight tile: K-major for an (N, K).T
// weight (rows of n along k, the kmajor descriptor), M-major for a row-major (K, N) weight (n
// contiguous: the nmajor descriptor with imm-trans-a = 1, which wgmma allows for 16-bit
// shared-memory A). B = x's [MX][BK] tile, K-major.
template <typename T, int MX, int BN, int BK, bool B_KMAJOR>
__device__ __forceinline__ void swap_wgmma_chain(float (&acc)[MX / 2], const T* stage, int first) {
    const T* sw = stage + MX * BK;
    // The 64 weight columns: rows of the first column atom (K-major) or the n atom (N-major).
    const unsigned long long desc_w = B_KMAJOR ? sw128_kmajor_desc(sw + first * WGMMA_ATOM_N)
                                               : sw128_nmajor_desc<BK>(sw + first / 64 * BK * WGMMA_ATOM_N);
    const unsigned long long desc_x = sw128_kmajor_desc(stage);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        // k16 steps as in wgmma_stage: the M-major A two 1024-byte groups of 8 k rows further.
        const unsigned w_step = B_KMAJOR ? kmajor_k16_step<BN>(kk) : kk * (2 * 1024 / 16);
        Wgmma<MX, T>::template ss<0, B_KMAJOR ? 0 : 1>(acc, desc_w + w_step, desc_x + kmajor_k16_step<MX>(kk), 1);
    }
}

// One stage's wgmmas of a consumer warpgroup, one group: its own 64 weight columns (linear),
// or (GATED) w_gate's 64 columns into the first MX / 2 accumulators and w_up's (the stage's
// next 64 rows) into the others.
template <typename T, int MX, int BN, int BK, bool B_KMAJOR, bool GATED>
__device__ __forceinline__ void swap_wgmma_stage(float (&acc)[(GATED ? 2 : 1) * MX / 2], const T* stage,
                                                 int warpgroup) {
    float(&first)[MX / 2] = reinterpret_cast<float(&)[MX / 2]>(acc[0]);
    wgmma_fence();
    swap_wgmma_chain<T, MX, BN, BK, B_KMAJOR>(first, stage, GATED ? 0 : warpgroup * 64);
    if constexpr (GATED) swap_wgmma_chain<T, MX, BN, BK, B_KMAJOR>(
        reinterpret_cast<float(&)[MX / 2]>(acc[MX / 2]), stage, 64);
    wgmma_commit();
}

// Bias + activation and the transposed store of the swapped kernel's accumulators: d[4j + r] of
// warp q of warpgroup g is out^T row n = 64g + 16q + lane/4 + 8(r/2), column m = 8j +
// 2(lane%4) + r%2 (the m64nMX fragment), i.e. out[m, n]. GATED: one warpgroup, gate values in
// d[0 .. MX / 2), up values of the same elements MX / 2 further; act(gate) * up is stored, no
// bias. Split-K through slots first, as wgmma_store (THREADS consumer threads, which meet on
// their own named barrier). Staging the tile through shared memory for 16-byte row stores
// measured no faster.
template <typename T, int MX, int THREADS, bool GATED>
__device__ __forceinline__ void swap_store(float (&acc)[(GATED ? 2 : 1) * MX / 2], T* __restrict__ out,
                                           const T* __restrict__ bias, int64 bias_stride,
                                           float* __restrict__ workspace, int* __restrict__ counters,
                                           const TileWork& work, int64 M, int64 N, int activation) {
    constexpr int TILES = (GATED ? 2 : 1) * MX / 8;
    const int warpgroup = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float(&tiles)[1][TILES][4] = reinterpret_cast<float(&)[1][TILES][4]>(acc);
    if (gridDim.z > 1 && !reduce_split_slots<THREADS>(tiles, workspace, counters, THREADS)) return;
    const int64 n_base = work.n0 + warpgroup * 64 + warp * 16 + (lane >> 2);
    with_activation(activation, [&](auto act) {
#pragma unroll
        for (int j = 0; j < MX / 8; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int64 m = 8 * j + 2 * (lane & 3) + (r & 1), n = n_base + 8 * (r >> 1);
                if (m >= M || n >= N) continue;
                if constexpr (GATED)
                    out[m * N + n] = gated_act<decltype(act)::value, T>(tiles[0][j][r], tiles[0][j + MX / 8][r]);
                else
                    out[m * N + n] = bias_act<decltype(act)::value, T>(tiles[0][j][r], bias, bias_stride, n);
            }
    });
}

// The swapped stream of one block: BN weight columns of w_map (linear: BN / 64 consumer
// warpgroups of 64) or, GATED, 64 output columns with one consumer warpgroup over BN = 128
// stage rows, w_map's (w_gate) 64 columns then w2_map's (w_up). Returns false in the producer.
template <typename T, int BN, int MX, int BK, int STAGES, bool B_KMAJOR, bool L2_HINTS, bool GATED>
__device__ __forceinline__ bool swap_tma_tile(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                              const TmaDescriptor& w2_map, const TileWork& work,
                                              unsigned char* smem_raw, float (&acc)[(GATED ? 2 : 1) * MX / 2]) {
    constexpr int CONSUMERS = GATED ? 128 : 2 * BN;
    constexpr int PENDING = 1;  // one k tile's wgmmas in flight while the next stage is awaited
    static_assert(GATED ? BN == 128 : (BN == 64 || BN == 128), "64 weight columns a consumer warpgroup and weight");
    static_assert(MX == 8 || MX == 16 || MX == 64, "x rows padded to 8, 16 or 64: wgmma's N");
    static_assert(BK == 64 || BK == 128 || BK == 256, "one to four 128-byte swizzle atoms of k per row");
    T* smem = aligned_stages<T>(smem_raw);
    const int warpgroup = threadIdx.x >> 7;
    return tma_wgmma_ring<T, MX, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR, L2_HINTS, GATED ? 2 : 1>(
        x_map, w_map, w2_map, work, smem, acc, [&](float(&a)[(GATED ? 2 : 1) * MX / 2], const T* stage) {
            swap_wgmma_stage<T, MX, BN, BK, B_KMAJOR, GATED>(a, stage, warpgroup);
        });
}

}  // namespace cufuse::linear

// Grid: (ceil(N / BN), 1, splits); block: BN / 64 consumer warpgroups + one producer warp (2 x
// BN + 32 threads). x boxes of MX rows, weight boxes as linear_wgmma_tma's (x_map: boxes
// of 64 x MX; w_map: 64 x BN K-major, 64 x BK N-major). Split-K through slots (BN x MX floats
// a block) and the arguments otherwise as linear_wgmma_tma (no paired store: the output
// is written transposed, one element a lane). BK: 64, 128 or 256 k a stage (BK / 64 boxes
// per operand row; 256 or 512 contiguous bytes of an (N, K) weight row at once). L2_HINTS:
// the TMA loads carry L2 eviction policies (tma_wgmma_ring). Dynamic shared memory: STAGES
// x (MX + BN) x BK elements + 1 KB of alignment + 2 x STAGES mbarriers.
template <typename T, int BN, int MX, int BK, int STAGES, bool B_KMAJOR, bool L2_HINTS>
__global__ void __launch_bounds__(2 * BN + 32, 1)
linear_swap_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                     const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ workspace,
                     int* __restrict__ counters, int64 M, int64 N, int64 K, int64 bias_stride, int k_tiles_per_split,
                     int raster_group, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const TileWork work = tile_work<MX, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    float acc[MX / 2];
    if (!swap_tma_tile<T, BN, MX, BK, STAGES, B_KMAJOR, L2_HINTS, false>(x_map, w_map, w_map, work, smem_raw, acc))
        return;
    swap_store<T, MX, 2 * BN, false>(acc, out, bias, bias_stride, workspace, counters, work, M, N, activation);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// fused_gated_linear's weight stream for M <= 64: 64 output columns a block, one consumer
// warpgroup running a wgmma chain over w_gate's 64 columns and one over w_up's on each stage
// (BN = 128 stage rows: gate_map's, then up_map's, each map's boxes 64 x 64 K-major or 64 x
// BK N-major), act(gate) * up stored. Block: 128 + 32 threads; grid (ceil(N / 64), 1,
// splits); split-K through slots (2 x 64 x MX floats a block); no bias; the other arguments
// as linear_swap_tma's.
template <typename T, int MX, int BK, int STAGES, bool B_KMAJOR, bool L2_HINTS>
__global__ void __launch_bounds__(128 + 32, 1)
gated_linear_swap_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor gate_map,
                      const __grid_constant__ TmaDescriptor up_map, T* __restrict__ out,
                      float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K,
                      int k_tiles_per_split, int raster_group, int activation) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const TileWork work = tile_work<MX, 64, BK>(M, N, K, k_tiles_per_split, raster_group);
    float acc[MX];
    if (!swap_tma_tile<T, 128, MX, BK, STAGES, B_KMAJOR, L2_HINTS, true>(x_map, gate_map, up_map, work, smem_raw,
                                                                          acc))
        return;
    swap_store<T, MX, 128, true>(acc, out, nullptr, 0, workspace, counters, work, M, N, activation);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}
