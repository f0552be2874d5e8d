// fused_linear_relu: out[m, n] = max(sum_k x[m, k] * w[k, n] + bias[n], 0) in one launch.
//
// The kernels, all with bias and ReLU applied to the accumulators before the only store:
//  * linear_relu_mma  -- float16/bfloat16 tensor cores (cp.async multi-stage pipeline,
//    XOR-swizzled shared memory, ldmatrix, mma.sync m16n8k16). One template serves the big
//    GEMM tiles and, for M <= 64, the weight-streaming tiles (BM = 16 or 64) with split-K:
//    each split adds its float32 partial tile into a workspace with atomics, or stores it
//    to its own slot (`slot_reduce`), and the block that finishes last (a per-tile
//    counter) reduces, applies bias+ReLU, stores, and re-zeroes what the next call needs. B_KMAJOR picks the weight layout: true for
//    w[k, n] at w + n * ldw + k (a transposed (N, K) array, PyTorch's Linear weight),
//    false for w + k * ldw + n (row-major (K, N)).
//  * linear_relu_wgmma / linear_relu_wgmma_tma -- Hopper warpgroup MMA (sm_90a), operands
//    loaded by cp.async or by TMA (a producer warp and an mbarrier ring); see below.
//  * linear_relu_swap_tma -- the same TMA ring for M <= 64 with the operands swapped
//    (out^T = W^T x^T: weight columns as wgmma's M, x's rows padded to 8, 16 or 64 as its N),
//    64 to 256 k a stage, L2 told to evict the streamed weight first and keep x.
//  * linear_relu_simt -- register-tiled SIMT GEMM with arbitrary strides: float32 (true
//    IEEE float32, no TF32), float64, and 16-bit inputs whose alignment rules out cp.async.
#include "tma.cuh"
#include "wgmma.cuh"

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
// distinct bank groups: no bank conflicts without padding. Rows of 4 chunks (64 bytes, two
// rows per 128-byte bank line) use c ^ ((r >> 1) & 3) to the same end.
template <int RowChunks>
__device__ __forceinline__ int swizzled(int row, int col) {  // element offset, col in elements
    static_assert(RowChunks >= 8 || RowChunks == 4, "rows of 4 or >= 8 chunks");
    const int chunk = col >> 3;
    const int phys = RowChunks >= 8 ? chunk ^ (row & 7) : chunk ^ ((row >> 1) & 3);
    return row * RowChunks * 8 + (phys << 3) + (col & 7);
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
    static_assert(BK % 16 == 0 && (BK / 8 >= 8 || BK / 8 == 4) && BN / 8 >= 8, "swizzle needs rows of 4 or >= 8 chunks");
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "warp tile must hold whole x4 ldmatrix loads");
    static_assert(b_elems / 8 % threads == 0, "B chunks per thread");
};

// The x tile [BM][BK] of one stage (zero-filled outside M and k_end).
template <typename Tile, typename T>
__device__ __forceinline__ void mma_load_a(T* sa, const T* __restrict__ x, int64 m0, int64 k0, int64 M, int64 k_end,
                                           int64 ldx) {
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
}

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__device__ __forceinline__ void mma_load_stage(T* sa, T* sb, const T* __restrict__ x, const T* __restrict__ w,
                                               int64 m0, int64 n0, int64 k0, int64 M, int64 N, int64 k_end,
                                               int64 ldx, int64 ldw) {
    using Tile = MmaTile<T, BM, BN, BK, WARPS_M, WARPS_N, STAGES, B_KMAJOR>;
    const int tid = threadIdx.x;
    mma_load_a<Tile>(sa, x, m0, k0, M, k_end, ldx);
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

// Bias + ReLU on a warp's accumulators and the only store of the output. Layout of
// mma.sync m16n8 (and of wgmma, per 16-row warp slice): tile (i, j) element r sits at row
// row_base + 16i + 8(r/2), column col_base + 8j + r%2.
template <typename T, int MI, int NI>
__device__ __forceinline__ void store_bias_relu(const accum_t<T> (&acc)[MI][NI][4], T* __restrict__ out,
                                                const T* __restrict__ bias, int64 bias_stride, int64 row_base,
                                                int64 col_base, int64 M, int64 N, int paired_store) {
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
                    T pair[2] = {bias_relu<T>(acc[i][j][2 * h], bias, bias_stride, n),
                                 bias_relu<T>(acc[i][j][2 * h + 1], bias, bias_stride, n + 1)};
                    *reinterpret_cast<unsigned*>(dst) = *reinterpret_cast<const unsigned*>(pair);
                } else {
                    if (n < N) dst[0] = bias_relu<T>(acc[i][j][2 * h], bias, bias_stride, n);
                    if (n + 1 < N) dst[1] = bias_relu<T>(acc[i][j][2 * h + 1], bias, bias_stride, n + 1);
                }
            }
}

