// Attention forward: softmax(q k^T * scale) v without the score matrix.
//
// attention_fwd_mma   FlashAttention-2 style, f16/bf16 on tensor cores (mma.sync m16n8k16).
//                     One block per (query tile, key split, batch); K/V tiles stream through
//                     a STAGES-deep cp.async ring; S and P stay in registers; online softmax
//                     in the log2 domain. With splits > 1 it writes normalised partial
//                     (O, lse) in float32, merged by attention_merge.
// attention_fwd_wgmma Hopper (sm_90a) prefill on warpgroup MMA, head dims up to 64 / 128,
//                     f16/bf16, one key split; same contract otherwise (FA3's structure
//                     without TMA and warp specialisation).
// attention_fwd_simt  float32/float64: one warp per query row, exact (no tensor cores).
// attention_merge     log-sum-exp merge of the split partials.
//
// Shapes: q (batch, nq, d), k (batch, nk, d), v (batch, nk, dv), out C-contiguous
// (batch, nq, dv), lse (batch, nq). The batch index is decomposed into up to four
// collapsed leading dims (BatchLayout), each tensor with its own strides (0 = broadcast),
// so MQA/GQA and strided views need no copy. All offsets are 64-bit.
#include "wgmma.cuh"

namespace cufuse {
namespace attention {

constexpr float kLn2 = 0.6931471805599453f;

// Flat batch index -> element offsets of q, k, v. Dims are outermost first; size0 is
// implicit (the grid covers it). Passed as 15 scalar kernel arguments (BATCH_LAYOUT_PARAMS),
// the argument kinds every launcher handles.
struct BatchLayout {
    int64 size1, size2, size3;
    int64 q0, q1, q2, q3;
    int64 k0, k1, k2, k3;
    int64 v0, v1, v2, v3;

    __device__ __forceinline__ void offsets(int64 b, int64& q, int64& k, int64& v) const {
        const int64 i3 = b % size3;
        b /= size3;
        const int64 i2 = b % size2;
        b /= size2;
        const int64 i1 = b % size1;
        const int64 i0 = b / size1;
        q = i0 * q0 + i1 * q1 + i2 * q2 + i3 * q3;
        k = i0 * k0 + i1 * k1 + i2 * k2 + i3 * k3;
        v = i0 * v0 + i1 * v1 + i2 * v2 + i3 * v3;
    }
};

// Row and column strides (elements) of one operand, and whether 16-byte cp.async applies:
// unit column stride, cols % 8 == 0, row/batch strides % 8 == 0, 16-byte aligned base.
struct Operand {
    int64 row_stride, col_stride;
    int cols;
    bool vec16;
};

#define BATCH_LAYOUT_PARAMS                                                                       \
    int64 size1, int64 size2, int64 size3, int64 q0, int64 q1, int64 q2, int64 q3, int64 k0, int64 k1, \
        int64 k2, int64 k3, int64 v0, int64 v1, int64 v2, int64 v3
#define BATCH_LAYOUT BatchLayout{size1, size2, size3, q0, q1, q2, q3, k0, k1, k2, k3, v0, v1, v2, v3}

enum Flags : int { kCausal = 1, kWriteLse = 2, kVecQ = 4, kVecK = 8, kVecV = 16 };

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// cp.async of rows [row0, row_end) x columns [0, cols) of g (unit column stride, 16-byte
// aligned rows, row_stride elements apart) into a ROWS x HD shared tile whose element (r, c)
// sits at smem + place(r, c); rows and columns outside are zero-filled.
template <typename T, int ROWS, int HD, int THREADS, typename Place>
__device__ __forceinline__ void load_rows_16b(T* smem, const T* g, int64 row_stride, int cols, int row0, int row_end,
                                              Place place) {
    constexpr int kChunks = HD / 8;
    for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
        const int r = idx / kChunks, c = (idx % kChunks) * 8;
        const bool pred = row0 + r < row_end && c < cols;
        const T* src = pred ? g + (row0 + r) * row_stride + c : g;
        cp_async_16(smem + place(r, c), src, pred);
    }
}

// ROWS x HD tile of rows [row0, row_end) into shared memory (row pitch HD + 8 elements,
// which makes every 8-row ldmatrix phase hit 8 distinct 16-byte bank groups). Columns at
// or beyond op.cols and rows at or beyond row_end are zero: that is the head-dim padding.
template <typename T, int ROWS, int HD, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* g, const Operand& op, int row0, int row_end) {
    constexpr int kPitch = HD + 8;
    if (op.vec16) {
        load_rows_16b<T, ROWS, HD, THREADS>(smem, g, op.row_stride, op.cols, row0, row_end,
                                            [](int r, int c) { return r * kPitch + c; });
    } else {
        const T zero = from_accum<T>(0.f);
#pragma unroll 1
        for (int idx = threadIdx.x; idx < ROWS * HD; idx += THREADS) {
            const int r = idx / HD, c = idx % HD;
            const bool pred = row0 + r < row_end && c < op.cols;
            smem[r * kPitch + c] = pred ? g[(row0 + r) * op.row_stride + c * op.col_stride] : zero;
        }
    }
}

// `threads` threads (this one is `tid`) copy `rows` x `cols` elements from shared memory
// (element (r, c) at src + place(r, c), a Chunk's elements contiguous) to the contiguous rows
// of dst, Chunk (sizeof(Chunk) / sizeof(T) elements, dividing cols) per thread and step:
// consecutive threads take consecutive chunks, so each store instruction is coalesced.
template <typename Chunk, typename T, typename Place>
__device__ __forceinline__ void copy_rows(T* dst, const T* src, Place place, int rows, int cols, int tid, int threads) {
    constexpr int kElems = sizeof(Chunk) / sizeof(T);
    const int chunks = cols / kElems;
    for (int idx = tid; idx < rows * chunks; idx += threads) {
        const int r = idx / chunks, c = (idx % chunks) * kElems;
        *reinterpret_cast<Chunk*>(dst + static_cast<int64>(r) * cols + c) =
            *reinterpret_cast<const Chunk*>(src + place(r, c));
    }
}

