// fused_linear_relu: out[m, n] = max(sum_k x[m, k] * w[k, n] + bias[n], 0) in one launch.
//
// Two kernels, both with bias and ReLU applied to the accumulators before the only store:
//  * linear_relu_mma  -- float16/bfloat16 tensor cores (cp.async multi-stage pipeline,
//    XOR-swizzled shared memory, ldmatrix, mma.sync m16n8k16). One template serves the big
//    GEMM tiles and, for M <= 64, the weight-streaming tiles (BM = 16 or 64) with split-K:
//    each split adds its float32 partial tile into a workspace with atomics and the block
//    that finishes last (a per-tile counter) applies bias+ReLU, stores, and re-zeroes the
//    workspace and counter for the next call. B_KMAJOR picks the weight layout: true for
//    w[k, n] at w + n * ldw + k (a transposed (N, K) array, PyTorch's Linear weight),
//    false for w + k * ldw + n (row-major (K, N)).
//  * linear_relu_simt -- register-tiled SIMT GEMM with arbitrary strides: float32 (true
//    IEEE float32, no TF32), float64, and 16-bit inputs whose alignment rules out cp.async.
#include "mma.cuh"

namespace cufuse {
namespace linear {

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

// ---------------------------------------------------------------------------------------
// Tensor-core path.
//
// Shared memory holds tiles as rows of 16-byte chunks; chunk c of row r lives at chunk
// c ^ (r & 7), so the 8 rows one ldmatrix reads (and the rows cp.async writes) fall in 8
// distinct bank groups: no bank conflicts without padding.
template <int RowChunks>
__device__ __forceinline__ int swizzled(int row, int col) {  // element offset, col in elements
    const int chunk = col >> 3;
    return row * RowChunks * 8 + ((chunk ^ (row & 7)) << 3) + (col & 7);
}

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
struct MmaTile {
    static constexpr int threads = 32 * WARPS_M * WARPS_N;
    static constexpr int warp_m = BM / WARPS_M, warp_n = BN / WARPS_N;
    static constexpr int mi = warp_m / 16, ni = warp_n / 8;  // mma tiles per warp
    static constexpr int a_elems = BM * BK;
    static constexpr int b_elems = BK * BN;
    static constexpr int stage_elems = a_elems + b_elems;
    // A: [BM][BK]; B: [BN][BK] when K-major, else [BK][BN].
    static constexpr int a_row_chunks = BK / 8;
    static constexpr int b_row_chunks = B_KMAJOR ? BK / 8 : BN / 8;
    static_assert(BK % 16 == 0 && BK / 8 >= 8 && BN / 8 >= 8, "swizzle needs rows of >= 8 chunks");
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "warp tile must hold whole x4 ldmatrix loads");
    static_assert(b_elems / 8 % threads == 0, "B chunks per thread");
};

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__device__ __forceinline__ void mma_load_stage(T* sa, T* sb, const T* __restrict__ x, const T* __restrict__ w,
                                               int64 m0, int64 n0, int64 k0, int64 M, int64 N, int64 k_end,
                                               int64 ldx, int64 ldw) {
    using Tile = MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < (Tile::a_elems / 8 + Tile::threads - 1) / Tile::threads; ++i) {
        const int c = tid + i * Tile::threads;
        if (Tile::a_elems / 8 % Tile::threads != 0 && c >= Tile::a_elems / 8) break;
        const int row = c / Tile::a_row_chunks, col = (c % Tile::a_row_chunks) * 8;
        const bool ok = m0 + row < M && k0 + col < k_end;
        const T* src = ok ? x + (m0 + row) * ldx + k0 + col : x;
        cp_async_16(sa + swizzled<Tile::a_row_chunks>(row, col), src, ok);
    }
#pragma unroll
    for (int i = 0; i < Tile::b_elems / 8 / Tile::threads; ++i) {
        const int c = tid + i * Tile::threads;
        const int row = c / Tile::b_row_chunks, col = (c % Tile::b_row_chunks) * 8;
        bool ok;
        const T* src;
        if constexpr (B_KMAJOR) {  // row = n, col = k
            ok = n0 + row < N && k0 + col < k_end;
            src = w + (n0 + row) * ldw + k0 + col;
        } else {  // row = k, col = n
            ok = k0 + row < k_end && n0 + col < N;
            src = w + (k0 + row) * ldw + n0 + col;
        }
        cp_async_16(sb + swizzled<Tile::b_row_chunks>(row, col), ok ? src : w, ok);
    }
}