// Split-K through slots (grid z = the splits of one output tile, blockIdx.x the tile):
// every split stores its partial tile, in accumulator order (16 bytes per thread and unit:
// one float4 of float accumulators, two double2 of double ones, per (i, j); each warp writes
// 512 contiguous bytes a unit), to its own slot of this tile; the last block to arrive adds
// the other slots to its registers and returns true, to store like an unsplit block. No
// atomics on the M x N cells and nothing to re-zero but the counter. Workspace (of the
// accumulator type A): gridDim.x x gridDim.z slots of MI x NI x 4 x THREADS values; the whole
// block calls it, or with `sync_threads` > 0 only its first THREADS = sync_threads
// (last_to_arrive).
template <int THREADS, typename A, int MI, int NI>
__device__ __forceinline__ bool reduce_split_slots(A (&acc)[MI][NI][4], A* __restrict__ workspace,
                                                   int* __restrict__ counters, int sync_threads = 0) {
    constexpr int per_unit = Vec16<A>::size, units = 4 / per_unit;
    constexpr int slot_values = MI * NI * 4 * THREADS;
    const int splits = gridDim.z, split = blockIdx.z;
    // This thread's first unit of the tile's first slot: every access below is a constant
    // offset from it or from one per-slot pointer, so no table of addresses is kept in
    // registers across the slots.
    A* const mine = workspace + (int64(blockIdx.x) * splits * slot_values + threadIdx.x * per_unit);
    A* const own = mine + int64(split) * slot_values;
    auto unit = [&](int i, int j, int u) { return ((i * NI + j) * units + u) * THREADS * per_unit; };
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int u = 0; u < units; ++u) {
                Vec16<A> values;
#pragma unroll
                for (int r = 0; r < per_unit; ++r) values.v[r] = acc[i][j][u * per_unit + r];
                store_vec16(own + unit(i, j, u), values);
            }
    if (!last_to_arrive(counters + blockIdx.x, splits, sync_threads)) return false;
    for (int z = 0; z < splits; ++z) {
        if (z == split) continue;
        const A* part = mine + int64(z) * slot_values;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int u = 0; u < units; ++u) {
                    Vec16<A> values;  // L2 only: other blocks wrote it
                    *reinterpret_cast<uint4*>(&values) = __ldcg(reinterpret_cast<const uint4*>(part + unit(i, j, u)));
#pragma unroll
                    for (int r = 0; r < per_unit; ++r) acc[i][j][u * per_unit + r] += values.v[r];
                }
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    return true;
}

// Zeroes a warp's m16n8 accumulator tiles.
template <typename A, int MI, int NI>
__device__ __forceinline__ void zero_accumulators(A (&acc)[MI][NI][4]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = A(0);
}
}  // namespace linear
}  // namespace cufuse

