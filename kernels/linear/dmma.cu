// fused_linear_relu in float64 on sm_90 with the fragment loads pipelined: `linear_dmma`.
//
// Picked when (cufuse/ops/linear/select.py) the operands are float64 past one row (the weight
// stream's), their rows 16-byte aligned, on compute capability 9.0: 16 / 32 / 64-row tiles up
// to 64 rows, cuBLAS's 128x64 Hopper DGEMM tile beyond, K split through slots where the tiles
// leave SMs idle. (Compute capability 8.x runs float64 on linear_wide, linear/wide.cu.)
//
// linear_wide loads a stage's fragments after the stage's barrier and its cp.async
// address math, so every warp of the block waits for shared memory at the same time and the
// DMMA pipe idles there (ncu, 4096^3: DP pipe 67 %, cuBLAS's DGEMM 95 %). Here, as in
// cuBLAS's Hopper DGEMM (128x64x16 tile, 4 warps of 64x32, 2 blocks per SM, DMMA.16x8x8):
//  * each fragment tile is reloaded for the next k group right after the warp's last MMA that
//    reads it, so MMAs never wait for shared memory but at the first one;
//  * one barrier per k tile, before the MMAs of its last k group, whose fragments are already
//    in registers: the barrier hides under them; the next tile's cp.async follows the first
//    row of those MMAs (the DMMA queue is full there);
//  * BK = 16: x and a K-major weight as 128-byte rows, 16-byte chunk c of row r at
//    c ^ (2 (r & 3)), a row-major weight as [16][BN] rows, chunk c of row k at c ^ (2 (k & 3)):
//    unpadded rows aligned to 128 bytes (the padded rows of linear_wide cost 12 % excess
//    shared-memory wavefronts, ncu), no bank conflicts in the 64-bit fragment loads (per half
//    warp) or in the cp.async stores (per quarter warp);
//  * cp.async of whole tiles inside M and N and K without predicates or bounds math; rows
//    past M or N and k past K (zero-filled) only in edge tiles.
#include "common/mma.cuh"
#include "common/split_k.cuh"
#include "linear/epilogue.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

template <int BM, int BN, int WARPS_M, int WARPS_N, int MMA_K, bool B_KMAJOR>
struct DmmaTile {
    static constexpr int bk = 16;
    static constexpr int threads = 32 * WARPS_M * WARPS_N;
    static constexpr int warp_m = BM / WARPS_M, warp_n = BN / WARPS_N;
    static constexpr int mi = warp_m / 16, ni = warp_n / 8;  // m16n8 accumulator tiles per warp
    static constexpr int q = MMA_K / 4;                      // k quads per MMA: a[2q], b[q] per lane
    static constexpr int groups = bk / MMA_K;                // MMA k groups per k tile
    static constexpr int a_elems = BM * bk, b_elems = BN * bk, stage_elems = a_elems + b_elems;
    static_assert(MMA_K == 8 || MMA_K == 16, "DMMA m16n8k8 or m16n8k16");
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "whole m16 tiles; the row-major swizzle spans 16 columns");
};

// 16-byte chunk swizzles (chunk index within a row): see the section comment.
__device__ __forceinline__ int dmma_kmajor_swizzle(int row) { return 2 * (row & 3); }
__device__ __forceinline__ int dmma_nmajor_swizzle(int k) { return 2 * (k & 3); }

// This thread's cp.async share of one operand tile: ROWS rows of ROW_CHUNKS 16-byte chunks
// (rows `ld` apart in global memory) into shared rows of ROW_CHUNKS chunks, chunk c of row r
// at c ^ swizzle(r). The thread copies one chunk column, rows THREADS / ROW_CHUNKS apart (a
// multiple of 4: one swizzle for all its rows), so everything but the k offset is computed
// once: a chunk of a full tile costs a 64-bit add and the cp.async.
template <int ROWS, int ROW_CHUNKS, int THREADS>
struct DmmaTileCopy {
    static constexpr int rows_per_pass = THREADS / ROW_CHUNKS, passes = ROWS / rows_per_pass;
    static_assert(THREADS % ROW_CHUNKS == 0 && rows_per_pass % 4 == 0 && ROWS % rows_per_pass == 0,
                  "whole rows per pass, one swizzle per thread");
    const double* src;  // this thread's first chunk of the tile at k offset 0
    int64 row_step;     // elements between this thread's rows
    int dst;            // element offset of that chunk in the shared tile

