// fused_linear_relu as a weight stream for a few rows of x: `linear_gemv<T, ROWS, B_KMAJOR>`,
// a matrix-vector product bound by the weight's bytes. The weight goes straight from DRAM to
// registers with 16-byte streaming loads (VEC = 16 / sizeof(T) elements), many in flight per
// thread (no shared-memory staging: nothing is reused), FMAs in accum_t<T> (true float32 /
// float64 products, no tensor-core rounding). Operands 16-byte aligned as for the tensor-core
// kernels.
//
// Picked when (cufuse/ops/linear/select.py) the operands are float32 with M <= 4 (ROWS 1 or
// 4) or float64 with M = 1, their rows 16-byte aligned, on compute capability 8.0 or later:
// there the stream beats the few-row 3xTF32 / DMMA tiles (docs/linear.md).
//  * B_KMAJOR (w + n * ldw + k): a warp owns gemv_kmajor_warp_cols<T, ROWS>() columns and a
//    1/GEMV_KPARTS share of K (lane l reads k = VEC l + 32 VEC i + ...); shuffles and shared
//    memory reduce. No split-K. Grid: ceil(N / (GEMV_WARPS / GEMV_KPARTS x warp columns)), 1.
//  * row-major (w + k * ldw + n): lane l owns VEC consecutive columns of the block's 32 VEC;
//    the 8 warps take turns at runs of consecutive rows of the block's k range (x read as
//    16-byte vectors along k) and meet in shared memory, one x row at a time. With splits > 1
//    (gridDim.y; float32 only: float64 sums would be rounded by the float32 workspace) each
//    split stores its M x 32 VEC sums to its own slot of the float32 workspace (splits x M x N
//    cells) and the last block of a column range to arrive adds the slots in split order
//    (bitwise reproducible) and finishes. Grid: ceil(N / (32 VEC)), splits.
#include "linear/epilogue.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {
constexpr int GEMV_THREADS = 256, GEMV_WARPS = GEMV_THREADS / 32;
constexpr int GEMV_KPARTS = 4;      // K-major: warps sharing a column group
constexpr int GEMV_ROW_LOADS = 8;   // row-major: weight rows in flight per thread (4 past 32 accumulator words)
// K-major: columns per warp, so that a thread's ROWS x columns accumulators stay within 64
// 32-bit registers (1 to 8; cufuse/ops/linear/gemv.py GemvTile.columns_per_block mirrors it).
template <typename T, int ROWS>
__device__ constexpr int gemv_kmajor_warp_cols() {
    constexpr int cols = 64 / (ROWS * int(sizeof(accum_t<T>) / 4));
    return cols > 8 ? 8 : cols < 1 ? 1 : cols;
}

template <typename T>
__device__ __forceinline__ void widen_vec16(const uint4& raw, accum_t<T> (&f)[16 / sizeof(T)]) {
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < int(16 / sizeof(T)); ++e) f[e] = to_accum(v[e]);
}
}  // namespace cufuse::linear