// Each warp owns MT 16-row slices of the BLOCK_M = 16 * WARPS * MT query rows of a block
// and keeps its O accumulator (MT x 16 x HD) in registers; the BN keys of a K/V tile are
// shared by all warps. With Q_IN_REGS the Q fragments stay in registers for the whole key
// loop, else they are re-read from shared memory per tile (ldmatrix: fewer registers).
// MIN_BLOCKS (__launch_bounds__) caps registers so that that many blocks share an SM.
// SKIP_PAD_COLS skips the MMA steps wholly beyond d / dv at run time; without it the loops
// are branch-free (the padded columns are zero in shared memory, so the result is the same)
// and the scheduler can overlap ldmatrix of one step with the MMAs of the previous one.
// PIPELINE_QK issues the scores of the next key tile before the softmax of the current one
// (FA3's intra-warp overlap, on mma.sync), so the tensor pipe is busy during the softmax.
template <typename T, int HD, int WARPS, int MT, int BN, int STAGES, int MIN_BLOCKS, bool Q_IN_REGS,
          bool SKIP_PAD_COLS, bool PIPELINE_QK>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    attention_fwd_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_o,
                      float* __restrict__ partial_lse, int nq, int nk, int d, int dv, int q_tiles, int splits,
                      int keys_per_split, float scale_log2, int flags, int64 q_row, int64 q_col,
                      int64 k_row, int64 k_col, int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS) {
    static_assert(HD % 32 == 0 && BN % 16 == 0 && STAGES >= (PIPELINE_QK ? 3 : 2), "tile shape");
    constexpr int kThreads = WARPS * 32;
    constexpr int kBlockM = 16 * WARPS * MT;
    constexpr int kPitch = HD + 8;
    constexpr bool kQInRegs = Q_IN_REGS;
    const float kNegInf = neg_infinity<float>();

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* q_s = reinterpret_cast<T*>(smem_raw);
    T* k_s = q_s + kBlockM * kPitch;
    T* v_s = k_s + STAGES * BN * kPitch;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bool causal = flags & kCausal;

    // Block -> (query tile, split, batch); query tile fastest so the blocks running at once
    // share K/V in L2. Causal runs the longest (last) query tiles first.
    int64 bid = blockIdx.x;
    int q_tile = static_cast<int>(bid % q_tiles);
    bid /= q_tiles;
    const int split = static_cast<int>(bid % splits);
    const int64 batch = bid / splits;
    const int64 batch_count = gridDim.x / (static_cast<int64>(q_tiles) * splits);
    if (causal) q_tile = q_tiles - 1 - q_tile;
    const int m0 = q_tile * kBlockM;

    int64 q_off, k_off, v_off;
    BATCH_LAYOUT.offsets(batch, q_off, k_off, v_off);
    const Operand q_op{q_row, q_col, d, (flags & kVecQ) != 0};
    const Operand k_op{k_row, k_col, d, (flags & kVecK) != 0};
    const Operand v_op{v_row, v_col, dv, (flags & kVecV) != 0};
    const T* q_g = q + q_off;
    const T* k_g = k + k_off;
    const T* v_g = v + v_off;

    // Keys this block visits: its split's range, cut at the causal frontier of its last row
    // (query i sees key j iff j <= i + nk - nq).
    const int key_begin = split * keys_per_split;
    int key_end = min(nk, key_begin + keys_per_split);
    if (causal) key_end = min(key_end, min(m0 + kBlockM, nq) + nk - nq);
    const int n_tiles = key_end > key_begin ? (key_end - key_begin + BN - 1) / BN : 0;

    auto load_kv = [&](int tile) {
        if (tile < n_tiles) {
            const int stage = tile % STAGES;
            const int n0 = key_begin + tile * BN;
            load_tile<T, BN, HD, kThreads>(k_s + stage * BN * kPitch, k_g, k_op, n0, nk);
            load_tile<T, BN, HD, kThreads>(v_s + stage * BN * kPitch, v_g, v_op, n0, nk);
        }
        cp_async_commit();  // empty groups keep the wait counts uniform
    };

    load_tile<T, kBlockM, HD, kThreads>(q_s, q_g, q_op, m0, nq);
    cp_async_commit();
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) load_kv(t);
    cp_async_wait<PIPELINE_QK ? STAGES - 2 : STAGES - 1>();  // Q (and tile 0 when pipelined)
    __syncthreads();

    const int warp_row0 = warp * 16 * MT;
    unsigned q_frag[kQInRegs ? MT : 1][kQInRegs ? HD / 16 : 1][4];
    auto q_fragment = [&](int mt, int kk, unsigned (&a)[4]) {
        ldmatrix_x4(a, q_s + (warp_row0 + mt * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
    };
    if constexpr (kQInRegs) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) q_fragment(mt, kk, q_frag[mt][kk]);
    }

    float o_acc[MT][HD / 8][4];
    float row_max[MT][2], row_sum[MT][2];  // row_max in log2 units; row_sum per thread (quad-partial)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < HD / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) o_acc[mt][j][e] = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) row_max[mt][h] = kNegInf, row_sum[mt][h] = 0.f;
    }

    using Scores = float[MT][BN / 8][4];

    // S = Q K^T for this warp's rows (columns beyond d are zero in both operands).
    auto compute_scores = [&](Scores& s, const T* k_tile) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            if (SKIP_PAD_COLS && kk * 16 >= d) break;
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (kQInRegs) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][kk][e];
                } else {
                    q_fragment(mt, kk, a[mt]);
                }
            }
#pragma unroll
            for (int j = 0; j < BN / 8; j += 2) {
                unsigned b[4];
                ldmatrix_x4(b, k_tile + (j * 8 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8);
                const unsigned b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816<T>(s[mt][j], a[mt], b_lo);
                    mma_16816<T>(s[mt][j + 1], a[mt], b_hi);
                }
            }
        }
    };

    // Scale into log2 units; mask (select, so a NaN key never reaches a row that does not
    // see it) only in tiles that cross the split end, nk, or the causal diagonal.
    auto scale_and_mask = [&](Scores& s, int n0) {
        const int first_row = m0 + warp_row0;
        const bool need_mask = n0 + BN > key_end || (causal && n0 + BN - 1 > first_row + nk - nq);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[mt][j][e] * scale_log2;
                    if (need_mask) {
                        const int row = first_row + mt * 16 + lane / 4 + (e / 2) * 8;
                        const int col = n0 + j * 8 + (lane % 4) * 2 + (e % 2);
                        const bool visible = col < key_end && (!causal || col <= row + nk - nq);
                        x = visible ? x : kNegInf;
                    }
                    s[mt][j][e] = x;
                }
    };

    // Online softmax: S becomes P, O and the row sums are rescaled. Each row lives in one
    // quad (4 lanes); fmaxf drops NaN from the max but exp2(NaN - m) brings it back into
    // the row's sum, so a NaN score still makes its row NaN.
    auto online_softmax = [&](Scores& s) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float tile_max = kNegInf;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mt][j][2 * h], s[mt][j][2 * h + 1]));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
                const float new_max = fmaxf(row_max[mt][h], tile_max);
                const float base = new_max == kNegInf ? 0.f : new_max;  // all masked so far: p = 0
                const float alpha = fast_exp2(row_max[mt][h] - base);
                row_max[mt][h] = new_max;
                float sum = 0.f;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        s[mt][j][e] = fast_exp2(s[mt][j][e] - base);
                        sum += s[mt][j][e];
                    }
                row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