using namespace cufuse;
using namespace cufuse::linear;

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN; split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split). Requires (checked on the host):
// x rows 16-byte aligned with unit k stride, K % 8 == 0, the weight's contiguous axis
// 16-byte aligned and a multiple of 8 long. With splits > 1, `counters` (one int per
// output tile) must be zero on entry and are zero on exit; `workspace` is, by
// `slot_reduce`, either M x N float32 zero on entry and on exit (atomics), or one
// BM x BN float32 slot per block, tiles x splits of them, any contents (slots).
// Blocks of 4 warps are meant to run two per SM (cufuse/_configs/linear.py, max_blocks_per_sm).
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_relu_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store,
                int slot_reduce) {
    begin_dependent_grid();
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
    zero_accumulators(acc);

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

namespace cufuse {
namespace linear {
// ---------------------------------------------------------------------------------------
// Hopper path (sm_90a): warpgroup MMA. Block tile BM x BN x 64 (BM = 64 or 128: one or two
// warpgroups of 64 rows; BN = 64, 128 or 256: the wgmma instruction's N); A (x) and B (the
// weight) come from shared memory through matrix descriptors. The cp.async loader above
// writes x, and a K-major weight (a transposed (N, K) array), as rows of 128 bytes with
// chunk c of row r at c ^ (r & 7): on a 1024-byte aligned stage that is exactly the
// 128-byte swizzle wgmma reads (address bits [4:6] ^= bits [7:9]). A row-major (K, N)
// weight is N-major: wgmma reads it transposed (imm-trans-b = 1, 16-bit types only) from
// 128-byte swizzle atoms that run along N (wgmma_load_b_nmajor).

// cp.async of a K-major [ROWS][BK] tile (x, or a K-major weight: src + row * ld + k) as
// BK / 64 column atoms of [ROWS][64] (kmajor_atom_offset: the layout sw128_kmajor_desc
// describes; for BK = 64 the same bytes as mma_load_a's swizzle) by THREADS threads
// (`thread`: this one's index among them). Consecutive threads take consecutive 16-byte
// chunks of a row; chunks outside rows or k_end are zero-filled.
template <int ROWS, int BK, int THREADS, typename T>
__device__ __forceinline__ void wgmma_load_kmajor(T* dst, const T* __restrict__ src, int64 row0, int64 rows,
                                                  int64 k0, int64 k_end, int64 ld, int thread) {
    constexpr int row_chunks = BK / 8, chunks = ROWS * row_chunks;
#pragma unroll
    for (int i = 0; i < (chunks + THREADS - 1) / THREADS; ++i) {
        const int c = thread + i * THREADS;
        if (chunks % THREADS != 0 && c >= chunks) break;
        const int row = c / row_chunks, col = (c % row_chunks) * 8;
        const bool ok = row0 + row < rows && k0 + col < k_end;
        cp_async_16(dst + kmajor_atom_offset<ROWS>(row, col), ok ? src + (row0 + row) * ld + k0 + col : src, ok);
    }
}

// What one block of a wgmma kernel computes (grid: tiles_m * tiles_n, 1, splits): output
// tile (m0, n0) and k tiles [k_begin, k_end) in k_tiles steps of BK.
struct WgmmaWork {
    int64 m0, n0, k_begin, k_end;
    int k_tiles;  // K = 0: none, the tile is bias + ReLU only
};
template <int BM, int BN, int BK>
__device__ __forceinline__ WgmmaWork wgmma_work(int64 M, int64 N, int64 K, int k_tiles_per_split, int raster_group) {
    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    WgmmaWork w;
    w.m0 = tile_m * BM;
    w.n0 = tile_n * BN;
    w.k_begin = int64(blockIdx.z) * k_tiles_per_split * BK;
    w.k_end = min(K, w.k_begin + int64(k_tiles_per_split) * BK);
    w.k_tiles = int((w.k_end - w.k_begin + BK - 1) / BK);
    return w;
}

// The dynamic shared memory of the wgmma kernels from its first 1024-byte boundary (the
// 128-byte swizzle repeats every 1024 bytes; the hosts add 1 KB for it).
template <typename T>
__device__ __forceinline__ T* aligned_stages(unsigned char* smem_raw) {
    return reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
}

// A stage holds x as [BM][BK] (BK / 64 column atoms, kmajor_atom_offset), then the weight:
// K-major as [BN][BK] the same way, N-major as BN / 64 atoms of [BK][64] (nmajor_atom_offset).
// This warpgroup's wgmmas of one stage (landed and visible to the async proxy), one group.
template <typename T, int BM, int BN, int BK, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_stage(float (&acc)[BN / 2], const T* stage, int warpgroup) {
    const T* sb = stage + BM * BK;
    // This warpgroup's 64 rows of x in the first column atom.
    const unsigned long long desc_a = sw128_kmajor_desc(stage + warpgroup * 64 * WGMMA_ATOM_N);
    const unsigned long long desc_b = B_KMAJOR ? sw128_kmajor_desc(sb) : sw128_nmajor_desc<BK>(sb);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        // k16 steps (descriptor addresses in 16-byte units): K-major tiles as
        // kmajor_k16_step; the N-major B two 1024-byte groups of 8 k rows further.
        const unsigned b_step = B_KMAJOR ? kmajor_k16_step<BN>(kk) : kk * (2 * 1024 / 16);
        Wgmma<BN, T>::template ss<B_KMAJOR ? 0 : 1>(acc, desc_a + kmajor_k16_step<BM>(kk), desc_b + b_step, 1);
    }
    wgmma_commit();
}

// The epilogue of both wgmma kernels, called by the THREADS consumer threads (the first of
// the block): split-K through slots when gridDim.z > 1 (`sync_threads` as reduce_split_slots),
// then bias + ReLU and the only store. wgmma accumulator layout: warp q of a warpgroup owns
// rows 16q..16q+15 of its 64, as mma.sync m16n8 tiles along N: d[4j + r] at row lane/4 +
// 8(r/2), column 8j + 2(lane%4) + r%2.
template <typename T, int BN, int THREADS>
__device__ __forceinline__ void wgmma_store(float (&acc)[BN / 2], T* __restrict__ out, const T* __restrict__ bias,
                                            int64 bias_stride, float* __restrict__ workspace,
                                            int* __restrict__ counters, const WgmmaWork& work, int64 M, int64 N,
                                            int paired_store, int sync_threads) {
    const int warpgroup = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float(&tiles)[1][BN / 8][4] = reinterpret_cast<float(&)[1][BN / 8][4]>(acc);
    if (gridDim.z > 1 && !reduce_split_slots<THREADS>(tiles, workspace, counters, sync_threads)) return;
    const int64 row_base = work.m0 + warpgroup * 64 + warp * 16 + (lane >> 2), col_base = work.n0 + 2 * (lane & 3);
    store_bias_relu<T>(tiles, out, bias, bias_stride, row_base, col_base, M, N, paired_store);
}
}  // namespace linear
}  // namespace cufuse