// A warp's mma operands for one k16 step.
template <int MI, int NI>
struct Fragments {
    unsigned a[MI][4];
    unsigned b[NI][2];
};

template <typename Tile, bool B_KMAJOR, typename T>
__device__ __forceinline__ void load_fragments(Fragments<Tile::mi, Tile::ni>& f, const T* sa, const T* sb, int kk,
                                               int warp_row, int warp_col, int lane) {
#pragma unroll
    for (int i = 0; i < Tile::mi; ++i) {
        // x4: (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15), lanes 8j..8j+7 address matrix j.
        const int row = warp_row + i * 16 + (lane & 15);
        const int col = kk + (lane >> 4) * 8;
        ldmatrix_x4(f.a[i], sa + swizzled<Tile::a_row_chunks>(row, col));
    }
#pragma unroll
    for (int j = 0; j < Tile::ni; j += 2) {
        unsigned r[4];
        if constexpr (B_KMAJOR) {
            // [n][k]: matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15).
            const int row = warp_col + j * 8 + (lane >> 4) * 8 + (lane & 7);
            const int col = kk + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(r, sb + swizzled<Tile::b_row_chunks>(row, col));
        } else {
            // [k][n], transposed on load: matrices (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15).
            const int row = kk + ((lane >> 3) & 1) * 8 + (lane & 7);
            const int col = warp_col + j * 8 + (lane >> 4) * 8;
            ldmatrix_x4_trans(r, sb + swizzled<Tile::b_row_chunks>(row, col));
        }
        f.b[j][0] = r[0];
        f.b[j][1] = r[1];
        f.b[j + 1][0] = r[2];
        f.b[j + 1][1] = r[3];
    }
}

// One BK slab of the warp's MMAs from one pipeline stage. The operands of step s + 1 are
// loaded before the MMAs of step s are issued (the asm wrappers are volatile, so program
// order is issue order): ldmatrix latency hides behind tensor-core work.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__device__ __forceinline__ void mma_compute_stage(
    const T* sa, const T* sb, int warp_row, int warp_col, int lane,
    float (&acc)[MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>::mi]
                [MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>::ni][4]) {
    using Tile = MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    constexpr int steps = BK / 16;
    Fragments<Tile::mi, Tile::ni> f[2];
    load_fragments<Tile, B_KMAJOR>(f[0], sa, sb, 0, warp_row, warp_col, lane);
#pragma unroll
    for (int step = 0; step < steps; ++step) {
        if (step + 1 < steps)
            load_fragments<Tile, B_KMAJOR>(f[(step + 1) & 1], sa, sb, (step + 1) * 16, warp_row, warp_col, lane);
        const Fragments<Tile::mi, Tile::ni>& cur = f[step & 1];
#pragma unroll
        for (int i = 0; i < Tile::mi; ++i)
#pragma unroll
            for (int j = 0; j < Tile::ni; ++j) mma_16816<T>(acc[i][j], cur.a[i], cur.b[j]);
    }
}

}  // namespace linear
}  // namespace cufuse