#pragma unroll
                for (int j = 0; j < HD / 8; ++j) o_acc[mt][j][2 * h] *= alpha, o_acc[mt][j][2 * h + 1] *= alpha;
            }
    };

    // O += P V with P re-packed from the S accumulators into A fragments: the k16 step t
    // of P is S tiles 2t (a0, a1) and 2t+1 (a2, a3).
    auto accumulate_pv = [&](const Scores& s, const T* v_tile) {
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) {
            unsigned p[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                p[mt][0] = pack2<T>(s[mt][2 * t][0], s[mt][2 * t][1]);
                p[mt][1] = pack2<T>(s[mt][2 * t][2], s[mt][2 * t][3]);
                p[mt][2] = pack2<T>(s[mt][2 * t + 1][0], s[mt][2 * t + 1][1]);
                p[mt][3] = pack2<T>(s[mt][2 * t + 1][2], s[mt][2 * t + 1][3]);
            }
#pragma unroll
            for (int j = 0; j < HD / 8; j += 2) {
                if (SKIP_PAD_COLS && j * 8 >= dv) break;
                unsigned b[4];
                ldmatrix_x4_trans(b, v_tile + (t * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + (j + lane / 16) * 8);
                const unsigned b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816<T>(o_acc[mt][j], p[mt], b_lo);
                    mma_16816<T>(o_acc[mt][j + 1], p[mt], b_hi);
                }
            }
        }
    };

    auto k_stage = [&](int tile) { return k_s + (tile % STAGES) * BN * kPitch; };
    auto v_stage = [&](int tile) { return v_s + (tile % STAGES) * BN * kPitch; };

    if constexpr (PIPELINE_QK) {
        // S(tile + 1) = Q K(tile + 1)^T is issued before the softmax of tile, in one
        // branch-free stretch, so the tensor pipe works while the softmax runs. Needs K/V of
        // tile + 1 resident while tile is processed: STAGES >= 3. The last step computes
        // scores of a stale stage, never used.
        Scores s;
        compute_scores(s, k_stage(0));  // tile 0 landed (prologue wait)
        for (int tile = 0; tile < n_tiles; ++tile) {
            cp_async_wait<STAGES - 3>();
            __syncthreads();  // tile + 1 landed for all threads; stage tile - 1 is free
            load_kv(tile + STAGES - 1);
            scale_and_mask(s, key_begin + tile * BN);
            Scores s_next;
            compute_scores(s_next, k_stage(tile + 1));
            online_softmax(s);
            accumulate_pv(s, v_stage(tile));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][j][e] = s_next[mt][j][e];
        }
    } else {
        for (int tile = 0; tile < n_tiles; ++tile) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();  // tile landed for all threads; the stage refilled below is free
            load_kv(tile + STAGES - 1);
            Scores s;
            compute_scores(s, k_stage(tile));
            scale_and_mask(s, key_begin + tile * BN);
            online_softmax(s);
            accumulate_pv(s, v_stage(tile));
        }
    }
    cp_async_wait<0>();  // no copy may outlive the block

    // Epilogue: O / l written once (0 for a row that saw no key), lse = (m + log2 l) ln 2.
    // The final O goes through shared memory: each warp stages its rows in its own Q rows
    // (read only by this warp, and done with), then stores them as contiguous runs, 16 bytes
    // per lane where dv and out allow (a fragment row is 4 lanes x 4 bytes: half a sector).
    const bool write_partial = splits > 1;
    T* o_stage = q_s + warp_row0 * kPitch;
    __syncwarp();  // this warp's last Q reads precede the staging writes
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[mt][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int stage_row = mt * 16 + lane / 4 + h * 8;
            const int row = m0 + warp_row0 + stage_row;
            const bool empty = l == 0.f;
            const float inv = empty ? 0.f : 1.f / l;
            // explicit 0 for an empty row: its O is 0 * V, NaN where V holds NaN
            auto o_value = [&](int j, int e) { return empty ? 0.f : o_acc[mt][j][2 * h + e] * inv; };
            if (!write_partial) {
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
                    *reinterpret_cast<unsigned*>(o_stage + stage_row * kPitch + j * 8 + (lane % 4) * 2) =
                        pack2<T>(o_value(j, 0), o_value(j, 1));
            }
            if (row >= nq) continue;
            const float m = row_max[mt][h] == kNegInf ? 0.f : row_max[mt][h];
            const float row_lse = empty ? kNegInf : (m + __log2f(l)) * kLn2;
            const int64 out_row = batch * nq + row;
            const int64 part_row = (split * batch_count + batch) * nq + row;
            if (write_partial) {
#pragma unroll
                for (int j = 0; j < HD / 8; ++j) {
                    const int col = j * 8 + (lane % 4) * 2;
                    if (col >= dv) break;
                    float* dst = partial_o + part_row * dv + col;
                    dst[0] = o_value(j, 0);
                    if (col + 1 < dv) dst[1] = o_value(j, 1);
                }
            }
            if (lane % 4 == 0) {
                if (write_partial) partial_lse[part_row] = row_lse;
                else if (flags & kWriteLse) lse[out_row] = row_lse;
            }
        }
    if (!write_partial) {
        __syncwarp();  // staged rows visible to the whole warp
        const int rows = min(16 * MT, nq - (m0 + warp_row0));
        T* dst = out + (batch * nq + m0 + warp_row0) * dv;  // the warp's rows are contiguous in out
        const auto pitched = [](int r, int c) { return r * kPitch + c; };
        if (dv % 8 == 0 && reinterpret_cast<unsigned long long>(out) % 16 == 0) {
            copy_rows<uint4>(dst, o_stage, pitched, rows, dv, lane, 32);
        } else {
            copy_rows<T>(dst, o_stage, pitched, rows, dv, lane, 32);
        }
    }
}