// Grid: (tiles_m * tiles_n, 1, splits). Block: BM / 64 warpgroups (2 x BM threads), tile
// BM x BN x BK (BK 64 or 128: a k tile per barrier), STAGES-deep cp.async pipeline
// (dynamic shared memory STAGES x (BM + BN) x 2 BK bytes + 1 KB to align the stages to
// 1024 bytes). Operand rules, B_KMAJOR, split-K (k tiles per split, counters) as
// linear_relu_mma; split-K always reduces through slots.
// PENDING wgmma groups (k tiles) stay in flight while the next stage is waited for, so the
// tensor cores run across the barrier; those stages cannot be refilled yet, so the loads
// run STAGES - 1 - PENDING tiles ahead (the trade: MMA overlap against load depth).
// MIN_BLOCKS: blocks per SM the registers must allow (__launch_bounds__).
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, int MIN_BLOCKS, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM, MIN_BLOCKS)
linear_relu_wgmma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                  float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                  int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group, int paired_store) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ACC = BN / 2;
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    static_assert(BM == 64 || BM == 128, "one or two warpgroups of 64 rows");
    constexpr int AHEAD = STAGES - 1 - PENDING;  // k tiles whose loads are in flight
    static_assert(PENDING >= 0 && AHEAD >= 1, "at least one tile loads ahead");
    using Tile = MmaTile<T, BM, BN, BK, BM / 64, 4, STAGES, true>;  // stage sizes and 2 x BM threads
    extern __shared__ unsigned char smem_raw[];
    T* smem = aligned_stages<T>(smem_raw);

    const WgmmaWork work = wgmma_work<BM, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    const int warpgroup = threadIdx.x >> 7;

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;

    // k tile kt into its stage (an empty group past the split keeps the wait counts uniform at the tail).
    auto load = [&](int kt) {
        if (kt < work.k_tiles) {
            T* stage = smem + (kt % STAGES) * Tile::stage_elems;
            const int64 k0 = work.k_begin + int64(kt) * BK;
            wgmma_load_kmajor<BM, BK, Tile::threads>(stage, x, work.m0, M, k0, work.k_end, ldx, threadIdx.x);
            if constexpr (B_KMAJOR)
                wgmma_load_kmajor<BN, BK, Tile::threads>(stage + Tile::a_elems, w, work.n0, N, k0, work.k_end, ldw,
                                                         threadIdx.x);
            else
                wgmma_load_b_nmajor<T, BN, BK, Tile::threads>(stage + Tile::a_elems, w, work.n0, k0, N, work.k_end,
                                                              ldw, threadIdx.x);
        }
        cp_async_commit();
    };

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) load(s);
    for (int kt = 0; kt < work.k_tiles; ++kt) {
        cp_async_wait<AHEAD - 1>();
        fence_proxy_async_shared();
        // Stage kt landed for all; every warp's wgmmas up to tile kt - 1 - PENDING are done,
        // and that is the stage the next load refills.
        __syncthreads();
        load(kt + AHEAD);
        wgmma_stage<T, BM, BN, BK, B_KMAJOR>(acc, smem + (kt % STAGES) * Tile::stage_elems, warpgroup);
        wgmma_wait<PENDING>();
#pragma unroll
        for (int i = 0; i < ACC; ++i) pin(acc[i]);
    }
    cp_async_wait<0>();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) pin(acc[i]);
    wgmma_store<T, BN, Tile::threads>(acc, out, bias, bias_stride, workspace, counters, work, M, N, paired_store, 0);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

namespace cufuse {
namespace linear {
// The TMA ring of the TMA-fed kernels (linear_relu_wgmma_tma, linear_relu_swap_tma). Block:
// CONSUMERS threads (consumer warpgroups), then one producer warp. A stage holds x as
// [XROWS][BK] (BK / 64 boxes of [XROWS][64]), then the weight: K-major as [BN][BK] (BK / 64
// boxes of [BN][64]), N-major as BN / 64 boxes of [BK][64]; all 128-byte swizzled by the
// tensor maps, which is the layout the wgmma descriptors read (kmajor_atom_offset /
// nmajor_atom_offset), zero-filled past M, N and K. One producer thread waits for stage
// kt % STAGES's "empty" mbarrier, announces the stage's bytes on its "full" mbarrier and
// issues the boxes; the producer warp leaves after its last tile. Consumers wait for "full",
// issue the stage's wgmmas (`stage_mma(acc, stage)`: one commit group), and once
// wgmma.wait_group says tile kt - PENDING's MMAs are done, lane 0 of each consumer warp
// arrives on that stage's "empty" (count: consumer warps); no block-wide barrier after the
// mbarrier init. Returns false in the producer warp, true in the consumers with acc complete.
// Shared memory: STAGES stages at `smem` (1024-byte aligned), then 2 x STAGES mbarriers.
template <typename T, int XROWS, int BN, int BK, int STAGES, int PENDING, int CONSUMERS, bool B_KMAJOR,
          bool L2_HINTS = false, int ACC, typename StageMma>
__device__ __forceinline__ bool tma_wgmma_ring(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                               const WgmmaWork& work, T* smem, float (&acc)[ACC],
                                               StageMma stage_mma) {
    constexpr int X_ELEMS = XROWS * BK, STAGE_ELEMS = (XROWS + BN) * BK;
    constexpr unsigned STAGE_BYTES = STAGE_ELEMS * sizeof(T);
    static_assert(BK % 64 == 0 && XROWS % 8 == 0 && BN % 64 == 0, "whole 128-byte swizzle atoms");
    static_assert(PENDING >= 0 && PENDING < STAGES, "a stage is released PENDING tiles after its wgmmas");
    unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_ELEMS);
    unsigned long long* empty = full + STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + s, 1);
            mbarrier_init(empty + s, CONSUMERS / 32);
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    if (threadIdx.x >= CONSUMERS) {  // the producer warp
        if (threadIdx.x == CONSUMERS) {
            // L2_HINTS (the weight streams): the weight is read once, so L2 may evict it first;
            // x is read by every block, so L2 keeps it (run S8-2: +2-5 % at 1-64 rows).
            const unsigned long long x_policy = L2_HINTS ? l2_policy_evict_last() : 0;
            const unsigned long long w_policy = L2_HINTS ? l2_policy_evict_first() : 0;
            auto load_x = [&](void* dst, int inner, int outer, unsigned long long* bar) {
                if constexpr (L2_HINTS)
                    tma_load_2d(dst, x_map, inner, outer, bar, x_policy);
                else
                    tma_load_2d(dst, x_map, inner, outer, bar);
            };
            auto load_w = [&](void* dst, int inner, int outer, unsigned long long* bar) {
                if constexpr (L2_HINTS)
                    tma_load_2d(dst, w_map, inner, outer, bar, w_policy);
                else
                    tma_load_2d(dst, w_map, inner, outer, bar);
            };
            for (int kt = 0; kt < work.k_tiles; ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(empty + s, ((kt / STAGES) & 1) ^ 1);  // round 0 passes at once
                T* stage = smem + s * STAGE_ELEMS;
                mbarrier_arrive_expect_tx(full + s, STAGE_BYTES);
                const int k0 = int(work.k_begin) + kt * BK;
#pragma unroll
                for (int a = 0; a < BK / 64; ++a)
                    load_x(stage + a * XROWS * 64, k0 + 64 * a, int(work.m0), full + s);
                if constexpr (B_KMAJOR) {
#pragma unroll
                    for (int a = 0; a < BK / 64; ++a)
                        load_w(stage + X_ELEMS + a * BN * 64, k0 + 64 * a, int(work.n0), full + s);
                } else {
#pragma unroll
                    for (int j = 0; j < BN / 64; ++j)
                        load_w(stage + X_ELEMS + j * BK * 64, int(work.n0) + 64 * j, k0, full + s);
                }
            }
        }
        return false;
    }

    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    for (int kt = 0; kt < work.k_tiles; ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait(full + s, (kt / STAGES) & 1);
        stage_mma(acc, smem + s * STAGE_ELEMS);
        wgmma_wait<PENDING>();
#pragma unroll
        for (int i = 0; i < ACC; ++i) pin(acc[i]);
        if (kt >= PENDING && lane == 0) mbarrier_arrive(empty + (kt - PENDING) % STAGES);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) pin(acc[i]);
    return true;
}

