// fused_linear on float16 / bfloat16 tensor cores with mma.sync (sm_80 and later):
// `linear_mma` (and fused_gated_linear's `gated_linear_mma`), a cp.async multi-stage pipeline into XOR-swizzled shared memory,
// ldmatrix, mma.sync m16n8k16, bias + activation on the accumulators before the only store.
//
// Picked when (cufuse/ops/linear/select.py) the operands' rows are 16-byte aligned: on
// compute capability 8.x for every 16-bit problem (128x256 / 128x128 / 64x128 GEMM tiles by
// wave fill, 16x128 for M <= 16, 64x64 for M = 17..64, split-K where tiles leave SMs idle);
// on 9.0 only where the Hopper kernels lose (M > 64 shapes whose 128x256 wgmma tiles fill
// the SMs badly) or cannot run (M <= 16 with operands no tensor map describes). The gated
// kernel: every 16-bit gated problem whose weights share a layout the tensor cores can load
// (on 2N columns: the stream tile for M <= 16, 64x64 for M <= 64, the GEMM tiles beyond).
#include "common/cp_async_pipeline.cuh"
#include "common/split_k.cuh"
#include "linear/epilogue.cuh"
#include "linear/gemm_tile.cuh"

using namespace cufuse;
using namespace cufuse::linear;

namespace cufuse::linear {

// Shared memory holds tiles as rows of 16-byte chunks; chunk c of row r lives at chunk
// c ^ (r & 7), so the 8 rows one ldmatrix reads (and the rows cp.async writes) fall in 8
// distinct bank groups: no bank conflicts without padding. Rows of 4 chunks (64 bytes, two
// rows per 128-byte bank line) use c ^ ((r >> 1) & 3) to the same end.
template <int RowChunks>
__device__ __forceinline__ int swizzled(int row, int col) {  // element offset, col in elements
    static_assert(RowChunks >= 8 || RowChunks == 4, "rows of 4 or >= 8 chunks");
    const int chunk = col >> 3;
    const int phys = RowChunks >= 8 ? chunk ^ (row & 7) : chunk ^ ((row >> 1) & 3);
    return row * RowChunks * 8 + (phys << 3) + (col & 7);
}

// The weight columns of a block tile: tile column v is column n0 + v of w (k stride 1 and
// column stride ldw when K-major, else the reverse).
template <typename T, bool B_KMAJOR>
struct WeightColumns {
    const T* w;
    int64 ldw, n0, N;
    __device__ __forceinline__ bool has(int v) const { return n0 + v < N; }
    __device__ __forceinline__ const T* at(int v, int64 k) const {
        return B_KMAJOR ? w + (n0 + v) * ldw + k : w + k * ldw + n0 + v;
    }
};

// fused_gated_linear's tile columns: each warp's WARP_N columns are WARP_N / 2 output columns
// of w_gate, then the same of w_up (so a thread holds both values of its outputs; the halves
// are multiples of 8: a 16-byte chunk of an N-major row never straddles them). n0: the tile's
// first output column.
template <typename T, bool B_KMAJOR, int WARP_N>
struct GatedColumns {
    const T *w_gate, *w_up;
    int64 ld_gate, ld_up, n0, N;
    static constexpr int half = WARP_N / 2;
    static_assert(half % 8 == 0, "whole 16-byte chunks of one weight");
    __device__ __forceinline__ int64 column(int v) const { return n0 + v / WARP_N * half + v % half; }
    __device__ __forceinline__ bool has(int v) const { return column(v) < N; }
    __device__ __forceinline__ const T* at(int v, int64 k) const {
        const bool up = v % WARP_N >= half;
        const T* w = up ? w_up : w_gate;
        const int64 ldw = up ? ld_up : ld_gate, n = column(v);
        return B_KMAJOR ? w + n * ldw + k : w + k * ldw + n;
    }
};

// The x tile [BM][BK] and the weight tile of one stage (zero-filled outside M, N and k_end).
template <typename Tile, bool B_KMAJOR, typename T, typename Columns>
__device__ __forceinline__ void mma_load_stage(T* sa, T* sb, const T* __restrict__ x, const Columns& cols, int64 m0,
                                               int64 k0, int64 M, int64 k_end, int64 ldx) {
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
        // K-major: row = tile column, col = k; N-major: row = k, col = tile column.
        const int v = B_KMAJOR ? row : col;
        const int64 k = k0 + (B_KMAJOR ? col : row);
        const bool ok = cols.has(v) && k < k_end;
        cp_async_16(sb + swizzled<Tile::b_row_chunks>(row, col), ok ? cols.at(v, k) : x, ok);
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
template <typename Tile, bool B_KMAJOR, int BK, typename T>
__device__ __forceinline__ void mma_compute_stage(const T* sa, const T* sb, int warp_row, int warp_col, int lane,
                                                  float (&acc)[Tile::mi][Tile::ni][4]) {
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

// A block's partial tile over its k range (pipeline, MMAs) and, with splits > 1, the split
// reduction; false in the blocks that leave (not the last of their tile to arrive).
template <typename Tile, bool B_KMAJOR, int BK, int STAGES, typename T, typename Columns>
__device__ __forceinline__ bool mma_tile_sum(float (&acc)[Tile::mi][Tile::ni][4], const T* __restrict__ x,
                                             const Columns& cols, int64 m0, int64 M, int64 K, int64 ldx,
                                             int k_tiles_per_split, float* __restrict__ workspace,
                                             int* __restrict__ counters, int warp_row, int warp_col, int lane) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const KRange ks = split_k_range<BK>(K, k_tiles_per_split);
    zero_accumulators(acc);
    cp_async_pipeline<STAGES, Tile::stage_elems>(
        smem, ks.k_tiles,
        [&](T* stage, int kt) {
            mma_load_stage<Tile, B_KMAJOR>(stage, stage + Tile::a_elems, x, cols, m0, ks.k_begin + int64(kt) * BK, M,
                                           ks.k_end, ldx);
        },
        [&](const T* stage) {
            mma_compute_stage<Tile, B_KMAJOR, BK>(stage, stage + Tile::a_elems, warp_row, warp_col, lane, acc);
        });
    return gridDim.z == 1 || reduce_split_slots<Tile::threads>(acc, workspace, counters);
}

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN; split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split). Requires (checked on the host):
// x rows 16-byte aligned with unit k stride, K % 8 == 0, the weight's contiguous axis
// 16-byte aligned and a multiple of 8 long. B_KMAJOR picks the weight layout: true for
// w[k, n] at w + n * ldw + k (a transposed (N, K) array, PyTorch's Linear weight), false for
// w + k * ldw + n (row-major (K, N)). With splits > 1, `counters` (one int per output tile)
// must be zero on entry and are zero on exit; `workspace` holds one BM x BN float32 slot per
// block, tiles x splits of them, any contents (common/split_k.cuh: summed in split order, so
// the result's bits do not depend on which block finishes last). `activation`: epilogue.cuh's
// Activation. Blocks of 4 warps run two per SM.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store,
                int activation) {
    begin_dependent_grid();
    using Tile = GemmTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    const TileCorner corner = tile_corner<BM, BN>(M, N, raster_group);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;
    float acc[Tile::mi][Tile::ni][4];
    const WeightColumns<T, B_KMAJOR> cols{w, ldw, corner.n0, N};
    if (!mma_tile_sum<Tile, B_KMAJOR, BK, STAGES>(acc, x, cols, corner.m0, M, K, ldx, k_tiles_per_split, workspace,
                                                  counters, warp_row, warp_col, lane))
        return;
    // Accumulator (i, j, r) sits at row warp_row + 16i + lane/4 + 8(r/2), column warp_col + 8j + 2(lane%4) + r%2.
    store_bias_act<T>(acc, out, bias, bias_stride, corner.m0 + warp_row + (lane >> 2),
                      corner.n0 + warp_col + 2 * (lane & 3), M, N, paired_store, activation);
}