// cp.async stream of consecutive ROWS x HD tiles of one operand (unit column stride, 16-byte
// aligned rows) into a swizzled shared layout `place` that advances 64 elements per row across
// steps of 8 rows (kmajor_atom_offset and nmajor_atom_offset both do). THREADS is a multiple of
// the HD / 8 chunks of a row, so a thread keeps one column chunk and rows r0, r0 + kRowStep, ...
// of every tile: the shared offset, source row and bounds are set once per work item, and a tile
// costs a pointer step, one compare and one cp.async per chunk (load_rows_16b spends ~40
// instructions per chunk on index, swizzle and 64-bit address math).
template <typename T, int ROWS, int HD, int THREADS>
struct TileStream {
    static constexpr int kChunks = HD / 8, kRowStep = THREADS / kChunks;
    static_assert(THREADS % kChunks == 0 && kRowStep % 8 == 0, "one column and swizzle phase per thread");
    const T* src;        // this thread's first chunk of the next tile
    const T* base;       // the operand's row 0: address of the zero-filled (unread) chunks
    int rows_left;       // operand rows from src's row on; 0 when the column is at or past cols
    int tile_rows_left;  // ROWS - r0: this thread's rows of a tile are those below it
    int smem_off;        // element offset of this thread's first chunk in a tile

    template <typename Place>
    __device__ __forceinline__ void start(const T* g, int64 row_stride, int cols, int row_end, Place place) {
        const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks * 8;
        base = g;
        src = g + r0 * row_stride + c;
        rows_left = c < cols ? row_end - r0 : 0;
        tile_rows_left = ROWS - r0;
        smem_off = place(r0, c);
    }
    // The next tile into the ROWS x HD slot `tile`; rows past the operand's end are zero.
    __device__ __forceinline__ void load_next(T* tile, int64 row_stride) {
        const T* row = src;
#pragma unroll
        for (int i = 0; i * kRowStep < ROWS; ++i) {
            if (ROWS % kRowStep == 0 || i * kRowStep < tile_rows_left) {
                const bool ok = i * kRowStep < rows_left;
                cp_async_16(tile + smem_off + i * kRowStep * WGMMA_ATOM_N, ok ? row : base, ok);
            }
            row += kRowStep * row_stride;
        }
        src += ROWS * row_stride;
        rows_left -= ROWS;
    }
};

// A warpgroup's staged 64 x HD tile (kmajor_atom_offset<64> layout) to `rows` contiguous rows of
// `cols` elements of dst (cols % 8 == 0, dst 16-byte aligned), 16 bytes per thread and step. As in
// TileStream each of the 128 threads keeps one column chunk, its rows a constant shared step
// apart, so a chunk costs a shared load, a compare and a store (copy_rows: a run-time division).
template <typename T, int HD>
__device__ __forceinline__ void store_staged_rows(T* dst, const T* stage, int rows, int cols, int tid) {
    constexpr int kChunks = HD / 8, kRowStep = 128 / kChunks;
    static_assert(kRowStep % 8 == 0, "one swizzle phase per thread");
    const int r0 = tid / kChunks, c = tid % kChunks * 8;
    if (c >= cols) return;
    const T* src = stage + kmajor_atom_offset<64>(r0, c);
    dst += r0 * cols + c;
#pragma unroll
    for (int i = 0; i * kRowStep < 64; ++i)
        if (r0 + i * kRowStep < rows)
            *reinterpret_cast<uint4*>(dst + i * kRowStep * cols) =
                *reinterpret_cast<const uint4*>(src + i * kRowStep * WGMMA_ATOM_N);
}

// desc + step for a start-address step (16-byte units) of a wgmma descriptor: a 32-bit add of
// the low word, exact because the low word (address >> 4 and the leading byte offset) stays far
// below 2^32, and one instruction instead of a 64-bit add chain per wgmma.
__device__ __forceinline__ unsigned long long desc_add(unsigned long long desc, unsigned step) {
    unsigned lo, hi;
    asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(desc));
    unsigned long long sum;
    asm("mov.b64 %0, {%1, %2};" : "=l"(sum) : "r"(lo + step), "r"(hi));
    return sum;
}

// ---------------------------------------------------------------------------------------
// Hopper prefill (sm_90a): warpgroup MMA. A block holds WARPGROUPS x 64 query rows, 64 per
// warpgroup; K/V tiles of BN keys stream through a STAGES-deep cp.async ring that every
// thread fills. S = Q K^T reads Q and K from shared memory, both K-major with the 128-byte
// swizzle ([HD / 64] column atoms of [rows][64]); O += P V takes P from registers (the S
// accumulator packed to 16-bit pairs is wgmma's A fragment) and V N-major (atoms of 8 keys
// x 64 columns, read transposed). Loop step j issues S(j) = Q K_j^T and O += P(j-1) V(j-1)
// back to back; with OVERLAP the softmax of S(j) runs while P V is still on the tensor cores
// (FA3's intra-warpgroup overlap), without it both are waited for first. So cp.async group g
// carries K tile g and V tile g - 1, and two stages already overlap loads with compute.
// With WG_RANGES each warpgroup stops at its own key range (rows past nq: none; causal: the
// frontier of its last row) while the block keeps streaming the tiles the others need, so the
// fully masked tiles above a warpgroup's diagonal and the rows of a ragged last query tile
// cost no MMAs and no exps (it still joins every barrier). With ORDERED warpgroup w issues a
// step's wgmmas once warpgroup w - 1's S of that step is done (named barriers: FA3's ping-pong
// inside the block-wide step), so warpgroup 0's softmax overlaps the others' MMAs instead of
// every S finishing late and together after interleaving on the tensor cores.
// Work items are (query tile, batch) pairs, query tile fastest. Without PERSISTENT a block runs
// one (grid = items). With PERSISTENT (STAGES == 2) the grid is the resident blocks and each
// loops over items in snake order over the grid (where the grid is a multiple of the query
// tiles per head, e.g. 132 blocks and 3 or 11 tiles of 192 rows at N512 / N2048, a block's
// long and short causal items pair up, two rounds at a time); Q is double
// buffered and the next item's Q and first K tile are loaded once the current item's last S
// is done, so that load overlaps the final P V and the epilogue instead of starting a cold
// block (issued a step earlier it costs registers: spills). The K/V ring runs on across
// items (slot = (ring + tile) % STAGES).
// Preconditions (checked by the host): q, k, v with unit column stride and 16-byte aligned
// rows (d and dv multiples of 8, at most HD), scale_log2 > 0 (the row max is taken on the
// raw scores and scaled once: one FFMA per score), a single key split.
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES, int MIN_BLOCKS, bool OVERLAP, bool WG_RANGES,
          bool ORDERED, bool PERSISTENT>
