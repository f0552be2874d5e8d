// fused_linear_relu in float32 and float64 on tensor cores: `linear_wide<T>`, one
// cp.async pipeline for both.
//
// Picked when (cufuse/ops/linear/select.py) the operands' rows are 16-byte aligned on
// compute capability 8.0 or later: float32 (3xTF32) past the weight stream's 4 rows, on
// 16 / 32 / 64-row tiles up to 64 rows and the 128x128 tile beyond; float64 (DMMA) on
// compute capability 8.x (on 9.0 linear/dmma.cu takes float64). K is split through slots
// where the tiles leave SMs idle.
//
//  * float32 at float32 accuracy ("3xTF32", after CUTLASS's fast-accurate float32 GEMM):
//    every operand element splits as a ~= big + small, both tf32 (split_tf32), and
//    acc += small_a * big_b + big_a * small_b + big_a * big_b with mma.sync m16n8k8 tf32
//    and float32 accumulators. Dropped are small_a * small_b and the split's remainders:
//    under 2^-20 of |a * b| per product, float32 rounding level (plain TF32 loses 2^-11).
//    The tensor cores round their float32 sums toward zero, and three MMAs per k8 step
//    would pile that bias up along K (about K / 3 ulps of the running sum); so each
//    pipeline stage's MMAs accumulate into a fresh per-stage partial, added to the
//    running sum with one round-to-nearest float32 add per stage.
//  * float64: mma.sync f64 (IEEE fused multiply-adds, as cuBLAS's DGEMM on DMMA): m16n8k16
//    on sm_90, m8n8k4 on sm_80.
//
// Shared memory holds the tiles as padded rows, written by 16-byte cp.async in the
// multi-stage pipeline of linear_mma (common/cp_async_pipeline.cuh): x as [BM][BK + 4],
// a K-major weight as [BN][BK + 4], a row-major weight as [BK][BN + 32 bytes] (elements). float32: an 8x8
// b16 ldmatrix on fp32 rows is 8 rows x 4 floats, thread l getting float l % 4 of row
// l / 4: exactly the tf32 A fragment, and the B fragment of a K-major weight; rows BK + 4
// floats apart put the 8 rows in 8 distinct 16-byte bank groups. A row-major weight is
// read with scalar loads: rows BN + 8 floats apart put the fragment's 4 k rows x 8 n
// columns in 32 distinct banks. float64 fragments are scalar 8-byte loads, served per
// half warp (16 lanes, 16 8-byte banks): 4 rows x 4 doubles of x or a K-major weight at
// rows BK + 4 doubles apart (4 banks apart), 4 k rows x 4 doubles of a row-major weight
// at rows BN + 4 doubles apart: 16 distinct banks each.
#include "common/cp_async_pipeline.cuh"
#include "common/split_k.cuh"
#include "linear/epilogue.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, bool B_KMAJOR>
struct WideTile {
    static constexpr int threads = 32 * WARPS_M * WARPS_N;
    static constexpr int warp_m = BM / WARPS_M, warp_n = BN / WARPS_N;
    static constexpr int mi = warp_m / 16, ni = warp_n / 8;  // m16n8 accumulator tiles per warp
    // Padded row lengths (elements): 16 bytes (float) or 32 bytes (double) on x and a K-major
    // weight, 32 bytes on a row-major weight (see the section comment).
    static constexpr int a_ld = BK + 4, b_ld = B_KMAJOR ? BK + 4 : BN + 32 / int(sizeof(T));
    static constexpr int a_elems = BM * a_ld;
    static constexpr int b_elems = (B_KMAJOR ? BN : BK) * b_ld;
    static constexpr int stage_elems = a_elems + b_elems;
    static_assert(BK % 8 == 0, "k8 steps; BK + 4 = 4 x odd staggers the rows");
    static_assert(B_KMAJOR || BN % (128 / sizeof(T)) == 0, "the 32-byte pad staggers the row-major B rows");
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "warp tile must hold whole x4 ldmatrix loads");
};

// A ROWS x COLS tile, COLS contiguous in global memory (row stride ld), into shared-memory
// rows of LD elements, 16 bytes per cp.async; chunks at or past row_end or col_end are
// zero-filled (col_end is a multiple of the chunk, so a chunk is all in or all out).
template <typename T, int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void load_tile_wide(T* dst, const T* __restrict__ src, int64 row0, int64 col0,
                                               int64 row_end, int64 col_end, int64 ld) {
    constexpr int vec = 16 / sizeof(T), row_chunks = COLS / vec, chunks = ROWS * row_chunks;
#pragma unroll
    for (int i = 0; i < (chunks + THREADS - 1) / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        if (chunks % THREADS != 0 && c >= chunks) break;
        const int row = c / row_chunks, col = (c % row_chunks) * vec;
        const bool ok = row0 + row < row_end && col0 + col < col_end;
        cp_async_16(dst + row * LD + col, ok ? src + (row0 + row) * ld + col0 + col : src, ok);
    }
}