    template <typename Swizzle>
    __device__ __forceinline__ DmmaTileCopy(const double* tile, int64 ld, Swizzle swizzle) {
        const int row = threadIdx.x / ROW_CHUNKS, chunk = threadIdx.x % ROW_CHUNKS;
        src = tile + row * ld + 2 * chunk;
        row_step = rows_per_pass * ld;
        dst = row * ROW_CHUNKS * 2 + 2 * (chunk ^ swizzle(row));
    }

    // The tile `k_offset` elements on in global memory, into `tile_dst`. CHECKED: chunks at or
    // past rows_left rows or cols_left columns are zero-filled (their address replaced by `base`).
    template <bool CHECKED>
    __device__ __forceinline__ void copy(double* tile_dst, int64 k_offset, const double* base, int rows_left,
                                         int cols_left) const {
        const double* p = src + k_offset;
        const int row = threadIdx.x / ROW_CHUNKS, col = 2 * (threadIdx.x % ROW_CHUNKS);
#pragma unroll
        for (int i = 0; i < passes; ++i) {
            double* d = tile_dst + dst + i * rows_per_pass * ROW_CHUNKS * 2;
            if constexpr (CHECKED) {
                const bool ok = row + i * rows_per_pass < rows_left && col < cols_left;
                cp_async_16(d, ok ? p : base, ok);
            } else {
                cp_async_16(d, p, true);
            }
            p += row_step;
        }
    }
};

// A warp's fragments of one k group and the lane's offsets (elements) into a stage.
// Fragment element v of a lane (g, t) is A(g + 8 (v % 2), t + 4 (v / 2)) and B(t + 4v, g):
// k = t + 4c with c = group * q + v / 2 (x) or group * q + v (weight) names the k quad.
template <typename Tile, bool B_KMAJOR>
struct DmmaFragments {
    static constexpr int MI = Tile::mi, NI = Tile::ni, Q = Tile::q, BN = Tile::b_elems / Tile::bk;
    double a[MI][2 * Q];
    double b[NI][Q];
    // x rows (and K-major weight rows) swizzle k by 4 (row & 3), a per-lane XOR of the k quad:
    // one offset per quad, every other fragment element an immediate from one of them. A
    // row-major weight's swizzle n ^ 4t crosses the 8-column boundary for odd j: one offset
    // per j parity.
    int a_lane[4], b_lane[B_KMAJOR ? 4 : 2];

    __device__ __forceinline__ DmmaFragments(int warp_row, int warp_col, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            a_lane[c] = (warp_row + g) * Tile::bk + 4 * (c ^ (g & 3)) + t;
            if constexpr (B_KMAJOR) b_lane[c] = (warp_col + g) * Tile::bk + 4 * (c ^ (g & 3)) + t;
        }
        if constexpr (!B_KMAJOR) {
#pragma unroll
            for (int parity = 0; parity < 2; ++parity) b_lane[parity] = t * BN + warp_col + ((8 * parity + g) ^ (4 * t));
        }
    }

    // Tile i (j) of k group `group` from stage `s` (x tile at s, weight tile at s + a_elems).
    __device__ __forceinline__ void load_a(const double* s, int i, int group) {
#pragma unroll
        for (int v = 0; v < 2 * Q; ++v) a[i][v] = (s + a_lane[group * Q + v / 2])[(16 * i + 8 * (v % 2)) * Tile::bk];
    }

    __device__ __forceinline__ void load_b(const double* s, int j, int group) {
        const double* sb = s + Tile::a_elems;
#pragma unroll
        for (int v = 0; v < Q; ++v) {
            if constexpr (B_KMAJOR) b[j][v] = (sb + b_lane[group * Q + v])[8 * j * Tile::bk];
            else b[j][v] = (sb + b_lane[j & 1])[4 * (group * Q + v) * BN + 16 * (j >> 1)];
        }
    }
};

