// The tile geometry of the cp.async tensor-core kernels of fused_linear_relu: linear_mma's
// block tile and warp grid, whose stage sizes linear_wgmma (cp.async) uses too.
#pragma once
#include "common/common.cuh"

namespace cufuse::linear {

// Block tile BM x BN x BK of WARPS_M x WARPS_N warps, STAGES stages of shared memory: x as
// [BM][BK], the weight as [BN][BK] when K-major, else [BK][BN], rows of 16-byte chunks.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
struct GemmTile {
    static constexpr int threads = 32 * WARPS_M * WARPS_N;
    static constexpr int warp_m = BM / WARPS_M, warp_n = BN / WARPS_N;
    static constexpr int mi = warp_m / 16, ni = warp_n / 8;  // mma tiles per warp
    static constexpr int a_elems = BM * BK;
    static constexpr int b_elems = BK * BN;
    static constexpr int stage_elems = a_elems + b_elems;
    // A: [BM][BK]; B: [BN][BK] when K-major, else [BK][BN].
    static constexpr int a_row_chunks = BK / 8;
    static constexpr int b_row_chunks = B_KMAJOR ? BK / 8 : BN / 8;
    static_assert(BK % 16 == 0 && (BK / 8 >= 8 || BK / 8 == 4) && BN / 8 >= 8, "swizzle needs rows of 4 or >= 8 chunks");
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "warp tile must hold whole x4 ldmatrix loads");
    static_assert(b_elems / 8 % threads == 0, "B chunks per thread");
};

}  // namespace cufuse::linear
