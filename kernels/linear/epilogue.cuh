// Device code shared by the fused_linear_relu kernel families: which output tile and k range
// a block computes (raster order, split-K), and the epilogue (bias + ReLU on the
// accumulators, the only store of the output).
#pragma once
#include "common/common.cuh"

namespace cufuse::linear {

// Bias + ReLU on one accumulator; NaN survives as in np.maximum(NaN, 0).
template <typename T>
__device__ __forceinline__ T bias_relu(accum_t<T> acc, const T* __restrict__ bias, int64 bias_stride, int64 n) {
    if (bias != nullptr) acc += to_accum(bias[n * bias_stride]);
    return from_accum<T>(nan_max(acc, accum_t<T>(0)));
}

// Tile (tile_m, tile_n) of linear block index `tile`: groups of `group` tile rows are walked
// column by column so that consecutive blocks share weight columns and x rows in L2.
__device__ __forceinline__ void raster_tile(int64 tile, int64 tiles_m, int64 tiles_n, int group,
                                            int64& tile_m, int64& tile_n) {
    const int64 per_group = int64(group) * tiles_n;
    const int64 first_m = (tile / per_group) * group;
    const int64 rows = min(int64(group), tiles_m - first_m);
    const int64 in_group = tile % per_group;
    tile_m = first_m + in_group % rows;
    tile_n = in_group / rows;
}

// The output tile of a block of a tiled kernel (grid: tiles_m * tiles_n, 1, splits): its
// first row and column, in raster order.
struct TileCorner {
    int64 m0, n0;
};
template <int BM, int BN>
__device__ __forceinline__ TileCorner tile_corner(int64 M, int64 N, int raster_group) {
    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    return {tile_m * BM, tile_n * BN};
}

// The block's k range: split z = blockIdx.z covers k tiles [z * k_tiles_per_split, (z + 1) *
// k_tiles_per_split) of BK, cut at K.
struct KRange {
    int64 k_begin, k_end;
    int k_tiles;  // K = 0: none, the tile is bias + ReLU only
};
template <int BK>
__device__ __forceinline__ KRange split_k_range(int64 K, int k_tiles_per_split) {
    const int64 k_begin = int64(blockIdx.z) * k_tiles_per_split * BK;
    const int64 k_end = min(K, k_begin + int64(k_tiles_per_split) * BK);
    return {k_begin, k_end, int((k_end - k_begin + BK - 1) / BK)};
}

// Both, for kernels that keep them together (the TMA ring reads m0, n0, k_begin, k_tiles).
struct TileWork : TileCorner, KRange {};
template <int BM, int BN, int BK>
__device__ __forceinline__ TileWork tile_work(int64 M, int64 N, int64 K, int k_tiles_per_split, int raster_group) {
    return {tile_corner<BM, BN>(M, N, raster_group), split_k_range<BK>(K, k_tiles_per_split)};
}

// Zeroes a warp's m16n8 accumulator tiles.
template <typename A, int MI, int NI>
__device__ __forceinline__ void zero_accumulators(A (&acc)[MI][NI][4]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = A(0);
}

// Bias + ReLU on a warp's accumulators and the only store of the output. Layout of
// mma.sync m16n8 (and of wgmma, per 16-row warp slice): tile (i, j) element r sits at row
// row_base + 16i + 8(r/2), column col_base + 8j + r%2. `paired_store`: N even and out
// aligned to two elements, so a column pair is one 32-bit store (16-bit types only).
template <typename T, int MI, int NI>
__device__ __forceinline__ void store_bias_relu(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out,
                                                const T* __restrict__ bias, int64 bias_stride, int64 row_base,
                                                int64 col_base, int64 M, int64 N, int paired_store) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64 m = row_base + i * 16 + h * 8, n = col_base + j * 8;
                if (m >= M) continue;
                T* dst = out + m * N + n;
                if (paired_store && n + 1 < N) {
                    T pair[2] = {bias_relu<T>(acc[i][j][2 * h], bias, bias_stride, n),
                                 bias_relu<T>(acc[i][j][2 * h + 1], bias, bias_stride, n + 1)};
                    *reinterpret_cast<unsigned*>(dst) = *reinterpret_cast<const unsigned*>(pair);
                } else {
                    if (n < N) dst[0] = bias_relu<T>(acc[i][j][2 * h], bias, bias_stride, n);
                    if (n + 1 < N) dst[1] = bias_relu<T>(acc[i][j][2 * h + 1], bias, bias_stride, n + 1);
                }
            }
}

}  // namespace cufuse::linear