__global__ void __launch_bounds__(WARPGROUPS * 128, MIN_BLOCKS)
    attention_fwd_wgmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        T* __restrict__ out, float* __restrict__ lse, int nq, int nk, int d, int dv, int q_tiles,
                        int items, float scale_log2, int flags, int64 q_row, int64 k_row, int64 v_row,
                        BATCH_LAYOUT_PARAMS) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert((HD == 64 || HD == 128) && (BN == 64 || BN == 128) && STAGES >= 2, "tile shape");
    static_assert(!PERSISTENT || STAGES == 2, "the item handover prefetches one ring group");
    constexpr int kThreads = WARPGROUPS * 128, kBlockM = WARPGROUPS * 64;
    constexpr int kStageElems = BN * HD;  // one K or V tile
    constexpr int kQBuffers = PERSISTENT ? 2 : 1;
    constexpr unsigned kVDescK16 = 2 * 1024 / 16;  // V descriptor advance per k16: two 8-key atoms
    const float kNegInf = neg_infinity<float>();

    extern __shared__ unsigned char smem_raw[];
    // 1024-byte aligned: the swizzle is a function of the address bits [4, 10)
    T* const q_buffers = reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    T* const k_s = q_buffers + kQBuffers * kBlockM * HD;
    T* const v_s = k_s + STAGES * kStageElems;

    // wg through a shuffle from lane 0: ptxas then knows it is warp-uniform (CUTLASS canonical_warp_group_idx)
    const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0), warp = threadIdx.x / 32 % 4,
              lane = threadIdx.x % 32;
    const bool causal = flags & kCausal;

    struct WorkItem {
        int m0;  // first query row
        int64 batch;
        const T *q_g, *k_g, *v_g;
        int key_end, n_tiles;  // keys the block visits: cut at the causal frontier of its last row
    };
    // Query tile fastest (blocks running at once share K/V in L2); causal: longest first.
    auto work_item = [&](int item) {
        WorkItem w;
        const int q_tile = causal ? q_tiles - 1 - item % q_tiles : item % q_tiles;
        w.batch = item / q_tiles;
        w.m0 = q_tile * kBlockM;
        int64 q_off, k_off, v_off;
        BATCH_LAYOUT.offsets(w.batch, q_off, k_off, v_off);
        w.q_g = q + q_off;
        w.k_g = k + k_off;
        w.v_g = v + v_off;
        w.key_end = causal ? min(nk, min(w.m0 + kBlockM, nq) + nk - nq) : nk;  // i sees j <= i + nk - nq
        w.n_tiles = w.key_end > 0 ? (w.key_end + BN - 1) / BN : 0;
        return w;
    };
    const auto item_at = [&](int round) {  // this block's item of a round (snake over the grid)
        return round * static_cast<int>(gridDim.x) +
               (round % 2 ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x));
    };

    const auto k_place = [](int r, int c) { return kmajor_atom_offset<BN>(r, c); };
    const auto v_place = [](int r, int c) { return nmajor_atom_offset<BN>(r, c); };
    auto load_q = [&](const WorkItem& w, T* q_s) {  // the warpgroups' 64-row slices, consecutive tiles of a stream
        TileStream<T, 64, HD, kThreads> q_stream;
        q_stream.start(w.q_g + w.m0 * q_row, q_row, d, nq - w.m0, [](int r, int c) { return kmajor_atom_offset<64>(r, c); });
#pragma unroll
        for (int slice = 0; slice < WARPGROUPS; ++slice) q_stream.load_next(q_s + slice * 64 * HD, q_row);
    };
    TileStream<T, BN, HD, kThreads> k_stream, v_stream;  // the item's K tiles 0, 1, ... and V tiles 0, 1, ...
    auto start_streams = [&](const WorkItem& w) {
        k_stream.start(w.k_g, k_row, d, nk, k_place);
        v_stream.start(w.v_g, v_row, dv, nk, v_place);
    };
    auto load_kv = [&](const WorkItem& w, int ring, int g) {  // ring group g of item w: K tile g and V tile g - 1
        if (g < w.n_tiles) k_stream.load_next(k_s + (ring + g) % STAGES * kStageElems, k_row);
        if (g >= 1 && g <= w.n_tiles) v_stream.load_next(v_s + (ring + g - 1) % STAGES * kStageElems, v_row);
    };
    // PERSISTENT: the next item's Q (into the other Q buffer) and K tile 0, one group (empty
    // past the last item: the wait counts stay uniform).
    auto prefetch = [&](int item, T* q_s, int ring) {
        if (item < items) {
            const WorkItem w = work_item(item);
            load_q(w, q_s);
            start_streams(w);  // the current item's last K and V tiles are issued
            load_kv(w, ring, 0);
        }
        cp_async_commit();
    };

    WorkItem cur = work_item(blockIdx.x);  // the grid never exceeds the items
    load_q(cur, q_buffers);                // joins group 0
    start_streams(cur);