// One BK slab of a warp's 3xTF32 MMAs from one pipeline stage, added to acc.
template <typename Tile, int BK, bool B_KMAJOR>
__device__ __forceinline__ void wide_compute_stage(const float* sa, const float* sb, int warp_row, int warp_col, int lane,
                                                   float (&acc)[Tile::mi][Tile::ni][4]) {
    constexpr int MI = Tile::mi, NI = Tile::ni;
    constexpr float zero[4] = {0.f, 0.f, 0.f, 0.f};
    float part[MI][NI][4];  // this stage's sum (its first MMA adds to zero)
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
        unsigned b_big[NI][2], b_small[NI][2];
#pragma unroll
        for (int j = 0; j < NI; j += 2) {
            unsigned raw[4];  // b[j][0], b[j][1], b[j+1][0], b[j+1][1]
            if constexpr (B_KMAJOR) {
                // [n][k]: matrices (n0-7, k0-3) (n0-7, k4-7) (n8-15, k0-3) (n8-15, k4-7).
                ldmatrix_x4(raw, sb + (warp_col + j * 8 + (lane >> 4) * 8 + (lane & 7)) * Tile::b_ld + kk +
                                     ((lane >> 3) & 1) * 4);
            } else {
                // [k][n]: thread (g, t) = (lane / 4, lane % 4) reads B(t, g) and B(t + 4, g).
                const float* p = sb + (kk + (lane & 3)) * Tile::b_ld + warp_col + j * 8 + (lane >> 2);
                const float v[4] = {p[0], p[4 * Tile::b_ld], p[8], p[4 * Tile::b_ld + 8]};
#pragma unroll
                for (int r = 0; r < 4; ++r) raw[r] = __float_as_uint(v[r]);
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) split_tf32(__uint_as_float(raw[r]), b_big[j + r / 2][r % 2], b_small[j + r / 2][r % 2]);
        }
        // One 16-row A fragment at a time keeps the registers to B's fragments plus one of
        // A's; NI independent accumulators separate two MMAs into the same one.
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            // x4: (m0-7, k0-3) (m8-15, k0-3) (m0-7, k4-7) (m8-15, k4-7); lanes 8j..8j+7 address matrix j.
            unsigned raw[4], a_big[4], a_small[4];
            ldmatrix_x4(raw, sa + (warp_row + i * 16 + (lane & 15)) * Tile::a_ld + kk + (lane >> 4) * 4);
#pragma unroll
            for (int r = 0; r < 4; ++r) split_tf32(__uint_as_float(raw[r]), a_big[r], a_small[r]);
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                if (kk == 0) mma_1688_tf32(part[i][j], a_small, b_big[j], zero);
                else mma_1688_tf32(part[i][j], a_small, b_big[j], part[i][j]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_1688_tf32(part[i][j], a_big, b_small[j], part[i][j]);
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_1688_tf32(part[i][j], a_big, b_big[j], part[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] += part[i][j][r];
}

// One BK slab of a warp's float64 MMAs from one pipeline stage: m16n8k16 on sm_90 (Hopper's
// float64 shapes), m8n8k4 before. acc keeps the m16n8 layout of store_bias_act; an m8n8k4
// tile 2i + h of the warp is acc[i][j][2h], acc[i][j][2h + 1] (rows 16i + 8h + g,
// columns 8j + 2t, 8j + 2t + 1).
template <typename Tile, int BK, bool B_KMAJOR>
__device__ __forceinline__ void wide_compute_stage(const double* sa, const double* sb, int warp_row, int warp_col, int lane,
                                                   double (&acc)[Tile::mi][Tile::ni][4]) {
    constexpr int MI = Tile::mi, NI = Tile::ni;
    const int g = lane >> 2, t = lane & 3;
    // This lane's fragment element (row g, k t) of the warp's x rows and (k t, column g) of its
    // weight columns: every other fragment element is a compile-time offset from these two
    // pointers, so each LDS.64 is [register + immediate] (indexing from the warp tile's corner
    // instead left ~200 integer instructions of address math per stage and warp in the SASS).
    const double* x_lane = sa + (warp_row + g) * Tile::a_ld + t;
    const double* w_lane = B_KMAJOR ? sb + (warp_col + g) * Tile::b_ld + t : sb + t * Tile::b_ld + warp_col + g;
    // x(g + row, t + k) and w(t + k, g + n) of the stage, relative to the warp tile.
    auto x_at = [&](int row, int k) { return x_lane[row * Tile::a_ld + k]; };
    auto w_at = [&](int k, int n) { return B_KMAJOR ? w_lane[n * Tile::b_ld + k] : w_lane[k * Tile::b_ld + n]; };
#if __CUDA_ARCH__ >= 900
    // m16n8k16 (DMMA.16x8x16): twice the work of m16n8k8 per instruction, each accumulator read
    // and written once per 16 k instead of twice (the register-file traffic per FMA drops from
    // 28 to 20 registers per lane), half the MMA issue slots.
    static_assert(BK % 16 == 0, "m16n8k16 steps");
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        double b[NI][4];
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) b[j][v] = w_at(kk + 4 * v, 8 * j);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            double a[8];
#pragma unroll
            for (int v = 0; v < 8; ++v) a[v] = x_at(16 * i + 8 * (v % 2), kk + 4 * (v / 2));
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_16816_f64(acc[i][j], a, b[j]);
        }
    }
