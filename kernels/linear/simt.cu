// fused_linear on CUDA cores with any strides: `linear_simt`, a register-tiled SIMT GEMM,
// true IEEE float32 / float64 arithmetic (no TF32), 16-bit inputs widened to float32; and
// fused_gated_linear's `gated_linear_simt` on the same code.
//
// Picked when (cufuse/ops/linear/select.py) the tensor-core kernels cannot load the
// operands (x or the weight without a unit-stride axis, rows not 16-byte aligned, K not a
// multiple of 16 bytes' elements, a device below compute capability 8.0): float32 on the
// 128x128 tile once its tiles fill the SMs, every other case on the 64x64 tile. The gated
// form: every problem the gated mma kernel cannot take (float32 / float64, unaligned or
// mixed-layout weights), with the same tiles.
#include "linear/epilogue.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {
// The gated output element with the activation chosen per element: the store loop below
// holds TM x TN accumulators in the 128 registers of two blocks an SM, and one loop per
// activation (with_activation around it) spills there.
template <typename T>
__device__ __forceinline__ T gated_act(accum_t<T> gate, accum_t<T> up, int activation) {
    T result;
    with_activation(activation, [&](auto act) { result = gated_act<decltype(act)::value, T>(gate, up); });
    return result;
}
}  // namespace cufuse::linear

// Each thread owns TM x TN outputs split in two halves per axis (rows ty*TM/2.. and BM/2 +
// ty*TM/2..), so a warp's shared-memory reads are contiguous vectors. Tiles are staged in
// shared memory as accumulator-type values (k-major, padded), the next slab is prefetched
// into registers while the current one is consumed. B_KMAJOR: the weight's unit stride runs
// along k (consecutive threads then walk k), else along n. GATED (fused_gated_linear): the
// block's BN columns are BN / 2 output columns of w_gate, then the same of w_up (strides
// uwk, uwn), so a thread's column halves are the gate and the up value of one output; the
// epilogue stores act(gate) * up (no bias).
template <typename T, int BM, int BN, int BK, int TM, int TN, bool B_KMAJOR, bool GATED>
__device__ __forceinline__ void simt_gemm(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ w_up, const T* __restrict__ bias,
                                          T* __restrict__ out, int64 M, int64 N, int64 K, int64 sxm, int64 sxk,
                                          int64 swk, int64 swn, int64 uwk, int64 uwn, int64 bias_stride,
                                          int raster_group, int activation) {
    using A = accum_t<T>;
    constexpr int threads = (BM / TM) * (BN / TN);
    constexpr int pad = 16 / sizeof(A);  // keeps rows 16-byte aligned, staggers banks
    constexpr int a_per_thread = BM * BK / threads, b_per_thread = BN * BK / threads;
    static_assert(BM * BK % threads == 0 && BN * BK % threads == 0, "tile loads must split evenly");
    __shared__ __align__(16) A sa[2][BK][BM + pad];
    __shared__ __align__(16) A sb[2][BK][BN + pad];

    constexpr int OUT_BN = GATED ? BN / 2 : BN;  // output columns a block covers
    const TileCorner corner = tile_corner<BM, OUT_BN>(M, N, raster_group);
    const int64 m0 = corner.m0, n0 = corner.n0;
    const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);
    auto column = [&](int v) { return n0 + (GATED ? v % OUT_BN : v); };  // output column of tile column v

    // A thread's share of a slab: consecutive threads walk the axis that is contiguous in
    // memory (k for x; k or n for the weight, by B_KMAJOR). Share element i sits at a fixed
    // position along that axis and at `first + i * step` along the other, so one pointer
    // per operand (gated K-major: one per weight, each covering half the share), advanced by
    // BK along k each slab, reaches all of them.
    static_assert(threads % BK == 0 && threads % BN == 0, "shares must keep a fixed column");
    constexpr int a_step = threads / BK;
    constexpr int b_step = B_KMAJOR ? threads / BK : threads / BN;
    constexpr int b_parts = GATED && B_KMAJOR ? 2 : 1, b_part_size = b_per_thread / b_parts;
    static_assert(!GATED || OUT_BN % b_step == 0, "gated K-major shares split at the half tile");
    const int a_k = tid % BK, a_m = tid / BK;
    const int b_k = B_KMAJOR ? tid % BK : tid / BN, b_n = B_KMAJOR ? tid / BK : tid % BN;
    const T* a_ptr = x + (m0 + a_m) * sxm + a_k * sxk;
    const int64 a_stride = a_step * sxm;
    const T* b_ptr[b_parts];
    int64 b_stride[b_parts], b_advance[b_parts];