#pragma unroll
    for (int g = 0; g < STAGES - 1; ++g) {
        load_kv(cur, 0, g);
        cp_async_commit();  // empty groups keep the wait counts uniform
    }

    // Per-item state, read by the lambdas below.
    int ring = 0;  // ring position of the item's key tile 0
    int wg_tiles = 0;  // key tiles this warpgroup computes (a prefix of the block's)
    int warp_row0 = 0;  // this warp's rows: warp_row0 + lane / 4 (+ 8)
    unsigned long long q_desc = 0;
    float o[HD / 2];  // accumulator fragment of this warpgroup's 64 x HD output
    float row_max[2];  // log2 units (scaled); rows lane / 4 and lane / 4 + 8
    float row_sum[2];  // this thread's columns only (the quad sums at the end)
    unsigned p[BN / 16][4];  // P of the previous key tile: A fragments per k16 slice

    // Each batch of wgmmas is fenced: O and P were last written by ordinary instructions.
    auto issue_scores = [&](float (&s)[BN / 2], int tile) {
        wgmma_fence();
        const unsigned long long k_desc = sw128_kmajor_desc(k_s + (ring + tile) % STAGES * kStageElems);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
            Wgmma<BN, T>::template ss<0>(s, desc_add(q_desc, kmajor_k16_step<64>(kk)),
                                         desc_add(k_desc, kmajor_k16_step<BN>(kk)), kk);
        wgmma_commit();
    };
    auto issue_pv = [&](int tile) {
        wgmma_fence();
        const unsigned long long v_desc = sw128_nmajor_desc<BN>(v_s + (ring + tile) % STAGES * kStageElems);
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) Wgmma<HD, T>::template rs<1>(o, p[t], desc_add(v_desc, t * kVDescK16), 1);
        wgmma_commit();
    };
    auto pin_scores = [](float (&s)[BN / 2]) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) pin(s[i]);
    };
    auto pin_operands = [&]() {  // O and P: written by ordinary instructions or by wgmma
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) pin(o[i]);
#pragma unroll
        for (int t = 0; t < BN / 16; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) pin(p[t][e]);
    };
    auto finish_pv = [&](int tile) {  // this warpgroup's last P V, waited for
        pin_operands();
        issue_pv(tile);
        wgmma_wait<0>();
        pin_operands();
    };
    // ORDERED: warpgroup w issues a step's wgmmas once warpgroup w - 1's scores of that step are
    // done (passing the turn earlier, right after the issue, makes ptxas serialise the wgmmas).
    // Every warpgroup takes and passes its turn at every step, computing or not, so the
    // barrier counts always match.
    auto take_turn = [&]() {
        if (ORDERED && wg > 0) warpgroup_turn_wait(wg);
    };
    auto pass_turn = [&]() {
        if (ORDERED && wg + 1 < WARPGROUPS) warpgroup_turn_pass(wg + 1);
    };

    // Scores -> probabilities in place (log2 domain), running max and sum; alpha rescales O.
    // Accumulator element 4i + e sits at row lane / 4 + 8 (e / 2), column 8i + 2 (lane % 4) + e % 2.
    // Masking (only tiles crossing key_end or this warp's diagonal) selects -inf, so a NaN
    // key never reaches a row that does not see it; fmaxf drops NaN from the max, but
    // exp2(NaN) brings it back into the row's sum. The running max moves only when a tile's
    // max exceeds it by more than kMaxSlack (FA4's conditional rescale): probabilities stay
    // <= 2^kMaxSlack (exact in float32, far from the 16-bit ranges), O and l are scaled by the
    // same stale max (O / l and lse = m + log2 l are unchanged), and after the first tiles
    // alpha is 1 on almost every row, so rescale_and_pack skips the O rescale for the warp.
    constexpr float kMaxSlack = 8.f;
    auto softmax = [&](float (&s)[BN / 2], int tile, float (&alpha)[2]) {
        const int n0 = tile * BN, key_end = cur.key_end;
        if (n0 + BN > key_end || (causal && n0 + BN - 1 > warp_row0 + nk - nq)) {
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = warp_row0 + lane / 4 + (e / 2) * 8;
                    const int col = n0 + i * 8 + (lane % 4) * 2 + e % 2;
                    const bool visible = col < key_end && (!causal || col <= row + nk - nq);
                    s[4 * i + e] = visible ? s[4 * i + e] : kNegInf;
                }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = kNegInf;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) tile_max = fmaxf(tile_max, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
            const float tile_max_scaled = tile_max * scale_log2;
            const bool moves = tile_max_scaled > row_max[h] + kMaxSlack;  // -inf + slack: any finite max moves
            alpha[h] = moves ? fast_exp2(row_max[h] - tile_max_scaled) : 1.f;
            if (moves) row_max[h] = tile_max_scaled;
            const float base = row_max[h] == kNegInf ? 0.f : row_max[h];  // all masked so far: p = 0
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    s[4 * i + e] = fast_exp2(fmaf(s[4 * i + e], scale_log2, -base));
                    sum += s[4 * i + e];
                }
            row_sum[h] = row_sum[h] * alpha[h] + sum;
        }
    };
    // O *= alpha per row (skipped when no row of the warp moved its max); P = the probabilities
    // as A fragments: k16 slice t is accumulator columns 16t..16t+15, i.e. elements 8t..8t+3
    // (columns +0..7) and 8t+4..8t+7 (+8..15).
    auto rescale_and_pack = [&](const float (&s)[BN / 2], const float (&alpha)[2]) {
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int j = 0; j < HD / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e / 2];
        }