// ---------------------------------------------------------------------------------------
// The swapped-operand stream for M <= 64 (kind "swap_tma"): out^T = W^T x^T, so the weight's
// columns are wgmma's M (64 per consumer warpgroup) and x's MX rows (M rounded up to 8, 16 or
// 64) its N: an m64nMXk16 chain per warpgroup, and the x box is MX rows (for M <= 16 no
// zero-filled rows past round_up(M, 8) to fetch, where the straight kernel's box is 64). A = the weight tile: K-major for an (N, K).T weight
// (rows of n along k, the kmajor descriptor), M-major for a row-major (K, N) weight (n
// contiguous: the nmajor descriptor with imm-trans-a = 1, which wgmma allows for 16-bit
// shared-memory A). B = x's [MX][BK] tile, K-major.
template <typename T, int MX, int BN, int BK, bool B_KMAJOR>
__device__ __forceinline__ void swap_wgmma_stage(float (&acc)[MX / 2], const T* stage, int warpgroup) {
    const T* sw = stage + MX * BK;
    // This warpgroup's 64 weight columns: rows of the first column atom (K-major) or the n atom.
    const unsigned long long desc_w = B_KMAJOR ? sw128_kmajor_desc(sw + warpgroup * 64 * WGMMA_ATOM_N)
                                               : sw128_nmajor_desc<BK>(sw + warpgroup * BK * WGMMA_ATOM_N);
    const unsigned long long desc_x = sw128_kmajor_desc(stage);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        // k16 steps as in wgmma_stage: the M-major A two 1024-byte groups of 8 k rows further.
        const unsigned w_step = B_KMAJOR ? kmajor_k16_step<BN>(kk) : kk * (2 * 1024 / 16);
        Wgmma<MX, T>::template ss<0, B_KMAJOR ? 0 : 1>(acc, desc_w + w_step, desc_x + kmajor_k16_step<MX>(kk), 1);
    }
    wgmma_commit();
}

// Bias + ReLU and the transposed store of the swapped kernel's accumulators: d[4j + r] of
// warp q of warpgroup g is out^T row n = 64g + 16q + lane/4 + 8(r/2), column m = 8j +
// 2(lane%4) + r%2 (the m64nMX fragment), i.e. out[m, n]. Split-K through slots first, as
// wgmma_store (THREADS consumer threads, which meet on their own named barrier). Staging the
// tile through shared memory for 16-byte row stores measured no faster (run S8-4).
template <typename T, int MX, int THREADS>
__device__ __forceinline__ void swap_store(float (&acc)[MX / 2], T* __restrict__ out, const T* __restrict__ bias,
                                           int64 bias_stride, float* __restrict__ workspace,
                                           int* __restrict__ counters, const WgmmaWork& work, int64 M, int64 N) {
    const int warpgroup = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float(&tiles)[1][MX / 8][4] = reinterpret_cast<float(&)[1][MX / 8][4]>(acc);
    if (gridDim.z > 1 && !reduce_split_slots<THREADS>(tiles, workspace, counters, THREADS)) return;
    const int64 n_base = work.n0 + warpgroup * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < MX / 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int64 m = 8 * j + 2 * (lane & 3) + (r & 1), n = n_base + 8 * (r >> 1);
            if (m < M && n < N) out[m * N + n] = bias_relu<T>(tiles[0][j][r], bias, bias_stride, n);
        }
}
}  // namespace linear
}  // namespace cufuse

