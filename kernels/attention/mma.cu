// attention_fwd_mma: FlashAttention-2 style forward on tensor cores (mma.sync m16n8k16),
// float16 / bfloat16, any head dim up to 256 (padded to a bucket), any strides.
//
// Picked (cufuse/ops/attention/select.py) for 16-bit inputs
// - prefill (Nq > 16) wherever attention_fwd_wgmma does not apply: compute capability other
//   than 9.0, operands without 16-byte rows or a non-positive scale without a softcap, or a
//   grid under one wave of blocks whose wave model splits the keys;
//   the tile by head-dim bucket and the keys a row sees (select.prefill_tile);
// - decode (Nq <= 16) where attention_decode does not: grouped-query heads packed into the
//   rows (k / v broadcast over q's innermost batch dim: each K/V tile read once per KV head),
//   5 to 16 query rows, or k / v without 16-byte rows: KEY_WARPS tiles whose warps share
//   the rows and split every K/V stage (select.decode_tile).
// One block per (query tile, key split, batch); K/V tiles stream through a STAGES-deep
// cp.async ring; S and P stay in registers; online softmax in the log2 domain. With
// splits > 1 it writes normalised partial (O, lse) in float32, merged by attention_merge.
// Packed rows (KEY_WARPS tiles only; the others take group_queries = nq): row r is query
// r % group_queries of q's group r / group_queries (q address group * q_group + query * q_row;
// out / lse rows contiguous); causal uses the query index. A block visits only the keys its
// rows' bands reach (KeyBand: causal frontier, sliding window); a softcap takes tanh of the
// scaled scores.
#include "common/attention_layout.cuh"