using namespace cufuse;
using namespace cufuse::linear;

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN; split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split). Requires (checked on the host):
// x rows 16-byte aligned with unit k stride, K % 8 == 0, the weight's contiguous axis
// 16-byte aligned and a multiple of 8 long. With splits > 1, `workspace` (M x N float32)
// and `counters` (one int per output tile) must be zero on entry; they are zero on exit.
// Blocks of 4 warps are meant to run two per SM (cufuse/_configs/linear.py, max_blocks_per_sm).
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_relu_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store) {
    using Tile = MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);

    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    const int64 m0 = tile_m * BM, n0 = tile_n * BN;
    const int splits = gridDim.z;
    const int64 k_begin = int64(blockIdx.z) * k_tiles_per_split * BK;
    const int64 k_end = min(K, k_begin + int64(k_tiles_per_split) * BK);
    const int k_tiles = int((k_end - k_begin + BK - 1) / BK);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;

    float acc[Tile::mi][Tile::ni][4];
#pragma unroll
    for (int i = 0; i < Tile::mi; ++i)
#pragma unroll
        for (int j = 0; j < Tile::ni; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    auto load = [&](int kt) {
        T* stage = smem + (kt % STAGES) * Tile::stage_elems;
        if (kt < k_tiles)
            mma_load_stage<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>(
                stage, stage + Tile::a_elems, x, w, m0, n0, k_begin + int64(kt) * BK, M, N, k_end, ldx, ldw);
        cp_async_commit();  // an empty group keeps the wait counts uniform at the tail
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) load(s);
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for everyone; stage kt-1 is free to overwrite
        load(kt + STAGES - 1);
        const T* stage = smem + (kt % STAGES) * Tile::stage_elems;
        mma_compute_stage<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>(stage, stage + Tile::a_elems, warp_row,
                                                                             warp_col, lane, acc);
    }
    cp_async_wait<0>();

    // Accumulator (i, j, r) sits at row warp_row + 16i + lane/4 + 8(r/2), column warp_col + 8j + 2(lane%4) + r%2.
    const int64 row_base = m0 + warp_row + (lane >> 2), col_base = n0 + warp_col + 2 * (lane & 3);
    if (splits == 1) {
#pragma unroll
        for (int i = 0; i < Tile::mi; ++i)
#pragma unroll
            for (int j = 0; j < Tile::ni; ++j)
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
        return;
    }

    // Split-K: add the partial tile into the float32 workspace (L2 atomics), then the last
    // block of this tile to arrive finishes it.
#pragma unroll
    for (int i = 0; i < Tile::mi; ++i)