// The wgmma kernel fed by TMA (kind "wgmma_tma"): same tiles, stage layout, wgmmas and
// epilogue as linear_relu_wgmma, but a producer warp loads the stages (tma_wgmma_ring, x
// boxes of BM rows). Block: BM / 64 consumer warpgroups, then one producer warp (2 x BM + 32
// threads). The loads run up to STAGES - PENDING tiles ahead; the split-K epilogue syncs the
// consumers only (named barrier).
// Parameters: x_map over x as {K, M} (row stride ldx), w_map over the weight as {K, N}
// (K-major) or {N, K} (N-major), both with 128-byte swizzle and boxes of 64 inner
// elements (cufuse/_tma.py; box rows BM, BN or BK). Dynamic shared memory: the stages of
// linear_relu_wgmma (with its 1 KB of alignment), then 2 x STAGES mbarriers.
template <typename T, int BM, int BN, int BK, int STAGES, int PENDING, int MIN_BLOCKS, bool B_KMAJOR>
__global__ void __launch_bounds__(2 * BM + 32, MIN_BLOCKS)
linear_relu_wgmma_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                      const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ workspace,
                      int* __restrict__ counters, int64 M, int64 N, int64 K, int64 bias_stride, int k_tiles_per_split,
                      int raster_group, int paired_store) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ACC = BN / 2, CONSUMERS = 2 * BM;
    static_assert(BK == 64 || BK == 128, "K-major tiles as one or two 128-byte swizzle atoms per row");
    static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
    extern __shared__ unsigned char smem_raw[];
    T* smem = aligned_stages<T>(smem_raw);
    const WgmmaWork work = wgmma_work<BM, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    const int warpgroup = threadIdx.x >> 7;
    float acc[ACC];
    const bool consumer = tma_wgmma_ring<T, BM, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR>(
        x_map, w_map, work, smem, acc,
        [&](float(&a)[ACC], const T* stage) { wgmma_stage<T, BM, BN, BK, B_KMAJOR>(a, stage, warpgroup); });
    if (!consumer) return;
    wgmma_store<T, BN, CONSUMERS>(acc, out, bias, bias_stride, workspace, counters, work, M, N, paired_store,
                                  CONSUMERS);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// The swapped-operand TMA kernel (kind "swap_tma", M <= MX; see swap_wgmma_stage). Grid:
// (ceil(N / BN), 1, splits); block: BN / 64 consumer warpgroups + one producer warp (2 x BN +
// 32 threads). x boxes of MX rows, weight boxes as linear_relu_wgmma_tma's (x_map: boxes of
// 64 x MX; w_map: 64 x BN K-major, 64 x BK N-major). Split-K through slots (BN x MX floats a
// block) and the arguments otherwise as linear_relu_wgmma_tma (no paired store: the output
// is written transposed, one element a lane). BK: 64, 128 or 256 k a stage (BK / 64 boxes
// per operand row; 256 or 512 contiguous bytes of an (N, K) weight row at once). L2_HINTS:
// the TMA loads carry L2 eviction policies (tma_wgmma_ring). Dynamic shared memory: STAGES
// x (MX + BN) x BK elements + 1 KB of alignment + 2 x STAGES mbarriers.
template <typename T, int BN, int MX, int BK, int STAGES, bool B_KMAJOR, bool L2_HINTS>
__global__ void __launch_bounds__(2 * BN + 32, 1)
linear_relu_swap_tma(const __grid_constant__ TmaDescriptor x_map, const __grid_constant__ TmaDescriptor w_map,
                     const T* __restrict__ bias, T* __restrict__ out, float* __restrict__ workspace,
                     int* __restrict__ counters, int64 M, int64 N, int64 K, int64 bias_stride, int k_tiles_per_split,
                     int raster_group) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int CONSUMERS = 2 * BN;
    constexpr int PENDING = 1;  // one k tile's wgmmas in flight while the next stage is awaited
    static_assert(BN == 64 || BN == 128, "one or two consumer warpgroups of 64 weight columns");
    static_assert(MX == 8 || MX == 16 || MX == 64, "x rows padded to 8, 16 or 64: wgmma's N");
    static_assert(BK == 64 || BK == 128 || BK == 256, "one to four 128-byte swizzle atoms of k per row");
    extern __shared__ unsigned char smem_raw[];
    T* smem = aligned_stages<T>(smem_raw);
    const WgmmaWork work = wgmma_work<MX, BN, BK>(M, N, K, k_tiles_per_split, raster_group);
    const int warpgroup = threadIdx.x >> 7;
    float acc[MX / 2];
    const bool consumer = tma_wgmma_ring<T, MX, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR, L2_HINTS>(
        x_map, w_map, work, smem, acc,
        [&](float(&a)[MX / 2], const T* stage) { swap_wgmma_stage<T, MX, BN, BK, B_KMAJOR>(a, stage, warpgroup); });
    if (!consumer) return;
    swap_store<T, MX, CONSUMERS>(acc, out, bias, bias_stride, workspace, counters, work, M, N);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
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
    begin_dependent_grid();
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
// Weight-streaming path for M <= ROWS (a few rows; 16-byte aligned operands as for the
// tensor-core kernels; 16-bit types, float32 and float64): a matrix-vector product bound by
// the weight's bytes. The weight goes straight from DRAM to registers with 16-byte
// streaming loads (VEC = 16 / sizeof(T) elements), many in flight per thread (no shared-
// memory staging: nothing is reused), FMAs in accum_t<T> (float32; float64 for float64:
// true float32 / float64 products, no tensor-core rounding).
//  * B_KMAJOR (w + n * ldw + k): a warp owns gemv_kmajor_warp_cols<T, ROWS>() columns and a
//    1/GEMV_KPARTS share of K (lane l reads k = VEC l + 32 VEC i + ...); shuffles and shared
//    memory reduce. No split-K. Grid: ceil(N / (GEMV_WARPS / GEMV_KPARTS x warp columns)), 1.
//  * row-major (w + k * ldw + n): lane l owns VEC consecutive columns of the block's 32 VEC;
//    the 8 warps take turns at runs of consecutive rows of the block's k range (x read as
//    16-byte vectors along k) and meet in shared memory, one x row at a time. With splits > 1 (gridDim.y; not float64, whose sums the float32
//    workspace would round) the k ranges meet in the float32 workspace and the last block of
//    a column range finishes, as in linear_relu_mma. Grid: ceil(N / (32 VEC)), splits.
namespace cufuse {
namespace linear {
constexpr int GEMV_THREADS = 256, GEMV_WARPS = GEMV_THREADS / 32;
constexpr int GEMV_KPARTS = 4;      // K-major: warps sharing a column group
constexpr int GEMV_ROW_LOADS = 8;   // row-major: weight rows in flight per thread (4 past 32 accumulator words)
// K-major: columns per warp, so that a thread's ROWS x columns accumulators stay within 64
// 32-bit registers (1 to 8; cufuse/_configs/linear.py GemvTile.columns_per_block mirrors it).
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
}  // namespace linear
}  // namespace cufuse