template <typename T, int ROWS, bool B_KMAJOR>
__global__ void __launch_bounds__(GEMV_THREADS, ROWS * sizeof(accum_t<T>) >= 16 ? 1 : 2)  // many rows: 255 registers
linear_gemv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                 int64 ldw, int64 bias_stride, int64 k_rows_per_split, int activation) {
    begin_dependent_grid();
    using A = accum_t<T>;
    constexpr int VEC = 16 / sizeof(T);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rows = int(min(int64(ROWS), M));
    if constexpr (B_KMAJOR) {
        constexpr int COLS = gemv_kmajor_warp_cols<T, ROWS>(), groups = GEMV_WARPS / GEMV_KPARTS;
        __shared__ A partial[GEMV_KPARTS][groups][ROWS][COLS];
        const int group = warp % groups, part = warp / groups;
        const int64 n0 = int64(blockIdx.x) * groups * COLS + group * COLS;
        const T* col[COLS];  // columns past N read column N - 1 (valid memory); never stored
#pragma unroll
        for (int j = 0; j < COLS; ++j) col[j] = w + min(n0 + j, N - 1) * ldw;
        A acc[ROWS][COLS] = {};
        for (int64 k = int64(part) * 32 * VEC + lane * VEC; k < K; k += 32 * VEC * GEMV_KPARTS) {
            uint4 raw[COLS];
#pragma unroll
            for (int j = 0; j < COLS; ++j) raw[j] = __ldcs(reinterpret_cast<const uint4*>(col[j] + k));
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                // Rows past M re-read row M - 1 (never stored): no branch, so the loads of all
                // ROWS rows issue together instead of one latency each.
                A xf[VEC];
                widen_vec16<T>(__ldg(reinterpret_cast<const uint4*>(x + min(r, rows - 1) * ldx + k)), xf);
#pragma unroll
                for (int j = 0; j < COLS; ++j) {
                    A wf[VEC];
                    widen_vec16<T>(raw[j], wf);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) acc[r][j] = fma(xf[e], wf[e], acc[r][j]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
                const A v = warp_sum(acc[r][j]);
                if (lane == 0) partial[part][group][r][j] = v;
            }
        __syncthreads();
        for (int e = threadIdx.x; e < groups * ROWS * COLS; e += GEMV_THREADS) {
            const int g = e / (ROWS * COLS), r = e / COLS % ROWS, j = e % COLS;
            const int64 n = int64(blockIdx.x) * groups * COLS + g * COLS + j;
            if (r >= rows || n >= N) continue;
            A v = 0;
#pragma unroll
            for (int p = 0; p < GEMV_KPARTS; ++p) v += partial[p][g][r][j];
            out[r * N + n] = bias_act<T>(v, bias, bias_stride, n, activation);
        }
    } else {
        constexpr int COLS = 32 * VEC;  // columns per block
        constexpr int ROW_LOADS = ROWS * VEC * int(sizeof(A) / 4) > 32 ? GEMV_ROW_LOADS / 2 : GEMV_ROW_LOADS;
        __shared__ A partial[GEMV_WARPS][COLS];
        const int64 n0 = int64(blockIdx.x) * COLS, n = n0 + lane * VEC;
        const bool col_ok = n < N;  // N % VEC == 0: a thread's VEC columns exist together
        const int64 k_begin = int64(blockIdx.y) * k_rows_per_split, k_end = min(K, k_begin + k_rows_per_split);
        // A warp takes ROW_LOADS consecutive k rows at a time, so each x row's ROW_LOADS values
        // are one or more 16-byte vectors (k_rows_per_split and K are multiples of VEC: a
        // vector is all inside the split or all past it).
        static_assert(ROW_LOADS % VEC == 0, "whole x vectors per warp step");
        constexpr int X_VECS = ROW_LOADS / VEC;
        A acc[ROWS][VEC] = {};
        for (int64 k = k_begin + warp * ROW_LOADS; k < k_end; k += GEMV_WARPS * ROW_LOADS) {
            uint4 raw[ROW_LOADS];
#pragma unroll
            for (int u = 0; u < ROW_LOADS; ++u) {
                const int64 kk = k + u;
                raw[u] = col_ok && kk < k_end ? __ldcs(reinterpret_cast<const uint4*>(w + kk * ldw + n)) : make_uint4(0, 0, 0, 0);
            }
            A xv[ROWS][ROW_LOADS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int v = 0; v < X_VECS; ++v) {
                    // Rows past M re-read row M - 1 (never stored): no branch, so the loads of all
                    // ROWS rows issue together.
                    const T* src = x + min(r, rows - 1) * ldx + k + v * VEC;
                    const uint4 raw_x = k + v * VEC < k_end ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
                    A part[VEC];
                    widen_vec16<T>(raw_x, part);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) xv[r][v * VEC + e] = part[e];
                }
#pragma unroll
            for (int u = 0; u < ROW_LOADS; ++u) {
                A wf[VEC];
                widen_vec16<T>(raw[u], wf);
#pragma unroll
                for (int r = 0; r < ROWS; ++r)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) acc[r][e] = fma(xv[r][u], wf[e], acc[r][e]);
            }
        }
        const int splits = gridDim.y;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r >= rows) break;
            __syncthreads();  // the previous row's sums are read
#pragma unroll
            for (int e = 0; e < VEC; ++e) partial[warp][lane * VEC + e] = acc[r][e];
            __syncthreads();
            for (int c = threadIdx.x; c < COLS; c += GEMV_THREADS) {
                if (n0 + c >= N) continue;
                A v = 0;
#pragma unroll
                for (int q = 0; q < GEMV_WARPS; ++q) v += partial[q][c];
                if (splits == 1) out[r * N + n0 + c] = bias_act<T>(v, bias, bias_stride, n0 + c, activation);
                else workspace[(int64(blockIdx.y) * M + r) * N + n0 + c] = float(v);
            }
        }
        if (splits == 1) return;
        // Split-K: the last block of this column range to arrive sums the slots in split order.
        if (!last_to_arrive(counters + blockIdx.x, splits)) return;
        for (int e = threadIdx.x; e < rows * COLS; e += GEMV_THREADS) {
            const int r = e / COLS, c = e % COLS;
            if (n0 + c >= N) continue;
            const float* cell = workspace + int64(r) * N + n0 + c;
            float v = __ldcg(cell);
            for (int z = 1; z < splits; ++z) v += __ldcg(cell + int64(z) * M * N);
            out[r * N + n0 + c] = bias_act<T>(v, bias, bias_stride, n0 + c, activation);
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
}