// fused_gated_linear: act(x @ w_gate) * (x @ w_up) on the same tiles, each warp's columns
// half gate, half up (GatedColumns): a block covers BN / 2 output columns; x's tile is loaded
// once for both products. Weights as linear_mma's (one layout, B_KMAJOR, for both; row
// strides ld_gate, ld_up), no bias.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
gated_linear_mma(const T* __restrict__ x, const T* __restrict__ w_gate, const T* __restrict__ w_up,
                 T* __restrict__ out, float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N,
                 int64 K, int64 ldx, int64 ld_gate, int64 ld_up, int k_tiles_per_split, int raster_group,
                 int paired_store, int activation) {
    begin_dependent_grid();
    using Tile = GemmTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    const TileCorner corner = tile_corner<BM, BN / 2>(M, N, raster_group);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;
    float acc[Tile::mi][Tile::ni][4];
    const GatedColumns<T, B_KMAJOR, Tile::warp_n> cols{w_gate, w_up, ld_gate, ld_up, corner.n0, N};
    if (!mma_tile_sum<Tile, B_KMAJOR, BK, STAGES>(acc, x, cols, corner.m0, M, K, ldx, k_tiles_per_split, workspace,
                                                  counters, warp_row, warp_col, lane))
        return;
    store_gated<T>(acc, out, corner.m0 + warp_row + (lane >> 2), corner.n0 + warp_col / 2 + 2 * (lane & 3), M, N,
                   paired_store, activation);
}