template <typename T, int ROWS, bool B_KMAJOR>
__global__ void __launch_bounds__(GEMV_THREADS, ROWS * sizeof(accum_t<T>) >= 16 ? 1 : 2)  // many rows: 255 registers
linear_relu_gemv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 float* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K, int64 ldx,
                 int64 ldw, int64 bias_stride, int64 k_rows_per_split) {
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
            out[r * N + n] = bias_relu<T>(v, bias, bias_stride, n);
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
                if (splits == 1) out[r * N + n0 + c] = bias_relu<T>(v, bias, bias_stride, n0 + c);
                else atomicAdd(workspace + r * N + n0 + c, float(v));
            }
        }
        if (splits == 1) return;
        // Split-K: the last block of this column range to arrive finishes it (see linear_relu_mma).
        if (!last_to_arrive(counters + blockIdx.x, splits)) return;
        for (int e = threadIdx.x; e < rows * COLS; e += GEMV_THREADS) {
            const int r = e / COLS, c = e % COLS;
            if (n0 + c >= N) continue;
            float* cell = workspace + r * N + n0 + c;
            out[r * N + n0 + c] = bias_relu<T>(__ldcg(cell), bias, bias_stride, n0 + c);
            *cell = 0.f;
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
}

// ---------------------------------------------------------------------------------------
// float32 and float64 on tensor cores: `linear_relu_wide<T>`, one pipeline for both.
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
// multi-stage pipeline of linear_relu_mma: x as [BM][BK + 4], a K-major weight as
// [BN][BK + 4], a row-major weight as [BK][BN + 32 bytes] (elements). float32: an 8x8
// b16 ldmatrix on fp32 rows is 8 rows x 4 floats, thread l getting float l % 4 of row
// l / 4: exactly the tf32 A fragment, and the B fragment of a K-major weight; rows BK + 4
// floats apart put the 8 rows in 8 distinct 16-byte bank groups. A row-major weight is
// read with scalar loads: rows BN + 8 floats apart put the fragment's 4 k rows x 8 n
// columns in 32 distinct banks. float64 fragments are scalar 8-byte loads, served per
// half warp (16 lanes, 16 8-byte banks): 4 rows x 4 doubles of x or a K-major weight at
// rows BK + 4 doubles apart (4 banks apart), 4 k rows x 4 doubles of a row-major weight
// at rows BN + 4 doubles apart: 16 distinct banks each.
namespace cufuse {
namespace linear {

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
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, bool B_KMAJOR>
__device__ __forceinline__ void wide_compute_stage(
    const float* sa, const float* sb, int warp_row, int warp_col, int lane,
    float (&acc)[WideTile<float, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>::mi][WideTile<float, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>::ni][4]) {
    using Tile = WideTile<float, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>;
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
// float64 shapes), m8n8k4 before. acc keeps the m16n8 layout of store_bias_relu; an m8n8k4
// tile 2i + h of the warp is acc[i][j][2h], acc[i][j][2h + 1] (rows 16i + 8h + g,
// columns 8j + 2t, 8j + 2t + 1).
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, bool B_KMAJOR>
__device__ __forceinline__ void wide_compute_stage(
    const double* sa, const double* sb, int warp_row, int warp_col, int lane,
    double (&acc)[WideTile<double, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>::mi][WideTile<double, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>::ni][4]) {
    using Tile = WideTile<double, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>;
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

}  // namespace linear
}  // namespace cufuse

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN, STAGES-deep cp.async pipeline
// (dynamic shared memory STAGES x stage_elems elements); split z covers k tiles
// [z * k_tiles_per_split, (z + 1) * k_tiles_per_split) and, with splits > 1, meets the
// others through slots of accumulators (reduce_split_slots: `workspace` tiles x splits x
// BM x BN values of accum_t<T>, `counters` one zero int per tile). T is float (3xTF32) or
// double. Requires (checked on the host): x rows 16-byte aligned with unit k stride, K a
// multiple of 16 bytes' elements; the weight's contiguous axis 16-byte aligned and, when
// it is N, N a multiple of them too. B_KMAJOR as in linear_relu_mma.
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_relu_wide(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                 accum_t<T>* __restrict__ workspace, int* __restrict__ counters, int64 M, int64 N, int64 K,
                 int64 ldx, int64 ldw, int64 bias_stride, int k_tiles_per_split, int raster_group) {
    begin_dependent_grid();
    using Tile = WideTile<T, BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);

    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    const int64 m0 = tile_m * BM, n0 = tile_n * BN;
    const int64 k_begin = int64(blockIdx.z) * k_tiles_per_split * BK;
    const int64 k_end = min(K, k_begin + int64(k_tiles_per_split) * BK);
    const int k_tiles = int((k_end - k_begin + BK - 1) / BK);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_row = (warp / WARPS_N) * Tile::warp_m, warp_col = (warp % WARPS_N) * Tile::warp_n;