template <int MMA_K>
__device__ __forceinline__ void mma_f64(double (&d)[4], const double (&a)[MMA_K / 2], const double (&b)[MMA_K / 4]) {
    if constexpr (MMA_K == 8) mma_1688_f64(d, a, b);
    else mma_16816_f64(d, a, b);
}

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN x 16, STAGES-deep cp.async
// pipeline (dynamic shared memory STAGES x (BM + BN) x 16 doubles), DMMA m16n8k{MMA_K}; sm_90
// only (the body is a trap before). Requirements, arguments and split-K as linear_wide.
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int MMA_K, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_dmma(const double* __restrict__ x, const double* __restrict__ w, const double* __restrict__ bias,
                 double* __restrict__ out, double* __restrict__ workspace, int* __restrict__ counters, int64 M,
                 int64 N, int64 K, int64 ldx, int64 ldw, int64 bias_stride, int k_tiles_per_split,
                 int raster_group, int activation) {
    begin_dependent_grid();
#if __CUDA_ARCH__ >= 900
    using Tile = DmmaTile<BM, BN, WARPS_M, WARPS_N, MMA_K, B_KMAJOR>;
    constexpr int MI = Tile::mi, NI = Tile::ni, BK = Tile::bk, GROUPS = Tile::groups;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    double* smem = reinterpret_cast<double*>(smem_raw);

    const TileCorner corner = tile_corner<BM, BN>(M, N, raster_group);
    const int64 m0 = corner.m0, n0 = corner.n0;
    const bool tile_inside = m0 + BM <= M && n0 + BN <= N;
    const KRange ks = split_k_range<BK>(K, k_tiles_per_split);
    const int64 k_begin = ks.k_begin, k_end = ks.k_end;
    const int k_tiles = ks.k_tiles;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;

    double acc[MI][NI][4];
    zero_accumulators(acc);

    // cp.async: x [BM][16], the weight [BN][16] (K-major) or [16][BN] (row-major) per stage.
    const DmmaTileCopy<BM, BK / 2, Tile::threads> x_copy(x + m0 * ldx, ldx, dmma_kmajor_swizzle);
    using WCopy = DmmaTileCopy<B_KMAJOR ? BN : BK, (B_KMAJOR ? BK : BN) / 2, Tile::threads>;
    const WCopy w_copy = B_KMAJOR ? WCopy(w + n0 * ldw, ldw, dmma_kmajor_swizzle) : WCopy(w + n0, ldw, dmma_nmajor_swizzle);
    const int rows_m = int(min(M - m0, int64(BM))), cols_n = int(min(N - n0, int64(BN)));
    auto load = [&](int kt, int slot) {
        if (kt < k_tiles) {
            double* sa = smem + slot * Tile::stage_elems;
            const int64 k0 = k_begin + int64(kt) * BK;
            const int64 w_offset = B_KMAJOR ? k0 : k0 * ldw;
            if (tile_inside && k0 + BK <= k_end) {
                x_copy.template copy<false>(sa, k0, x, 0, 0);
                w_copy.template copy<false>(sa + Tile::a_elems, w_offset, w, 0, 0);
            } else {
                const int cols_k = int(min(k_end - k0, int64(BK)));
                x_copy.template copy<true>(sa, k0, x, rows_m, cols_k);
                w_copy.template copy<true>(sa + Tile::a_elems, w_offset, w, B_KMAJOR ? cols_n : cols_k,
                                           B_KMAJOR ? cols_k : cols_n);
            }
        }
        cp_async_commit();  // an empty group keeps the wait counts uniform at the tail
    };
#pragma unroll
    for (int s = 0; s < STAGES; ++s) load(s, s);

    DmmaFragments<Tile, B_KMAJOR> f(warp_row, warp_col, lane);
    cp_async_wait<STAGES - 1>();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < MI; ++i) f.load_a(smem, i, 0);
#pragma unroll
    for (int j = 0; j < NI; ++j) f.load_b(smem, j, 0);

    for (int kt = 0, slot = 0; kt < k_tiles; ++kt) {
        const int next_slot = slot + 1 == STAGES ? 0 : slot + 1;
        const double* stage = smem + slot * Tile::stage_elems;
        const double* next_stage = smem + next_slot * Tile::stage_elems;
#pragma unroll
        for (int group = 0; group < GROUPS; ++group) {
            const bool last = group == GROUPS - 1;
            if (last) {
                // Tile kt + 1 landed for everyone, and every warp is done reading tile kt (its last
                // group's fragments are in registers): its slot takes tile kt + STAGES below.
                cp_async_wait<STAGES - 2>();
                __syncthreads();
            }
            const double* src = last ? next_stage : stage;  // the fragments the MMAs below make room for
            const int src_group = last ? 0 : group + 1;
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    mma_f64<MMA_K>(acc[i][j], f.a[i], f.b[j]);
                    if (i == MI - 1) f.load_b(src, j, src_group);
                }
                f.load_a(src, i, src_group);
                if (last && i == 0) load(kt + STAGES, slot);
            }
        }
        slot = next_slot;
    }
    cp_async_wait<0>();

    if (gridDim.z > 1 && !reduce_split_slots<Tile::threads>(acc, workspace, counters)) return;
    store_bias_act<double>(acc, out, bias, bias_stride, m0 + warp_row + (lane >> 2), n0 + warp_col + 2 * (lane & 3),
                           M, N, /*paired_store=*/0, activation);
#else
    __trap();  // DMMA m16n8k8 / m16n8k16 need sm_90
#endif
}