namespace cufuse {
namespace attention {

// Row and column strides (elements) of one operand, and whether 16-byte cp.async applies:
// unit column stride, cols % 8 == 0, row/batch strides % 8 == 0, 16-byte aligned base.
struct Operand {
    int64 row_stride, col_stride;
    int cols;
    bool vec16;
};

// ROWS x HD tile of rows [row0, row_end) into shared memory (row pitch HD + 8 elements,
// which makes every 8-row ldmatrix phase hit 8 distinct 16-byte bank groups); row n starts
// at g + row_at(n). Columns at or beyond op.cols and rows at or beyond row_end are zero:
// that is the head-dim padding. 16-byte cp.async where op.vec16, else scalar loads.
template <typename T, int ROWS, int HD, int THREADS, typename RowAt>
__device__ __forceinline__ void load_tile(T* smem, const T* g, const Operand& op, int row0, int row_end,
                                          RowAt row_at) {
    constexpr int kPitch = HD + 8;
    if (op.vec16) {
        constexpr int kChunks = HD / 8;
        for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
            const int r = idx / kChunks, c = (idx % kChunks) * 8;
            const bool pred = row0 + r < row_end && c < op.cols;
            const T* src = pred ? g + row_at(row0 + r) + c : g;
            cp_async_16(smem + r * kPitch + c, src, pred);
        }
    } else {
        const T zero = from_accum<T>(0.f);
#pragma unroll 1
        for (int idx = threadIdx.x; idx < ROWS * HD; idx += THREADS) {
            const int r = idx / HD, c = idx % HD;
            const bool pred = row0 + r < row_end && c < op.cols;
            smem[r * kPitch + c] = pred ? g[row_at(row0 + r) + c * op.col_stride] : zero;
        }
    }
}
// load_tile for rows at a fixed stride with 16-byte loads (op.vec16), where the block's
// threads cover whole rows (THREADS a multiple of HD / 8, ROWS of THREADS / (HD / 8)): every
// thread keeps one 16-byte column chunk and steps a pointer over its rows, unrolled. The
// generic loop's index arithmetic and 64-bit row multiplies were ~45 % of the decode tile's
// loop instructions; removing them did not move the decode rate, but the
// prefill tiles measured at or above their earlier rates with it.
template <int ROWS, int HD, int THREADS>
constexpr bool kStridedRowsFit = THREADS % (HD / 8) == 0 && ROWS % (THREADS / (HD / 8)) == 0;
template <typename T, int ROWS, int HD, int THREADS>
__device__ __forceinline__ void load_strided_rows(T* smem, const T* g, const Operand& op, int row0, int row_end) {
    static_assert(kStridedRowsFit<ROWS, HD, THREADS>, "threads cover whole rows");
    constexpr int kPitch = HD + 8, kChunks = HD / 8, kRowStep = THREADS / kChunks;
    const int c = (threadIdx.x % kChunks) * 8, r0 = threadIdx.x / kChunks;
    const bool col_ok = c < op.cols;
    const T* src = g + (row0 + r0) * op.row_stride + c;
    const int64 step = kRowStep * op.row_stride;
#pragma unroll
    for (int i = 0; i < ROWS / kRowStep; ++i) {
        const int r = r0 + i * kRowStep;
        const bool pred = col_ok && row0 + r < row_end;
        cp_async_16(smem + r * kPitch + c, pred ? src : g, pred);
        src += step;
    }
}

// Each warp owns MT 16-row slices of the BLOCK_M = 16 * WARPS * MT query rows of a block
// and keeps its O accumulator (MT x 16 x HD) in registers; the BN keys of a K/V tile are
// shared by all warps. KEY_WARPS instead: the warps share the block's 16 * MT rows, a stage
// holds WARPS * BN keys, warp w computes on its BN of them (its own online softmax), and the
// warps' (max, sum, O) merge through shared memory at the end (decode: few rows, many keys). With Q_IN_REGS the Q fragments stay in registers for the whole key
// loop, else they are re-read from shared memory per tile (ldmatrix: fewer registers).
// MIN_BLOCKS (__launch_bounds__) caps registers so that that many blocks share an SM.
// SKIP_PAD_COLS skips the MMA steps wholly beyond d / dv at run time; without it the loops
// are branch-free (the padded columns are zero in shared memory, so the result is the same)
// and the scheduler can overlap ldmatrix of one step with the MMAs of the previous one.
template <typename T, int HD, int WARPS, int MT, int BN, int STAGES, int MIN_BLOCKS, bool Q_IN_REGS,
          bool SKIP_PAD_COLS, bool KEY_WARPS>
__global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    attention_fwd_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_o,
                      float* __restrict__ partial_lse, int nq, int nk, int d, int dv, int q_tiles,
                      int group_queries, int64 q_group, int splits, int keys_per_split, float scale_log2, int flags,
                      float softcap_log2, int band_lo, int band_hi, int64 q_row, int64 q_col, int64 k_row,
                      int64 k_col, int64 v_row, int64 v_col,
                      BATCH_LAYOUT_PARAMS, const float* __restrict__ sinks, int sink_heads) {
    begin_dependent_grid();
    static_assert(HD % 32 == 0 && BN % 16 == 0 && STAGES >= 2, "tile shape");
    constexpr int kThreads = WARPS * 32;
    constexpr int kBlockM = 16 * (KEY_WARPS ? 1 : WARPS) * MT;
    constexpr int kStageKeys = KEY_WARPS ? WARPS * BN : BN;  // keys a K/V stage holds
    constexpr int kPitch = HD + 8;
    constexpr bool kQInRegs = Q_IN_REGS;
    const float kNegInf = neg_infinity<float>();

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* q_s = reinterpret_cast<T*>(smem_raw);
    T* k_s = q_s + kBlockM * kPitch;
    T* v_s = k_s + STAGES * kStageKeys * kPitch;

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

    // Query i (row r: i = r % group_queries) sees the keys of its band (causal, window). Rows
    // [r0, r1) hold queries queries(r0, r1).x to .y (all of a group's where they cross a group
    // boundary: query_range). Without KEY_WARPS the rows are the queries (no integer division:
    // the prefill tiles' registers).
    const KeyBand band{band_lo, band_hi};
    auto query_of = [&](int r) { return KEY_WARPS ? r % group_queries : r; };
    auto queries = [&](int r0, int r1) { return KEY_WARPS ? query_range(r0, r1, group_queries) : int2{r0, r1 - 1}; };

    // Keys this block visits: its split's share of the keys its rows see, from the window start
    // of its first query to the window end (causal: the frontier) of its last.
    const int block_end = min(m0 + kBlockM, nq);
    const int2 block_queries = queries(m0, block_end);
    const int key_begin = band.first_key(block_queries.x) + split * keys_per_split;
    const int key_end = min(band.key_end(block_queries.y, nk), key_begin + keys_per_split);
    const int n_tiles = key_end > key_begin ? (key_end - key_begin + kStageKeys - 1) / kStageKeys : 0;

    const auto k_row_at = [=](int n) { return n * k_row; };
    const auto v_row_at = [=](int n) { return n * v_row; };
    auto load_kv = [&](int tile) {
        if (tile < n_tiles) {
            const int stage = tile % STAGES;
            const int n0 = key_begin + tile * kStageKeys;
            T* k_stage_s = k_s + stage * kStageKeys * kPitch;
            T* v_stage_s = v_s + stage * kStageKeys * kPitch;
            if constexpr (kStridedRowsFit<kStageKeys, HD, kThreads>) {
                if (k_op.vec16 && v_op.vec16) {
                    load_strided_rows<T, kStageKeys, HD, kThreads>(k_stage_s, k_g, k_op, n0, nk);
                    load_strided_rows<T, kStageKeys, HD, kThreads>(v_stage_s, v_g, v_op, n0, nk);
                    cp_async_commit();
                    return;
                }
            }
            load_tile<T, kStageKeys, HD, kThreads>(k_stage_s, k_g, k_op, n0, nk, k_row_at);
            load_tile<T, kStageKeys, HD, kThreads>(v_stage_s, v_g, v_op, n0, nk, v_row_at);
        }
        cp_async_commit();  // empty groups keep the wait counts uniform
    };

    load_tile<T, kBlockM, HD, kThreads>(q_s, q_g, q_op, m0, nq, [=](int r) {
        return KEY_WARPS ? r / group_queries * q_group + r % group_queries * q_row : r * q_row;
    });
    cp_async_commit();
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) load_kv(t);
    cp_async_wait<STAGES - 1>();  // Q
    __syncthreads();

    const int warp_row0 = KEY_WARPS ? 0 : warp * 16 * MT;
    const int warp_key0 = KEY_WARPS ? warp * BN : 0;  // this warp's keys within a stage
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

    // Scores into log2 units (softcap: c tanh(s / c) first); mask (select, so a NaN key never
    // reaches a row that does not see it) only in tiles that cross the split end, nk, or an
    // edge of a row's window: every row of the warp sees the keys [clean_begin, clean_end).
    const bool capped = flags & kSoftcap;
    const int first_row = m0 + warp_row0;
    const int warp_end = min(first_row + 16 * MT, max(nq, first_row + 1));
    auto scale_and_mask = [&](Scores& s, int n0) {
        const int2 warp_queries = queries(first_row, warp_end);
        const int clean_begin = warp_queries.y + band.lo;
        const int clean_end = min(key_end, warp_queries.x + band.hi + 1);
        const bool need_mask = n0 < clean_begin || n0 + BN > clean_end;
        if (capped) {  // a uniform branch: the uncapped scores stay one multiply each
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][j][e] = fast_tanh(s[mt][j][e] * scale_log2) * softcap_log2;
        }
        const float scale = capped ? 1.f : scale_log2;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[mt][j][e] * scale;
                    if (need_mask) {
                        const int row = first_row + mt * 16 + lane / 4 + (e / 2) * 8;
                        const int col = n0 + j * 8 + (lane % 4) * 2 + (e % 2);
                        x = col < key_end && band.sees(col, query_of(row)) ? x : kNegInf;
                    }
                    s[mt][j][e] = x;
                }
    };

    // Online softmax: S becomes P, O and the row sums are rescaled. Each row lives in one
    // quad (4 lanes); fmaxf drops NaN from the max but exp2(NaN - m) brings it back into
    // the row's sum, so a NaN score still makes its row NaN.
    auto online_softmax = [&](Scores& s) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float alpha[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float tile_max = kNegInf;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mt][j][2 * h], s[mt][j][2 * h + 1]));
                tile_max = quad_max(tile_max);
                const float new_max = fmaxf(row_max[mt][h], tile_max);
                const float base = new_max == kNegInf ? 0.f : new_max;  // all masked so far: p = 0
                alpha[h] = fast_exp2(row_max[mt][h] - base);
                row_max[mt][h] = new_max;
                float sum = 0.f;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        s[mt][j][e] = fast_exp2(s[mt][j][e] - base);
                        sum += s[mt][j][e];
                    }
                row_sum[mt][h] = row_sum[mt][h] * alpha[h] + sum;
            }
            // Decode tiles skip the O rescale while no row max of the warp moved (most key
            // tiles of a long cache): HD / 2 multiplies a tile, a large share of a 16-key step.
            if (!KEY_WARPS || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
                for (int j = 0; j < HD / 8; ++j) {
                    o_acc[mt][j][0] *= alpha[0], o_acc[mt][j][1] *= alpha[0];
                    o_acc[mt][j][2] *= alpha[1], o_acc[mt][j][3] *= alpha[1];
                }
            }
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

    auto k_stage = [&](int tile) { return k_s + ((tile % STAGES) * kStageKeys + warp_key0) * kPitch; };
    auto v_stage = [&](int tile) { return v_s + ((tile % STAGES) * kStageKeys + warp_key0) * kPitch; };

    for (int tile = 0; tile < n_tiles; ++tile) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile landed for all threads; the stage refilled below is free
        load_kv(tile + STAGES - 1);
        const int n0 = key_begin + tile * kStageKeys + warp_key0;
        if (KEY_WARPS && n0 >= key_end) continue;  // this warp's keys of the last stage are all out
        Scores s;
        compute_scores(s, k_stage(tile));
        scale_and_mask(s, n0);
        online_softmax(s);
        accumulate_pv(s, v_stage(tile));
    }
    cp_async_wait<0>();  // no copy may outlive the block
    if constexpr (KEY_WARPS) {
        // Merge the warps' (max, sum, O) into warp 0 through the (now idle) K/V ring: every
        // warp publishes its row maxima and sums, rescales to the common max, and warps 1..
        // add their O fragments (stored by fragment index: conflict-free) into warp 0's.
        static_assert((WARPS - 1) * MT * HD / 8 * 4 * 32 + 2 * WARPS * 16 * MT <= 2 * STAGES * kStageKeys * kPitch / 2,
                      "the warp merge fits the K/V ring");
        float* row_max_s = reinterpret_cast<float*>(k_s);
        float* row_sum_s = row_max_s + WARPS * 16 * MT;
        float* o_s = row_sum_s + WARPS * 16 * MT;
        __syncthreads();  // every warp is done reading the ring
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float l = row_sum[mt][h] = quad_sum(row_sum[mt][h]);
                const int r = mt * 16 + lane / 4 + h * 8;
                if (lane % 4 == 0) row_max_s[warp * 16 * MT + r] = row_max[mt][h], row_sum_s[warp * 16 * MT + r] = l;
            }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = mt * 16 + lane / 4 + h * 8;
                float m = kNegInf;