    accum_t<T> acc[Tile::mi][Tile::ni][4];
    zero_accumulators(acc);

    auto load = [&](int kt) {
        T* stage = smem + (kt % STAGES) * Tile::stage_elems;
        if (kt < k_tiles) {
            const int64 k0 = k_begin + int64(kt) * BK;
            load_tile_wide<T, BM, BK, Tile::a_ld, Tile::threads>(stage, x, m0, k0, M, k_end, ldx);
            if constexpr (B_KMAJOR)
                load_tile_wide<T, BN, BK, Tile::b_ld, Tile::threads>(stage + Tile::a_elems, w, n0, k0, N, k_end, ldw);
            else
                load_tile_wide<T, BK, BN, Tile::b_ld, Tile::threads>(stage + Tile::a_elems, w, k0, n0, k_end, N, ldw);
        }
        cp_async_commit();  // an empty group keeps the wait counts uniform at the tail
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) load(s);
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for everyone; stage kt-1 is free to overwrite
        load(kt + STAGES - 1);
        const T* stage = smem + (kt % STAGES) * Tile::stage_elems;
        wide_compute_stage<BM, BN, BK, WARPS_M, WARPS_N, B_KMAJOR>(stage, stage + Tile::a_elems, warp_row, warp_col,
                                                                   lane, acc);
    }
    cp_async_wait<0>();

    if (gridDim.z > 1 && !reduce_split_slots<Tile::threads>(acc, workspace, counters)) return;
    // Accumulator (i, j, r) sits at row warp_row + 16i + lane/4 + 8(r/2), column warp_col + 8j + 2(lane%4) + r%2.
    store_bias_relu<T>(acc, out, bias, bias_stride, m0 + warp_row + (lane >> 2), n0 + warp_col + 2 * (lane & 3), M, N,
                       /*paired_store=*/0);
}

// ---------------------------------------------------------------------------------------
// float64 on sm_90 with the fragment loads pipelined: `linear_relu_dmma`.
//
// linear_relu_wide loads a stage's fragments after the stage's barrier and its cp.async
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
//    unpadded rows aligned to 128 bytes (the padded rows of linear_relu_wide cost 12 % excess
//    shared-memory wavefronts, ncu), no bank conflicts in the 64-bit fragment loads (per half
//    warp) or in the cp.async stores (per quarter warp);
//  * cp.async of whole tiles inside M and N and K without predicates or bounds math; rows
//    past M or N and k past K (zero-filled) only in edge tiles.
namespace cufuse {
namespace linear {

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

}  // namespace linear
}  // namespace cufuse

// Grid: (tiles_m * tiles_n, 1, splits). Block tile BM x BN x 16, STAGES-deep cp.async
// pipeline (dynamic shared memory STAGES x (BM + BN) x 16 doubles), DMMA m16n8k{MMA_K}; sm_90
// only (the body is a trap before). Requirements, arguments and split-K as linear_relu_wide.
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int MMA_K, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, WARPS_M * WARPS_N <= 4 ? 2 : 1)
linear_relu_dmma(const double* __restrict__ x, const double* __restrict__ w, const double* __restrict__ bias,
                 double* __restrict__ out, double* __restrict__ workspace, int* __restrict__ counters, int64 M,
                 int64 N, int64 K, int64 ldx, int64 ldw, int64 bias_stride, int k_tiles_per_split,
                 int raster_group) {
    begin_dependent_grid();
#if __CUDA_ARCH__ >= 900
    using Tile = DmmaTile<BM, BN, WARPS_M, WARPS_N, MMA_K, B_KMAJOR>;
    constexpr int MI = Tile::mi, NI = Tile::ni, BK = Tile::bk, GROUPS = Tile::groups;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    double* smem = reinterpret_cast<double*>(smem_raw);

    const int64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int64 tile_m, tile_n;
    raster_tile(blockIdx.x, tiles_m, tiles_n, raster_group, tile_m, tile_n);
    const int64 m0 = tile_m * BM, n0 = tile_n * BN;
    const bool tile_inside = m0 + BM <= M && n0 + BN <= N;
    const int64 k_begin = int64(blockIdx.z) * k_tiles_per_split * BK;
    const int64 k_end = min(K, k_begin + int64(k_tiles_per_split) * BK);
    const int k_tiles = int((k_end - k_begin + BK - 1) / BK);
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
    store_bias_relu<double>(acc, out, bias, bias_stride, m0 + warp_row + (lane >> 2), n0 + warp_col + 2 * (lane & 3),
                            M, N, /*paired_store=*/0);
#else
    __trap();  // DMMA m16n8k8 / m16n8k16 need sm_90
#endif
}
