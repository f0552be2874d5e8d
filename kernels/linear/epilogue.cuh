// Device code shared by the fused_linear kernel families (linear_*, gated_linear_*): which
// output tile and k range a block computes (raster order, split-K), and the epilogue (bias +
// activation on the accumulators, the only store of the output; or the gated form's
// act(gate) * up).
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

// The activations of 16-bit outputs, short and branch-free. An epilogue unrolls its activation
// over every accumulator of the thread (128 in the largest wgmma tile); with the precise erff /
// tanhf / expf and IEEE division, GELU's code alone was ~140 KB and SiLU's ~250 KB, more than the
// instruction cache, and a 4096 x 4096 x 11008 GEMM took 1.9-2.0x ReLU's time stalled on
// instruction fetch (docs/linear.md). Their absolute error stays below 2e-7 |v| (MUFU ex2
// / rcp; erf by Abramowitz & Stegun 7.1.26, |error| < 1.5e-7), far under the output's half ulp
// (2^-9 |v| for float16) and the tests' 4 eps(float) |v| allowance for the activation.

// v * sigmoid(z) = v / (1 + exp(-z)); exp(-z) = inf gives v * 0 = 0, the limit.
__device__ __forceinline__ float fast_sigmoid_product(float v, float z) {
    return v * fast_rcp(1.0f + fast_exp2(z * -1.4426950408889634f));
}

// v * Phi(v) = 0.5 v (1 + erf(v / sqrt 2)), with erfc(x) = t (a1 + t (a2 + ...)) exp(-x^2), t =
// 1 / (1 + p x) for x = |v| / sqrt 2 >= 0: Phi(v) = 1 - erfc(x) / 2 for v >= 0, erfc(x) / 2 below.
__device__ __forceinline__ float fast_gelu(float v) {
    const float x = fabsf(v) * 0.70710678118654752440f;
    const float t = fast_rcp(fmaf(0.3275911f, x, 1.0f));
    float poly = fmaf(t, 1.061405429f, -1.453152027f);
    poly = fmaf(t, poly, 1.421413741f);
    poly = fmaf(t, poly, -0.284496736f);
    poly = fmaf(t, poly, 0.254829592f);
    const float half_erfc = 0.5f * poly * t * fast_exp2(x * x * -1.4426950408889634f);
    return v * (v >= 0.0f ? 1.0f - half_erfc : half_erfc);
}

// ACT(v) in the accumulator type, the formulas of cufuse.reference.apply_activation: NaN
// stays NaN (np.maximum(NaN, 0) for ReLU), -inf gives the limit 0 (the formulas' -inf * 0
// would be NaN; a select, not a branch), +inf gives +inf. FAST (16-bit outputs, float
// accumulators) evaluates them with fast_gelu / fast_sigmoid_product.
template <int ACT, bool FAST, typename A>
__device__ __forceinline__ A activation_formula(A v) {
    if constexpr (FAST) {
        static_assert(sizeof(A) == 4, "fast activations take float accumulators");
        if constexpr (ACT == ACT_GELU) return fast_gelu(v);
        // gelu_tanh: 0.5 v (1 + tanh(u)) = v sigmoid(2u)
        if constexpr (ACT == ACT_GELU_TANH)
            return fast_sigmoid_product(v, A(2 * 0.79788456080286535588) * (v + A(0.044715) * v * v * v));
        if constexpr (ACT == ACT_SILU) return fast_sigmoid_product(v, v);
    } else {
        if constexpr (ACT == ACT_GELU) return A(0.5) * v * (A(1) + erf_of(v * A(0.70710678118654752440)));
        if constexpr (ACT == ACT_GELU_TANH)
            return A(0.5) * v * (A(1) + tanh_of(A(0.79788456080286535588) * (v + A(0.044715) * v * v * v)));
        if constexpr (ACT == ACT_SILU) return v / (A(1) + exp_of(-v));
    }
}