#pragma unroll
                for (int w = 0; w < WARPS; ++w) m = fmaxf(m, row_max_s[w * 16 * MT + r]);
                const float base = m == kNegInf ? 0.f : m;
                const float alpha = fast_exp2(row_max[mt][h] - base);
#pragma unroll
                for (int j = 0; j < HD / 8; ++j) o_acc[mt][j][2 * h] *= alpha, o_acc[mt][j][2 * h + 1] *= alpha;
                if (warp == 0) {
                    float l = 0.f;
#pragma unroll
                    for (int w = 0; w < WARPS; ++w) l += row_sum_s[w * 16 * MT + r] * fast_exp2(row_max_s[w * 16 * MT + r] - base);
                    row_max[mt][h] = m;
                    row_sum[mt][h] = lane % 4 == 0 ? l : 0.f;  // the epilogue sums the quad
                }
            }
        auto o_slot = [&](int w, int mt, int j, int e) { return o_s + ((((w - 1) * MT + mt) * (HD / 8) + j) * 4 + e) * 32 + lane; };
        if (warp > 0) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) *o_slot(warp, mt, j, e) = o_acc[mt][j][e];
        }
        __syncthreads();
        if (warp > 0) return;  // warp 0 writes the block's rows
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < HD / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
#pragma unroll
                    for (int w = 1; w < WARPS; ++w) o_acc[mt][j][e] += *o_slot(w, mt, j, e);
    }

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
            float l = quad_sum(row_sum[mt][h]);
            const int stage_row = mt * 16 + lane / 4 + h * 8;
            const int row = m0 + warp_row0 + stage_row;
            const bool empty = l == 0.f;  // no key: 0, also where v holds NaN
            float row_m = row_max[mt][h], f = 1.f;
            if (sinks != nullptr && split == 0) {  // split 0 alone carries the sink; packed rows: their group's head
                int64 item = batch;
                if constexpr (KEY_WARPS) item = batch * (nq / group_queries) + row / group_queries;
                f = fold_sink_log2(sink_logit(sinks, sink_heads, item) * kLog2e, row_m, l);
            }
            const float inv = empty ? 0.f : f / l;
            // explicit 0 for an empty row: its O is 0 * V, NaN where V holds NaN
            auto o_value = [&](int j, int e) { return empty ? 0.f : o_acc[mt][j][2 * h + e] * inv; };
            if (!write_partial) {
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
                    *reinterpret_cast<unsigned*>(o_stage + stage_row * kPitch + j * 8 + (lane % 4) * 2) =
                        pack2<T>(o_value(j, 0), o_value(j, 1));
            }
            if (row >= nq) continue;
            const float m = row_m == kNegInf ? 0.f : row_m;
            const float row_lse = l == 0.f ? kNegInf : (m + __log2f(l)) * kLn2;
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
            copy_rows<uint4>(dst, o_stage, pitched, rows, dv, dv, lane, 32);
        } else {
            copy_rows<T>(dst, o_stage, pitched, rows, dv, dv, lane, 32);
        }
    }
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_fwd_mma;