#else
#pragma unroll
    for (int kk = 0; kk < BK; kk += 4) {
        double a[2 * MI], b[NI];
#pragma unroll
        for (int i = 0; i < 2 * MI; ++i) a[i] = x_at(8 * i, kk);
#pragma unroll
        for (int j = 0; j < NI; ++j) b[j] = w_at(kk, 8 * j);
#pragma unroll
        for (int i = 0; i < 2 * MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
                mma_884_f64(acc[i / 2][j][2 * (i % 2)], acc[i / 2][j][2 * (i % 2) + 1], a[i], b[j]);
    }
#endif
}

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN, STAGES-deep cp.async pipeline
// (dynamic shared memory STAGES x stage_elems elements); split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split) and, with splits > 1, meets the
// others through slots of accumulators (reduce_split_slots: `workspace` tiles x splits x
// BM x BN values of accum_t<T>, `counters` one zero int per tile). T is float (3xTF32) or
// double. Requires (checked on the host): x rows 16-byte aligned with unit k stride, K a
// multiple of 16 bytes' elements; the weight's contiguous axis 16-byte aligned and, when
// it is N, N a multiple of them too. B_KMAJOR as in linear_mma.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_wide(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 accum_t<T>* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K,
                 int64 ldx, int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group,
                 int activation) {
    begin_dependent_grid();
    using Tile = WideTile<T, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);

    const TileCorner corner = tile_corner<BM, BN>(M, N, raster_group);
    const int64 m0 = corner.m0, n0 = corner.n0;
    const KRange ks = split_k_range<BK>(K, k_tiles_per_split);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;

    accum_t<T> acc[Tile::mi][Tile::ni][4];
    zero_accumulators(acc);

    cp_async_pipeline<STAGES, Tile::stage_elems>(
        smem, ks.k_tiles,
        [&](T* stage, int kt) {
            const int64 k0 = ks.k_begin + int64(kt) * BK;
            load_tile_wide<T, BM, BK, Tile::a_ld, Tile::threads>(stage, x, m0, k0, M, ks.k_end, ldx);
            if constexpr (B_KMAJOR)
                load_tile_wide<T, BN, BK, Tile::b_ld, Tile::threads>(stage + Tile::a_elems, w, n0, k0, N, ks.k_end,
                                                                     ldw);
            else
                load_tile_wide<T, BK, BN, Tile::b_ld, Tile::threads>(stage + Tile::a_elems, w, k0, n0, ks.k_end, N,
                                                                     ldw);
        },
        [&](const T* stage) {
            wide_compute_stage<Tile, BK, B_KMAJOR>(stage, stage + Tile::a_elems, warp_row, warp_col, lane, acc);
        });

    if (gridDim.z > 1 && !reduce_split_slots<Tile::threads>(acc, workspace, counters)) return;
    // Accumulator (i, j, r) sits at row warp_row + 16i + lane/4 + 8(r/2), column warp_col + 8j + 2(lane%4) + r%2.
    store_bias_act<T>(acc, out, bias, bias_stride, m0 + warp_row + (lane >> 2), n0 + warp_col + 2 * (lane & 3), M, N,
                      /*paired_store=*/0, activation);
}