#pragma unroll
        for (int j = 0; j < Tile::ni; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int64 m = row_base + i * 16 + (r >> 1) * 8, n = col_base + j * 8 + (r & 1);
                if (m < M && n < N) atomicAdd(workspace + m * N + n, acc[i][j][r]);
            }
    __threadfence();
    __syncthreads();
    __shared__ bool is_last;
    if (threadIdx.x == 0) is_last = atomicAdd(counters + blockIdx.x, 1) == splits - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const int rows = int(min(int64(BM), M - m0)), cols = int(min(int64(BN), N - n0));
    for (int e = threadIdx.x; e < rows * cols; e += Tile::threads) {
        const int64 m = m0 + e / cols, n = n0 + e % cols;
        float* cell = workspace + m * N + n;
        out[m * N + n] = bias_relu<T>(__ldcg(cell), bias, bias_stride, n);
        *cell = 0.f;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

// ---------------------------------------------------------------------------------------
// SIMT path: any strides, any alignment. Each thread owns TM x TN outputs split in two
// halves per axis (rows ty*TM/2.. and BM/2 + ty*TM/2..), so a warp's shared-memory reads
// are contiguous vectors. Tiles are staged in shared memory as accumulator-type values
// (k-major, padded), the next slab is prefetched into registers while the current one is
// consumed.
template <typename T, int BM, int BN, int BK, int TM, int TN, bool B_KMAJOR>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2)
linear_relu_simt(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 int64 M, int64 N, int64 K, int64 sxm, int64 sxk, int64 swk, int64 swn, int64 bias_stride,
                 int raster_group) {
    using A = accum_t<T>;
    constexpr int threads = (BM / TM) * (BN / TN);
    constexpr int pad = 16 / sizeof(A);  // keeps rows 16-byte aligned, staggers banks
    constexpr int a_per_thread = BM * BK / threads, b_per_thread = BN * BK / threads;
    static_assert(BM * BK % threads == 0 && BN * BK % threads == 0, "tile loads must split evenly");
    __shared__ __align__(16) A sa[2][BK][BM + pad];
    __shared__ __align__(16) A sb[2][BK][BN + pad];

    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    const int64 m0 = tile_m * BM, n0 = tile_n * BN;
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

// ---------------------------------------------------------------------------------------
// Weight-streaming path for M <= ROWS (a few rows; 16-bit types, 16-byte aligned operands
// as for the tensor-core kernel): a matrix-vector product bound by the weight's bytes. The
// weight goes straight from DRAM to registers with 16-byte streaming loads, many in flight
// per thread (no shared-memory staging: nothing is reused), FMAs in float32.
//  * B_KMAJOR (w + n * ldw + k): a warp owns GEMV_COLS columns and a 1/GEMV_KPARTS share
//    of K (lane l reads k = 8l + 256i + ...); shuffles and shared memory reduce. No split-K.
//    Grid: ceil(N / gemv_kmajor_cols), 1.
//  * row-major (w + k * ldw + n): lane l owns 8 consecutive columns of the block's 256; the
//    8 warps interleave the rows of the block's k range and meet in shared memory. With
//    splits > 1 (gridDim.y) the k ranges meet in the float32 workspace and the last block
//    of a column range finishes, as in linear_relu_mma. Grid: ceil(N / 256), splits.
namespace cufuse {
namespace linear {
constexpr int GEMV_THREADS = 256, GEMV_WARPS = GEMV_THREADS / 32;
constexpr int GEMV_COLS = 8;                               // K-major: columns per warp
constexpr int GEMV_KPARTS = 4;                             // K-major: warps sharing a column group
constexpr int GEMV_KMAJOR_COLS = GEMV_COLS * GEMV_WARPS / GEMV_KPARTS;  // K-major: columns per block
constexpr int GEMV_ROWMAJOR_COLS = 32 * 8;                 // row-major: columns per block
constexpr int GEMV_ROW_LOADS = 8;                          // row-major: weight rows in flight per thread

template <typename T>
__device__ __forceinline__ void widen8(const uint4& raw, float (&f)[8]) {
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = to_accum(v[e]);
}
}  // namespace linear
}  // namespace cufuse

template <typename T, int ROWS, bool B_KMAJOR>
__global__ void __launch_bounds__(GEMV_THREADS)
linear_relu_gemv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                 int64 ldw, int64 bias_stride, int64 k_rows_per_split) {
    static_assert(sizeof(T) == 2, "16-bit types: 8 elements per 16-byte load");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rows = int(min(int64(ROWS), M));
    if constexpr (B_KMAJOR) {
        constexpr int groups = GEMV_WARPS / GEMV_KPARTS;
        __shared__ float partial[GEMV_KPARTS][groups][ROWS][GEMV_COLS];
        const int group = warp % groups, part = warp / groups;
        const int64 n0 = int64(blockIdx.x) * GEMV_KMAJOR_COLS + group * GEMV_COLS;
        const T* col[GEMV_COLS];  // columns past N read column N - 1 (valid memory); never stored
#pragma unroll
        for (int j = 0; j < GEMV_COLS; ++j) col[j] = w + min(n0 + j, N - 1) * ldw;
        float acc[ROWS][GEMV_COLS] = {};
        for (int64 k = int64(part) * 256 + lane * 8; k < K; k += 256 * GEMV_KPARTS) {
            uint4 raw[GEMV_COLS];
#pragma unroll
            for (int j = 0; j < GEMV_COLS; ++j) raw[j] = __ldcs(reinterpret_cast<const uint4*>(col[j] + k));
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                if (r >= rows) break;
                float xf[8];
                widen8<T>(__ldg(reinterpret_cast<const uint4*>(x + r * ldx + k)), xf);
#pragma unroll
                for (int j = 0; j < GEMV_COLS; ++j) {
                    float wf[8];
                    widen8<T>(raw[j], wf);
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[r][j] = fmaf(xf[e], wf[e], acc[r][j]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int j = 0; j < GEMV_COLS; ++j) {
                const float v = warp_sum(acc[r][j]);
                if (lane == 0) partial[part][group][r][j] = v;
            }
        __syncthreads();
        for (int e = threadIdx.x; e < groups * ROWS * GEMV_COLS; e += GEMV_THREADS) {
            const int g = e / (ROWS * GEMV_COLS), r = e / GEMV_COLS % ROWS, j = e % GEMV_COLS;
            const int64 n = int64(blockIdx.x) * GEMV_KMAJOR_COLS + g * GEMV_COLS + j;
            if (r >= rows || n >= N) continue;
            float v = 0.f;
#pragma unroll
            for (int p = 0; p < GEMV_KPARTS; ++p) v += partial[p][g][r][j];
            out[r * N + n] = bias_relu<T>(v, bias, bias_stride, n);
        }
    } else {
        __shared__ float partial[GEMV_WARPS][ROWS][GEMV_ROWMAJOR_COLS];
        const int64 n0 = int64(blockIdx.x) * GEMV_ROWMAJOR_COLS, n = n0 + lane * 8;
        const bool col_ok = n < N;  // N % 8 == 0: a thread's 8 columns exist together
        const int64 k_begin = int64(blockIdx.y) * k_rows_per_split, k_end = min(K, k_begin + k_rows_per_split);
        float acc[ROWS][8] = {};
        for (int64 k = k_begin + warp; k < k_end; k += GEMV_WARPS * GEMV_ROW_LOADS) {
            uint4 raw[GEMV_ROW_LOADS];
#pragma unroll
            for (int u = 0; u < GEMV_ROW_LOADS; ++u) {
                const int64 kk = k + u * GEMV_WARPS;
                raw[u] = col_ok && kk < k_end ? __ldcs(reinterpret_cast<const uint4*>(w + kk * ldw + n)) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < GEMV_ROW_LOADS; ++u) {
                const int64 kk = k + u * GEMV_WARPS;
                if (kk >= k_end) break;
                float wf[8];
                widen8<T>(raw[u], wf);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    if (r >= rows) break;
                    const float xr = to_accum(x[r * ldx + kk]);
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(xr, wf[e], acc[r][e]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int e = 0; e < 8; ++e) partial[warp][r][lane * 8 + e] = acc[r][e];
        __syncthreads();
        const int splits = gridDim.y;
        for (int e = threadIdx.x; e < ROWS * GEMV_ROWMAJOR_COLS; e += GEMV_THREADS) {
            const int r = e / GEMV_ROWMAJOR_COLS, c = e % GEMV_ROWMAJOR_COLS;
            if (r >= rows || n0 + c >= N) continue;
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < GEMV_WARPS; ++q) v += partial[q][r][c];
            if (splits == 1) out[r * N + n0 + c] = bias_relu<T>(v, bias, bias_stride, n0 + c);
            else atomicAdd(workspace + r * N + n0 + c, v);
        }
        if (splits == 1) return;
        // Split-K: the last block of this column range to arrive finishes it (see linear_relu_mma).
        __threadfence();
        __syncthreads();
        __shared__ bool is_last;
        if (threadIdx.x == 0) is_last = atomicAdd(counters + blockIdx.x, 1) == splits - 1;
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        for (int e = threadIdx.x; e < ROWS * GEMV_ROWMAJOR_COLS; e += GEMV_THREADS) {
            const int r = e / GEMV_ROWMAJOR_COLS, c = e % GEMV_ROWMAJOR_COLS;
            if (r >= rows || n0 + c >= N) continue;
            float* cell = workspace + r * N + n0 + c;
            out[r * N + n0 + c] = bias_relu<T>(__ldcg(cell), bias, bias_stride, n0 + c);
            *cell = 0.f;
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
}
