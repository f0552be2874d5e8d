// Device code shared by the fused_linear kernel families (named linear_relu_* since ReLU was
// their first epilogue): which output tile and k range a block computes (raster order,
// split-K), and the epilogue (bias + activation on the accumulators, the only store of the
// output; or the gated form's act(gate) * up).
#pragma once
#include "common/common.cuh"
#include "common/split_k.cuh"

namespace cufuse::linear {

// The epilogue's activation, a kernel argument (cufuse/ops/linear/activations.py numbers
// them): one uniform branch per output element, no extra instantiations.
enum Activation : int { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_GELU_TANH = 3, ACT_SILU = 4 };

__device__ __forceinline__ float erf_of(float v) { return erff(v); }
__device__ __forceinline__ double erf_of(double v) { return erf(v); }
__device__ __forceinline__ float tanh_of(float v) { return tanhf(v); }
__device__ __forceinline__ double tanh_of(double v) { return tanh(v); }
__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

// ACT(v) in the accumulator type, the formulas of cufuse.reference.apply_activation: NaN
// stays NaN (np.maximum(NaN, 0) for ReLU), -inf gives the limit 0 (the formulas' -inf * 0
// would be NaN), +inf gives +inf.
template <int ACT, typename A>
__device__ __forceinline__ A activate(A v) {
    if constexpr (ACT == ACT_RELU) {
        return nan_max(v, A(0));
    } else if constexpr (ACT == ACT_GELU) {
        return v == neg_infinity<A>() ? A(0) : A(0.5) * v * (A(1) + erf_of(v * A(0.70710678118654752440)));
    } else if constexpr (ACT == ACT_GELU_TANH) {
        const A inner = A(0.79788456080286535588) * (v + A(0.044715) * v * v * v);
        return v == neg_infinity<A>() ? A(0) : A(0.5) * v * (A(1) + tanh_of(inner));
    } else if constexpr (ACT == ACT_SILU) {
        return v == neg_infinity<A>() ? A(0) : v / (A(1) + exp_of(-v));
    } else {
        return v;
    }
}

template <int ACT>
struct ActivationTag {
    static constexpr int value = ACT;
};

// body(ActivationTag<ACT>()) for the runtime `activation`: one branch per
// epilogue, outside its unrolled loops, so each loop holds one activation's code (a switch per
// element would keep all five live across a tile's accumulators and spill the largest tiles).
template <typename Body>
__device__ __forceinline__ void with_activation(int activation, const Body& body) {
    switch (activation) {
        case ACT_RELU: body(ActivationTag<ACT_RELU>()); break;
        case ACT_GELU: body(ActivationTag<ACT_GELU>()); break;
        case ACT_GELU_TANH: body(ActivationTag<ACT_GELU_TANH>()); break;
        case ACT_SILU: body(ActivationTag<ACT_SILU>()); break;
        default: body(ActivationTag<ACT_NONE>()); break;
    }
}

// Bias + ACT on one accumulator, rounded to T.
template <int ACT, typename T>
__device__ __forceinline__ T bias_act(accum_t<T> acc, const T* __restrict__ bias, int64 bias_stride, int64 n) {
    if (bias != nullptr) acc += to_accum(bias[n * bias_stride]);
    return from_accum<T>(activate<ACT>(acc));
}

// The same with the activation chosen per element (epilogues that are loops, not unrolled).
template <typename T>
__device__ __forceinline__ T bias_act(accum_t<T> acc, const T* __restrict__ bias, int64 bias_stride, int64 n,
                                      int activation) {
    T result;
    with_activation(activation, [&](auto act) { result = bias_act<decltype(act)::value, T>(acc, bias, bias_stride, n); });
    return result;
}

// The gated form's output element: ACT(gate) * up, rounded to T.
template <int ACT, typename T>
__device__ __forceinline__ T gated_act(accum_t<T> gate, accum_t<T> up) {
    return from_accum<T>(activate<ACT>(gate) * up);
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

// The only store of a warp's output values, in the layout of mma.sync m16n8 (and of wgmma,
// per 16-row warp slice): output tile (i, j) element r sits at row row_base + 16i + 8(r/2),
// column col_base + 8j + r%2, and is value(i, j, r, column). `paired_store`: N even and out
// aligned to two elements, so a column pair is one 32-bit store (16-bit types only).
template <typename T, int MI, int NI, typename Value>
__device__ __forceinline__ void store_fragments(T* __restrict__ out, int64 row_base, int64 col_base, int64 M,
                                                int64 N, int paired_store, const Value& value) {
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
                    T pair[2] = {value(i, j, 2 * h, n), value(i, j, 2 * h + 1, n + 1)};
                    *reinterpret_cast<unsigned*>(dst) = *reinterpret_cast<const unsigned*>(pair);
                } else {
                    if (n < N) dst[0] = value(i, j, 2 * h, n);
                    if (n + 1 < N) dst[1] = value(i, j, 2 * h + 1, n + 1);
                }
            }
}

// Bias + activation on a warp's accumulators (m16n8 layout) and the only store of the output.
template <typename T, int MI, int NI>
__device__ __forceinline__ void store_bias_act(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out,
                                               const T* __restrict__ bias, int64 bias_stride, int64 row_base,
                                               int64 col_base, int64 M, int64 N, int paired_store, int activation) {
    with_activation(activation, [&](auto act) {
        store_fragments<T, MI, NI>(out, row_base, col_base, M, N, paired_store, [&](int i, int j, int r, int64 n) {
            return bias_act<decltype(act)::value, T>(acc[i][j][r], bias, bias_stride, n);
        });
    });
}

// The gated form's store: a warp's n8 tiles j < NI / 2 hold gate columns, tile j + NI / 2 the
// up values of the same columns; act(gate) * up is stored (NI / 2 output tiles).
template <typename T, int MI, int NI>
__device__ __forceinline__ void store_gated(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out, int64 row_base,
                                            int64 col_base, int64 M, int64 N, int paired_store, int activation) {
    static_assert(NI % 2 == 0, "gate and up halves of the warp tile");
    with_activation(activation, [&](auto act) {
        store_fragments<T, MI, NI / 2>(out, row_base, col_base, M, N, paired_store, [&](int i, int j, int r, int64) {
            return gated_act<decltype(act)::value, T>(acc[i][j][r], acc[i][j + NI / 2][r]);
        });
    });
}

}  // namespace cufuse::linear