#pragma unroll
        for (int t = 0; t < BN / 16; ++t)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[t][r] = pack2<T>(s[8 * t + 2 * r], s[8 * t + 2 * r + 1]);
    };

    for (int round = 0, item = blockIdx.x; item < items; item = item_at(++round)) {
        if (round > 0) cur = work_item(item);
        T* const q_s = q_buffers + round % kQBuffers * kBlockM * HD;
        const int n_tiles = cur.n_tiles;
        wg_tiles = n_tiles;
        if (WG_RANGES) {
            const int wg_row0 = cur.m0 + wg * 64;
            const int wg_key_end =
                wg_row0 >= nq ? 0 : causal ? min(nk, min(wg_row0 + 64, nq) + nk - nq) : nk;
            wg_tiles = wg_key_end > 0 ? (wg_key_end + BN - 1) / BN : 0;
        }
        warp_row0 = cur.m0 + wg * 64 + warp * 16;
        q_desc = sw128_kmajor_desc(q_s + wg * 64 * HD);
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
        row_max[0] = row_max[1] = kNegInf;
        row_sum[0] = row_sum[1] = 0.f;

        for (int tile = 0; tile < n_tiles; ++tile) {
            cp_async_wait<STAGES - 2>();
            fence_proxy_async_shared();
            __syncthreads();  // group `tile` landed for all threads; every wgmma of step tile - 1 is done
            load_kv(cur, ring, tile + STAGES - 1);
            cp_async_commit();
            if (tile >= wg_tiles) {  // past this warpgroup's keys (warpgroup-uniform)
                take_turn();
                if (tile == wg_tiles && tile > 0) finish_pv(tile - 1);
                pass_turn();
                continue;
            }
            float s[BN / 2];
            pin_operands();  // O and P final before the fences that order them for the wgmmas
            take_turn();
            issue_scores(s, tile);
            if (tile > 0) issue_pv(tile - 1);
            if (OVERLAP && tile > 0) {
                wgmma_wait<1>();  // S(tile) done; P V still running
            } else {
                wgmma_wait<0>();
            }
            pass_turn();
            pin_scores(s);
            float alpha[2];
            softmax(s, tile, alpha);
            wgmma_wait<0>();  // P V done: O may be rescaled and P overwritten
            pin_operands();
            pin_scores(s);
            rescale_and_pack(s, alpha);
        }
        cp_async_wait<STAGES - 2>();  // group n_tiles: the last V tile
        fence_proxy_async_shared();
        __syncthreads();  // all S done (K slot (ring + n_tiles) % 2 and the other Q buffer are free)
        if (wg_tiles == n_tiles && n_tiles > 0) finish_pv(n_tiles - 1);
        // after the last P V, whose P fragments would otherwise share the registers with it
        if (PERSISTENT) prefetch(item_at(round + 1), q_buffers + (round + 1) % 2 * kBlockM * HD, ring + n_tiles);

        // Epilogue: O / l (0 for a row that saw no key), lse = (m + log2 l) ln 2. O is staged in
        // this warpgroup's own Q rows (its wgmmas are done with them) in the same swizzled
        // layout, so the fragment writes hit 8 distinct bank groups, then leaves as contiguous
        // rows of out (16 bytes per thread where out is 16-byte aligned).
        T* o_stage = q_s + wg * 64 * HD;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int stage_row = warp * 16 + lane / 4 + h * 8;
            const int row = cur.m0 + wg * 64 + stage_row;
            const bool empty = l == 0.f;
            const float inv = empty ? 0.f : 1.f / l;
            // explicit 0 for an empty row: its O is 0 * V, NaN where V holds NaN
#pragma unroll
            for (int j = 0; j < HD / 8; ++j)
                *reinterpret_cast<unsigned*>(o_stage + kmajor_atom_offset<64>(stage_row, j * 8 + (lane % 4) * 2)) =
                    pack2<T>(empty ? 0.f : o[4 * j + 2 * h] * inv, empty ? 0.f : o[4 * j + 2 * h + 1] * inv);
            if ((flags & kWriteLse) && lane % 4 == 0 && row < nq) {
                const float m = row_max[h] == kNegInf ? 0.f : row_max[h];
                lse[cur.batch * nq + row] = empty ? kNegInf : (m + __log2f(l)) * kLn2;
            }
        }
        warpgroup_barrier(wg);  // staged rows visible to the whole warpgroup (the others need not wait)
        const int rows = min(64, nq - (cur.m0 + wg * 64));
        T* dst = out + (cur.batch * nq + cur.m0 + wg * 64) * dv;  // the warpgroup's rows are contiguous in out
        const auto staged = [](int r, int c) { return kmajor_atom_offset<64>(r, c); };
        if (reinterpret_cast<unsigned long long>(out) % 16 == 0) {
            store_staged_rows<T, HD>(dst, o_stage, rows, dv, threadIdx.x % 128);
        } else {
            copy_rows<T>(dst, o_stage, staged, rows, dv, threadIdx.x % 128, 128);
        }
        ring += n_tiles;
        if (!PERSISTENT) break;
    }
    cp_async_wait<0>();  // no copy may outlive the block
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// Decode (few query rows, long keys): pure K/V streaming without shared-memory staging.
// One block per (query row, key split, batch); its WARPS warps take interleaved groups of
// UNROLL * KEYS_PER_LOAD keys, so the block reads a contiguous stretch of K and V. A key row
// of HD elements is HD / 8 lanes of one 16-byte load each (KEYS_PER_LOAD = 256 / HD keys per
// warp load); all UNROLL K and V loads of a group are issued before any is used. Scores are
// reduced over the lanes of a key, the online softmax runs per warp in the log2 domain, and
// the warps merge through shared memory. Needs unit column stride and 16-byte aligned rows
// of k and v (the vec16 flags); q is read once with its strides.
template <typename T, int HD, int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32)
    attention_decode(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_o,
                     float* __restrict__ partial_lse, int nq, int nk, int d, int dv, int splits,
                     int keys_per_split, float scale_log2, int flags, int64 q_row, int64 q_col, int64 k_row,
                     int64 k_col, int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS) {
    static_assert(HD % 8 == 0 && 256 % HD == 0, "head dim: 8 lanes x 16 bytes divide a warp load");
    constexpr int kLanesPerKey = HD / 8;
    constexpr int kKeysPerLoad = 32 / kLanesPerKey;
    constexpr int kGroupKeys = UNROLL * kKeysPerLoad;
    const float kNegInf = neg_infinity<float>();
    __shared__ float warp_max_s[WARPS], warp_sum_s[WARPS];
    __shared__ float warp_o_s[WARPS][HD];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int chunk = lane % kLanesPerKey, key_in_load = lane / kLanesPerKey;
    const int col = chunk * 8;
    int64 bid = blockIdx.x;
    const int row = static_cast<int>(bid % nq);
    bid /= nq;
    const int split = static_cast<int>(bid % splits);
    const int64 batch = bid / splits;
    const int64 batch_count = gridDim.x / (static_cast<int64>(nq) * splits);

    int64 q_off, k_off, v_off;
    BATCH_LAYOUT.offsets(batch, q_off, k_off, v_off);
    float q_reg[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
        q_reg[e] = col + e < d ? to_accum(q[q_off + row * q_row + (col + e) * q_col]) * scale_log2 : 0.f;
    const T* k_g = k + k_off + col;
    const T* v_g = v + v_off + col;
    const bool k_cols = col < d, v_cols = col < dv;

    const int key_begin = split * keys_per_split;
    int key_end = min(nk, key_begin + keys_per_split);
    if (flags & kCausal) key_end = min(key_end, row + nk - nq + 1);

    float row_max = kNegInf, row_sum = 0.f;  // warp-uniform max; sum over this lane's keys
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;

    for (int n0 = key_begin + warp * kGroupKeys; n0 < key_end; n0 += WARPS * kGroupKeys) {
        uint4 k_vec[UNROLL], v_vec[UNROLL];
        const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int key = n0 + u * kKeysPerLoad + key_in_load;
            const bool in = key < key_end;
            k_vec[u] = in && k_cols ? __ldg(reinterpret_cast<const uint4*>(k_g + key * k_row)) : zero;
            v_vec[u] = in && v_cols ? __ldg(reinterpret_cast<const uint4*>(v_g + key * v_row)) : zero;
        }
        float score[UNROLL];
        float group_max = kNegInf;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const T* kv = reinterpret_cast<const T*>(&k_vec[u]);
            float dot = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) dot += q_reg[e] * to_accum(kv[e]);
#pragma unroll
            for (int off = kLanesPerKey / 2; off >= 1; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            const int key = n0 + u * kKeysPerLoad + key_in_load;
            score[u] = key < key_end ? dot : kNegInf;
            group_max = fmaxf(group_max, score[u]);
        }
#pragma unroll
        for (int off = kLanesPerKey; off < 32; off *= 2)
            group_max = fmaxf(group_max, __shfl_xor_sync(0xffffffffu, group_max, off));
        const float new_max = fmaxf(row_max, group_max);
        const float base = new_max == kNegInf ? 0.f : new_max;  // all masked so far: p = 0
        const float alpha = fast_exp2(row_max - base);
        row_max = new_max;
        row_sum *= alpha;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= alpha;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const float p = fast_exp2(score[u] - base);  // NaN score: NaN p, NaN row
            row_sum += p;
            const T* vv = reinterpret_cast<const T*>(&v_vec[u]);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] += p * to_accum(vv[e]);
        }
    }

    // Lanes holding the same columns for different keys combine (same max: warp-uniform).
