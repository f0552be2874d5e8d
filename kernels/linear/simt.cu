// fused_linear_relu on CUDA cores with any strides: `linear_relu_simt`, a register-tiled SIMT
// GEMM, true IEEE float32 / float64 arithmetic (no TF32), 16-bit inputs widened to float32.
//
// Picked when (cufuse/ops/linear/select.py) the tensor-core kernels cannot load the
// operands (x or the weight without a unit-stride axis, rows not 16-byte aligned, K not a
// multiple of 16 bytes' elements, a device below compute capability 8.0): float32 on the
// 128x128 tile once its tiles fill the SMs, every other case on the 64x64 tile.
#include "linear/epilogue.cuh"

using namespace cufuse;
using namespace cufuse::linear;

// Each thread owns TM x TN outputs split in two halves per axis (rows ty*TM/2.. and BM/2 +
// ty*TM/2..), so a warp's shared-memory reads are contiguous vectors. Tiles are staged in
// shared memory as accumulator-type values (k-major, padded), the next slab is prefetched
// into registers while the current one is consumed. B_KMAJOR: the weight's unit stride runs
// along k (consecutive threads then walk k), else along n.
template <typename T, int BM, int BN, int BK, int TM, int TN, bool B_KMAJOR>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2)
linear_relu_simt(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 int64 M, int64 N, int64 K, int64 sxm, int64 sxk, int64 swk, int64 swn, int64 bias_stride,
                 int raster_group) {
    begin_dependent_grid();
    using A = accum_t<T>;
    constexpr int threads = (BM / TM) * (BN / TN);
    constexpr int pad = 16 / sizeof(A);  // keeps rows 16-byte aligned, staggers banks
    constexpr int a_per_thread = BM * BK / threads, b_per_thread = BN * BK / threads;
    static_assert(BM * BK % threads == 0 && BN * BK % threads == 0, "tile loads must split evenly");
    __shared__ __align__(16) A sa[2][BK][BM + pad];
    __shared__ __align__(16) A sb[2][BK][BN + pad];

    const TileCorner corner = tile_corner<BM, BN>(M, N, raster_group);
    const int64 m0 = corner.m0, n0 = corner.n0;
    const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);

    // A thread's share of a slab: consecutive threads walk the axis that is contiguous in
    // memory (k for x; k or n for the weight, by B_KMAJOR). Share element i sits at a fixed
    // position along that axis and at `first + i * step` along the other, so one pointer
    // per operand, advanced by BK along k each slab, reaches all of them.
    static_assert(threads % BK == 0 && threads % BN == 0, "shares must keep a fixed column");
    constexpr int a_step = threads / BK;
    constexpr int b_step = B_KMAJOR ? threads / BK : threads / BN;
    const int a_k = tid % BK, a_m = tid / BK;
    const int b_k = B_KMAJOR ? tid % BK : tid / BN, b_n = B_KMAJOR ? tid / BK : tid % BN;
    const T* a_ptr = x + (m0 + a_m) * sxm + a_k * sxk;
    const T* b_ptr = w + int64(b_k) * swk + (n0 + b_n) * swn;
    const int64 a_stride = a_step * sxm, b_stride = B_KMAJOR ? b_step * swn : b_step * swk;

    // Rows of x and weight columns that exist, one bit per share element (fixed per thread).
    unsigned a_rows = 0, b_cols = 0;
#pragma unroll
    for (int i = 0; i < a_per_thread; ++i) a_rows |= unsigned(m0 + a_m + i * a_step < M) << i;
#pragma unroll
    for (int i = 0; i < b_per_thread; ++i)
        b_cols |= unsigned(n0 + b_n + (B_KMAJOR ? i * b_step : 0) < N) << i;

    A ra[a_per_thread], rb[b_per_thread];
    auto fetch = [&](int64 k0) {
        const int64 k_left = K - k0;  // k offsets below this exist
#pragma unroll
        for (int i = 0; i < a_per_thread; ++i)
            ra[i] = ((a_rows >> i) & 1) && a_k < k_left ? to_accum(a_ptr[i * a_stride]) : A(0);
#pragma unroll
        for (int i = 0; i < b_per_thread; ++i) {
            const int k = b_k + (B_KMAJOR ? 0 : i * b_step);
            rb[i] = ((b_cols >> i) & 1) && k < k_left ? to_accum(b_ptr[i * b_stride]) : A(0);
        }
        a_ptr += BK * sxk;
        b_ptr += BK * swk;
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
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int64 n = n0 + (j < TN / 2 ? 0 : BN / 2 - TN / 2) + tx * (TN / 2) + j;
            if (n < N) out[m * N + n] = bias_relu<T>(acc[i][j], bias, bias_stride, n);
        }
    }
}