#pragma unroll
    for (int h = 0; h < b_parts; ++h) {
        const int v = b_n + h * b_part_size * (B_KMAJOR ? b_step : 0);  // the part's first tile column
        const bool up = GATED && v >= OUT_BN;
        const int64 sk = up ? uwk : swk, sn = up ? uwn : swn;
        b_ptr[h] = (up ? w_up : w) + int64(b_k) * sk + column(v) * sn;
        b_stride[h] = B_KMAJOR ? b_step * sn : b_step * sk;
        b_advance[h] = BK * sk;
    }

    // Rows of x and weight columns that exist, one bit per share element (fixed per thread).
    unsigned a_rows = 0, b_cols = 0;
#pragma unroll
    for (int i = 0; i < a_per_thread; ++i) a_rows |= unsigned(m0 + a_m + i * a_step < M) << i;
#pragma unroll
    for (int i = 0; i < b_per_thread; ++i) b_cols |= unsigned(column(b_n + (B_KMAJOR ? i * b_step : 0)) < N) << i;

    A ra[a_per_thread], rb[b_per_thread];
    auto fetch = [&](int64 k0) {
        const int64 k_left = K - k0;  // k offsets below this exist
#pragma unroll
        for (int i = 0; i < a_per_thread; ++i)
            ra[i] = ((a_rows >> i) & 1) && a_k < k_left ? to_accum(a_ptr[i * a_stride]) : A(0);
#pragma unroll
        for (int i = 0; i < b_per_thread; ++i) {
            const int k = b_k + (B_KMAJOR ? 0 : i * b_step), h = i / b_part_size;
            rb[i] = ((b_cols >> i) & 1) && k < k_left ? to_accum(b_ptr[h][(i % b_part_size) * b_stride[h]]) : A(0);
        }
        a_ptr += BK * sxk;
#pragma unroll
        for (int h = 0; h < b_parts; ++h) b_ptr[h] += b_advance[h];
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < a_per_thread; ++i) sa[buf][a_k][a_m + i * a_step] = ra[i];
#pragma unroll
        for (int i = 0; i < b_per_thread; ++i) {
            if constexpr (B_KMAJOR) sb[buf][b_k][b_n + i * b_step] = rb[i];
            else sb[buf][b_k + i * b_step][b_n] = rb[i];
        }
    };

    A acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = A(0);

    const int64 k_tiles = (K + BK - 1) / BK;
    fetch(0);
    stash(0);
    __syncthreads();
    for (int64 kt = 0; kt < k_tiles; ++kt) {
        const int buf = int(kt & 1);
        if (kt + 1 < k_tiles) fetch((kt + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            A a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = sa[buf][kk][(i < TM / 2 ? 0 : BM / 2 - TM / 2) + ty * (TM / 2) + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = sb[buf][kk][(j < TN / 2 ? 0 : BN / 2 - TN / 2) + tx * (TN / 2) + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        if (kt + 1 < k_tiles) stash(buf ^ 1);  // the other buffer was released by the last barrier
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int64 m = m0 + (i < TM / 2 ? 0 : BM / 2 - TM / 2) + ty * (TM / 2) + i;
        if (m >= M) continue;
        if constexpr (GATED) {
#pragma unroll
            for (int j = 0; j < TN / 2; ++j) {  // gate column j, up column j + TN / 2: one output
                const int64 n = n0 + tx * (TN / 2) + j;
                if (n < N) out[m * N + n] = gated_act<T>(acc[i][j], acc[i][j + TN / 2], activation);
            }
        } else {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int64 n = n0 + (j < TN / 2 ? 0 : BN / 2 - TN / 2) + tx * (TN / 2) + j;
                if (n < N) out[m * N + n] = bias_act<T>(acc[i][j], bias, bias_stride, n, activation);
            }
        }
    }
}

template <typename T, int BM, int BN, int BK, int TM, int TN, bool B_KMAJOR>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2)
linear_simt(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 int64 M, int64 N, int64 K, int64 sxm, int64 sxk, int64 swk, int64 swn, int64 bias_stride,
                 int raster_group, int activation) {
    begin_dependent_grid();
    simt_gemm<T, BM, BN, BK, TM, TN, B_KMAJOR, false>(x, w, nullptr, bias, out, M, N, K, sxm, sxk, swk, swn, 0, 0,
                                                      bias_stride, raster_group, activation);
}

// fused_gated_linear: act(x @ w_gate) * (x @ w_up), the weights with strides (gwk, gwn) and
// (uwk, uwn); B_KMAJOR: w_gate's layout (either runs correctly).
template <typename T, int BM, int BN, int BK, int TM, int TN, bool B_KMAJOR>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2)
gated_linear_simt(const T* __restrict__ x, const T* __restrict__ w_gate, const T* __restrict__ w_up,
                  T* __restrict__ out, int64 M, int64 N, int64 K, int64 sxm, int64 sxk, int64 gwk, int64 gwn,
                  int64 uwk, int64 uwn, int raster_group, int activation) {
    begin_dependent_grid();
    simt_gemm<T, BM, BN, BK, TM, TN, B_KMAJOR, true>(x, w_gate, w_up, nullptr, out, M, N, K, sxm, sxk, gwk, gwn, uwk,
                                                     uwn, 0, raster_group, activation);
}