#pragma unroll
    for (int off = kLanesPerKey; off < 32; off *= 2) {
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, off);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
    }
    if (lane == 0) warp_max_s[warp] = row_max, warp_sum_s[warp] = row_sum;
    if (key_in_load == 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e) warp_o_s[warp][col + e] = acc[e];
    }
    __syncthreads();

    float block_max = kNegInf;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) block_max = fmaxf(block_max, warp_max_s[w]);
    const float base = block_max == kNegInf ? 0.f : block_max;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += warp_sum_s[w] * fast_exp2(warp_max_s[w] - base);
    const bool empty = total == 0.f;
    const float inv = empty ? 0.f : 1.f / total;
    const int64 out_row = batch * nq + row;
    const int64 part_row = (split * batch_count + batch) * nq + row;
    for (int c = threadIdx.x; c < dv; c += WARPS * 32) {
        float x = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) x += warp_o_s[w][c] * fast_exp2(warp_max_s[w] - base);
        x = empty ? 0.f : x * inv;
        if (splits > 1) partial_o[part_row * dv + c] = x;
        else out[out_row * dv + c] = from_accum<T>(x);
    }
    if (threadIdx.x == 0) {
        const float row_lse = empty ? kNegInf : (block_max + __log2f(total)) * kLn2;
        if (splits > 1) partial_lse[part_row] = row_lse;
        else if (flags & kWriteLse) lse[out_row] = row_lse;
    }
}

// out = sum_s exp(lse_s - lse) o_s with lse = log sum_s exp(lse_s); splits whose keys were
// all masked (lse_s = -inf) weigh 0; a NaN partial makes the row NaN. One block per row.
template <typename T>
__global__ void __launch_bounds__(128)
    attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                    T* __restrict__ out, float* __restrict__ lse, int64 rows, int dv, int splits, int write_lse) {
    const float kNegInf = neg_infinity<float>();
    const int64 row = blockIdx.x;
    float max_lse = kNegInf;
    for (int s = 0; s < splits; ++s) max_lse = nan_max(max_lse, partial_lse[s * rows + row]);
    const float base = max_lse == kNegInf ? 0.f : max_lse;
    float total = 0.f;
    for (int s = 0; s < splits; ++s) total += __expf(partial_lse[s * rows + row] - base);
    const float inv = total == 0.f ? 0.f : 1.f / total;
    for (int c = threadIdx.x; c < dv; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < splits; ++s)
            acc += __expf(partial_lse[s * rows + row] - base) * partial_o[(s * rows + row) * dv + c];
        out[row * dv + c] = from_accum<T>(acc * inv);
    }
    if (write_lse && threadIdx.x == 0) lse[row] = total == 0.f ? kNegInf : base + __logf(total);
}

__device__ __forceinline__ float exact_exp(float x) { return expf(x); }
__device__ __forceinline__ double exact_exp(double x) { return exp(x); }
__device__ __forceinline__ float exact_log(float x) { return logf(x); }
__device__ __forceinline__ double exact_log(double x) { return log(x); }

// float32/float64 path: one warp per query row, block = WARPS rows of one batch entry.
// Lanes take one key each for the scores (q row in shared memory), then the warp
// accumulates P V with lanes over the head dim (up to 8 columns each: dv <= 256).
template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_fwd_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       T* __restrict__ out, float* __restrict__ lse, int nq, int nk, int d, int dv,
                       int q_tiles, T scale, int flags, int64 q_row, int64 q_col, int64 k_row, int64 k_col,
                       int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS) {
    using A = accum_t<T>;
    constexpr int kMaxHead = 256, kColsPerLane = kMaxHead / 32;
    __shared__ A q_s[WARPS][kMaxHead];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64 batch = blockIdx.x / q_tiles;
    const int row = static_cast<int>(blockIdx.x % q_tiles) * WARPS + warp;
    if (row >= nq) return;
    int64 q_off, k_off, v_off;
    BATCH_LAYOUT.offsets(batch, q_off, k_off, v_off);
    const T* q_g = q + q_off + row * q_row;
    const T* k_g = k + k_off;
    const T* v_g = v + v_off;
    for (int c = lane; c < d; c += 32) q_s[warp][c] = to_accum(q_g[c * q_col]) * to_accum(scale);
    __syncwarp();

    const bool causal = flags & kCausal;
    const int key_end = causal ? min(nk, row + nk - nq + 1) : nk;
    const A neg_inf = neg_infinity<A>();
    A row_max = neg_inf, row_sum = 0;
    A acc[kColsPerLane];
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) acc[i] = 0;

    for (int n0 = 0; n0 < key_end; n0 += 32) {
        const int key = n0 + lane;
        A score = neg_inf;
        if (key < key_end) {
            const T* k_row_ptr = k_g + key * k_row;
            A dot = 0;
            for (int c = 0; c < d; ++c) dot += q_s[warp][c] * to_accum(k_row_ptr[c * k_col]);
            score = dot;
        }
        const A new_max = nan_max(row_max, warp_max(score));
        const A base = new_max == neg_inf ? A(0) : new_max;
        const A alpha = exact_exp(row_max - base);
        const A p = exact_exp(score - base);
        row_sum = row_sum * alpha + warp_sum(p);
        row_max = new_max;
#pragma unroll
        for (int i = 0; i < kColsPerLane; ++i) acc[i] *= alpha;
        const int keys = min(32, key_end - n0);
        for (int t = 0; t < keys; ++t) {
            const A pt = __shfl_sync(0xffffffffu, p, t);
            const T* v_row_ptr = v_g + (n0 + t) * v_row;
#pragma unroll
            for (int i = 0; i < kColsPerLane; ++i) {
                const int c = lane + 32 * i;
                if (c < dv) acc[i] += pt * to_accum(v_row_ptr[c * v_col]);
            }
        }
    }
    const bool empty = row_sum == A(0);
    const int64 out_row = batch * nq + row;
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < dv) out[out_row * dv + c] = from_accum<T>(empty ? A(0) : acc[i] / row_sum);
    }
    if ((flags & kWriteLse) && lane == 0) {
        const A base = row_max == neg_inf ? A(0) : row_max;
        lse[out_row] = empty ? neg_infinity<float>() : static_cast<float>(base + exact_log(row_sum));
    }
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_decode;
using cufuse::attention::attention_fwd_mma;
using cufuse::attention::attention_fwd_simt;
using cufuse::attention::attention_fwd_wgmma;
using cufuse::attention::attention_merge;
