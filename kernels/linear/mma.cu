// fused_linear_relu on float16 / bfloat16 tensor cores with mma.sync (sm_80 and later):
// `linear_relu_mma`, a cp.async multi-stage pipeline into XOR-swizzled shared memory,
// ldmatrix, mma.sync m16n8k16, bias + ReLU on the accumulators before the only store.
//
// Picked when (cufuse/ops/linear/select.py) the operands' rows are 16-byte aligned: on
// compute capability 8.x for every 16-bit problem (128x256 / 128x128 / 64x128 GEMM tiles by
// wave fill, 16x128 for M <= 16, 64x64 for M = 17..64, split-K where tiles leave SMs idle);
// on 9.0 only where the Hopper kernels lose (M > 64 shapes whose 128x256 wgmma tiles fill
// the SMs badly) or cannot run (M <= 16 with operands no tensor map describes).
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

// The x tile [BM][BK] and the weight tile of one stage (zero-filled outside M, N and k_end).
template <typename Tile, bool B_KMAJOR, typename T>
__device__ __forceinline__ void mma_load_stage(T* sa, T* sb, const T* __restrict__ x, const T* __restrict__ w,
                                               int64 m0, int64 n0, int64 k0, int64 M, int64 N, int64 k_end,
                                               int64 ldx, int64 ldw) {
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

}  // namespace cufuse::linear

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN; split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split). Requires (checked on the host):
// x rows 16-byte aligned with unit k stride, K % 8 == 0, the weight's contiguous axis
// 16-byte aligned and a multiple of 8 long. B_KMAJOR picks the weight layout: true for
// w[k, n] at w + n * ldw + k (a transposed (N, K) array, PyTorch's Linear weight), false for
// w + k * ldw + n (row-major (K, N)). With splits > 1, `counters` (one int per output tile)
// must be zero on entry and are zero on exit; `workspace` is, by `slot_reduce`, either M x N
// float32 zero on entry and on exit (atomics: each split adds its partial tile, the last
// block to arrive finishes and re-zeroes), or one BM x BN float32 slot per block, tiles x
// splits of them, any contents (common/split_k.cuh). Blocks of 4 warps run two per SM.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_relu_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store,
                int slot_reduce) {
    begin_dependent_grid();
    using Tile = GemmTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);

    const TileCorner corner = tile_corner<BM, BN>(M, N, raster_group);
    const int64 m0 = corner.m0, n0 = corner.n0;
    const int splits = gridDim.z;
    const KRange ks = split_k_range<BK>(K, k_tiles_per_split);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;

    float acc[Tile::mi][Tile::ni][4];
    zero_accumulators(acc);
    cp_async_pipeline<STAGES, Tile::stage_elems>(
        smem, ks.k_tiles,
        [&](T* stage, int kt) {
            mma_load_stage<Tile, B_KMAJOR>(stage, stage + Tile::a_elems, x, w, m0, n0, ks.k_begin + int64(kt) * BK,
                                           M, N, ks.k_end, ldx, ldw);
        },
        [&](const T* stage) {
            mma_compute_stage<Tile, B_KMAJOR, BK>(stage, stage + Tile::a_elems, warp_row, warp_col, lane, acc);
        });

    // Accumulator (i, j, r) sits at row warp_row + 16i + lane/4 + 8(r/2), column warp_col + 8j + 2(lane%4) + r%2.
    const int64 row_base = m0 + warp_row + (lane >> 2), col_base = n0 + warp_col + 2 * (lane & 3);
    if (splits > 1 && !slot_reduce) {
        // Split-K through atomics: add the partial tile into the float32 M x N workspace
        // (L2 atomics); the last block of this tile to arrive finishes it.
#pragma unroll
        for (int i = 0; i < Tile::mi; ++i)
#pragma unroll
            for (int j = 0; j < Tile::ni; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int64 m = row_base + i * 16 + (r >> 1) * 8, n = col_base + j * 8 + (r & 1);
                    if (m < M && n < N) atomicAdd(workspace + m * N + n, acc[i][j][r]);
                }
        if (!last_to_arrive(counters + blockIdx.x, splits)) return;
        const int rows = int(min(int64(BM), M - m0)), cols = int(min(int64(BN), N - n0));
        for (int e = threadIdx.x; e < rows * cols; e += Tile::threads) {
            const int64 m = m0 + e / cols, n = n0 + e % cols;
            float* cell = workspace + m * N + n;
            out[m * N + n] = bias_relu<T>(__ldcg(cell), bias, bias_stride, n);
            *cell = 0.f;
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
        return;
    }
    if (splits > 1 && !reduce_split_slots<Tile::threads>(acc, workspace, counters)) return;
    store_bias_relu<T>(acc, out, bias, bias_stride, row_base, col_base, M, N, paired_store);
}