template <int ACT, bool FAST = false, typename A>
__device__ __forceinline__ A activate(A v) {
    if constexpr (ACT == ACT_RELU) {
        return nan_max(v, A(0));
    } else if constexpr (ACT == ACT_NONE) {
        return v;
    } else {
        const A value = activation_formula<ACT, FAST>(v);
        return v == neg_infinity<A>() ? A(0) : value;
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
template <typename T>
constexpr bool fast_activation = sizeof(T) == 2;

template <int ACT, typename T>
__device__ __forceinline__ T bias_act(accum_t<T> acc, const T* __restrict__ bias, int64 bias_stride, int64 n) {
    if (bias != nullptr) acc += to_accum(bias[n * bias_stride]);
    return from_accum<T>(activate<ACT, fast_activation<T>>(acc));
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
    return from_accum<T>(activate<ACT, fast_activation<T>>(gate) * up);
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
__device__ __forceinline__ TileCorner tile_corner(int64 tile, int64 M, int64 N, int raster_group) {
    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(tile, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    return {tile_m * BM, tile_n * BN};
}
template <int BM, int BN>
__device__ __forceinline__ TileCorner tile_corner(int64 M, int64 N, int raster_group) {
    return tile_corner<BM, BN>(blockIdx.x, M, N, raster_group);
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
// per 16-row warp slice): output tile (i, j) element r sits at row row_base + ROW_STEP i + 8(r/2)
// (ROW_STEP: 16 for a warp's m16 tiles, 64 for a warpgroup's wgmma slices),
// column col_base + 8j + r%2, and is value(i, j, r, column). `paired_store`: N even and out
// aligned to two elements, so a column pair is one 32-bit store (16-bit types only). Each value
// is computed once, before the choice of store (the unrolled code stays one activation per
// accumulator): `value` sees columns up to N and must not read beyond N.
template <typename T, int MI, int NI, int ROW_STEP = 16, typename Value>
__device__ __forceinline__ void store_fragments(T* __restrict__ out, int64 row_base, int64 col_base, int64 M,
                                                int64 N, int paired_store, const Value& value) {
    // n < paired_end: a whole column pair, one 32-bit store. A bound that depends on n, not the
    // flag alone, so the compiler does not unswitch the loop into a copy per store mode.
    const int64 paired_end = paired_store ? N - 1 : 0;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64 m = row_base + i * ROW_STEP + h * 8, n = col_base + j * 8;
                if (m >= M) continue;
                T* dst = out + m * N + n;
                T pair[2] = {value(i, j, 2 * h, n), value(i, j, 2 * h + 1, n + 1)};
                if (n < paired_end) {
                    *reinterpret_cast<unsigned*>(dst) = *reinterpret_cast<const unsigned*>(pair);
                } else {
                    if (n < N) dst[0] = pair[0];
                    if (n + 1 < N) dst[1] = pair[1];
                }
            }
}

// A zero of any element type: the bias of a call without one (read with stride 0).
__device__ const unsigned long long zero_element = 0;

// Bias + activation on a warp's accumulators (m16n8 layout) and the only store of the output.
// Every element reads a bias value, column min(n, N - 1) (no bias: zero_element), so that the
// unrolled loop holds no branch and one copy of the activation. ROW_STEP as store_fragments'.
template <typename T, int ROW_STEP = 16, int MI, int NI>
__device__ __forceinline__ void store_bias_act(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out,
                                               const T* __restrict__ bias, int64 bias_stride, int64 row_base,
                                               int64 col_base, int64 M, int64 N, int paired_store, int activation) {
    const T* bias_values = bias != nullptr ? bias : reinterpret_cast<const T*>(&zero_element);
    const int64 bias_step = bias != nullptr ? bias_stride : 0;
    with_activation(activation, [&](auto act) {
        auto value = [&](int i, int j, int r, int64 n) {
            const accum_t<T> pre = acc[i][j][r] + to_accum(bias_values[min(n, N - 1) * bias_step]);
            return from_accum<T>(activate<decltype(act)::value, fast_activation<T>>(pre));
        };
        store_fragments<T, MI, NI, ROW_STEP>(out, row_base, col_base, M, N, paired_store, value);
    });
}

// The gated form's store: a warp's n8 tiles j < NI / 2 hold gate columns, tile j + NI / 2 the
// up values of the same columns; act(gate) * up is stored (NI / 2 output tiles).
template <typename T, int ROW_STEP = 16, int MI, int NI>
__device__ __forceinline__ void store_gated(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out, int64 row_base,
                                            int64 col_base, int64 M, int64 N, int paired_store, int activation) {
    static_assert(NI % 2 == 0, "gate and up halves of the warp tile");
    with_activation(activation, [&](auto act) {
        auto value = [&](int i, int j, int r, int64) {
            return gated_act<decltype(act)::value, T>(acc[i][j][r], acc[i][j + NI / 2][r]);
        };
        store_fragments<T, MI, NI / 2, ROW_STEP>(out, row_base, col_base, M, N, paired_store, value);
    });
}

}  // namespace cufuse::linear

