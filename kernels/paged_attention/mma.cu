// paged_attention_mma: PagedAttention on tensor cores (mma.sync m16n8k16), float16 / bfloat16,
// head dims up to 256 (buckets 64, 128, 256), any page size, pages with any strides.
//
// Picked (cufuse/ops/paged_attention/select.py) for every 16-bit call; the tile by the query
// rows a KV head has in a unit (G x its query tile): up to 16 rows one row warp and 4 key
// warps, up to 32 two and two, beyond four row warps (row blocks of 64 rows). Sequences split
// over several units are merged by paged_attention_merge (merge.cu).
//
// Pack GQA: one block serves one KV head, and its rows are the G query heads x the queries of
// its unit, so each K/V page is read once per KV head and query tile. The block's work is one
// unit of the schedule (find_unit): a tile of q_tile queries of one sequence (all its Nq
// unpacked; with cu_seqlens_q a prefill chunk spans several tiles) and a range of the keys
// they see, each sequence's keys cut into units by its share of the batch's work, computed on
// the GPU from seq_lens and cu_seqlens_q. K/V tiles of BN keys stream through a STAGES-deep
// cp.async ring (16-byte copies where the pages allow, else element loads). The pages of a
// tile's keys are looked up one iteration before its copies issue, one thread a key, into a
// two-slot table of row offsets in shared memory, so that the copies wait on no block_table
// load and divide by no page size (docs/paged_attention.md §2, "Loads"). Each key warp takes
// its BN / KEY_WARPS keys of a tile with its own online softmax (log2 domain), and the key
// warps merge through shared memory at the end. A unit that is its query tile's only one
// writes out / lse; else float32 partials (O normalised, lse).
#include "paged_attention/paged.cuh"

namespace cufuse {
namespace paged {

template <typename T, int HD, int ROW_WARPS, int BN, int STAGES>
__global__ void __launch_bounds__(128)
    paged_attention_mma(const T* __restrict__ q, const T* __restrict__ k_pages, const T* __restrict__ v_pages,
                        const int* __restrict__ block_table, const int* __restrict__ seq_lens, T* __restrict__ out,
                        float* __restrict__ lse, float* __restrict__ partial_o, float* __restrict__ partial_lse,
                        int* __restrict__ unit_meta, int batch_count, int heads_kv, int group, int nq, int d, int dv,
                        int page_size, int max_keys, const int* __restrict__ cu_q, int64 cu_q_stride, int q_tile,
                        int row_blocks, int target_units, int min_chunk, float qk_scale,
                        float softcap_log2, int left, int right, int flags, int64 q_batch, int64 q_head, int64 q_row,
                        int64 q_col, int64 k_page, int64 k_head, int64 k_row, int64 v_page, int64 v_head,
                        int64 v_row, int64 table_row, int64 table_col, int64 lens_stride,
                        const float* __restrict__ sinks, int sink_heads) {
    begin_dependent_grid();
    constexpr int kThreads = 128, kWarps = 4;
    constexpr int kKeyWarps = kWarps / ROW_WARPS;
    constexpr int kWarpKeys = BN / kKeyWarps;
    constexpr int kBlockRows = 16 * ROW_WARPS;
    constexpr int kPitch = HD + 8;  // 8-row ldmatrix phases hit 8 distinct bank groups
    constexpr int kChunks = HD / 8;
    constexpr bool kQInRegs = HD <= 128;
    static_assert(HD % 32 == 0 && kWarpKeys % 16 == 0 && kWarps % ROW_WARPS == 0, "tile shape");
    static_assert(2 * STAGES * BN * kPitch * sizeof(T) >= (kKeyWarps * kBlockRows * (HD + 2)) * sizeof(float),
                  "the key warps' O, maxima and sums fit the K/V ring");
    static_assert((kBlockRows + 2 * STAGES * BN) * kPitch * sizeof(T) % 16 == 0, "offsets aligned");
    static_assert(kBlockRows * sizeof(int64) <= 2 * BN * sizeof(longlong2) && kBlockRows <= kThreads,
                  "a thread a row places the block's rows in the offsets' slots");
    const float kNegInf = neg_infinity<float>();

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* q_s = reinterpret_cast<T*>(smem_raw);
    T* k_s = q_s + kBlockRows * kPitch;
    T* v_s = k_s + STAGES * BN * kPitch;
    // Row offsets {k, v} of a tile's keys in the page pools, two tiles (by parity).
    longlong2* offsets_s = reinterpret_cast<longlong2*>(v_s + STAGES * BN * kPitch);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row_warp = warp % ROW_WARPS, key_warp = warp / ROW_WARPS;
    const int head = blockIdx.y / row_blocks;
    const int row0 = (blockIdx.y % row_blocks) * kBlockRows;
    const bool causal = flags & kCausal;
    const SeqRows queries{cu_q, cu_q_stride, nq, q_tile};

    const Unit* unit = find_unit<kThreads>(seq_lens, lens_stride, batch_count, max_keys, queries, left,
                                           causal ? 0 : right, gridDim.y, target_units, min_chunk, BN, blockIdx.x);
    if (unit == nullptr) return;
    const int b = unit->batch;
    if (threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x == unit->first)
        unit_meta[2 * b] = unit->first, unit_meta[2 * b + 1] = unit->count;
    const int tile_nq = unit->queries, rows = group * tile_nq;  // query rows of one KV head
    if (row0 >= rows) return;  // a short tile leaves row blocks without rows
    const Table table{block_table + b * table_row, table_col, page_size};
    const Pages<T> kp{k_pages + head * k_head, k_page, k_row};
    const Pages<T> vp{v_pages + head * v_head, v_page, v_row};
    const int key_begin = unit->key_begin, key_end = unit->key_end;
    const int n_tiles = max(0, (key_end - key_begin + BN - 1) / BN);
    const T zero = from_accum<T>(0.f);

    // Q rows of this block: row r is query head head * group + r / tile_nq, query query0 + r % tile_nq.
    const T* q_seq = q + b * q_batch + static_cast<int64>(unit->row_begin + unit->query0) * q_row;
    for (int idx = threadIdx.x; idx < kBlockRows * HD; idx += kThreads) {
        const int r = row0 + idx / HD, c = idx % HD;
        T x = zero;
        if (r < rows && c < d) x = q_seq[(head * group + r / tile_nq) * q_head + (r % tile_nq) * q_row + c * q_col];
        q_s[(idx / HD) * kPitch + c] = x;
    }

    // The offsets of key `key` in k_pages and v_pages (the row's first element).
    auto row_offsets = [&](int key) {
        const int page = table.page_of(key), slot = key % page_size;
        return make_longlong2(kp.offset(page, slot), vp.offset(page, slot));
    };
    // Tile `tile` of the unit into stage tile % STAGES: row r's offsets from offsets_of(r), rows
    // past the unit zero. Threads keep one 16-byte column chunk and step over rows (kChunks
    // threads a row), so a row's offsets are one broadcast shared load.
    auto issue_tile = [&](int tile, auto offsets_of) {
        if (tile < n_tiles) {
            T* ks = k_s + (tile % STAGES) * BN * kPitch;
            T* vs = v_s + (tile % STAGES) * BN * kPitch;
            const int n0 = key_begin + tile * BN;
            if (flags & kVecKV) {
                constexpr int kRowStep = kThreads / kChunks;
                static_assert(kThreads % kChunks == 0 && BN % kRowStep == 0, "threads cover whole rows");
                const int c = (threadIdx.x % kChunks) * 8, r0 = threadIdx.x / kChunks;
#pragma unroll
                for (int i = 0; i < BN / kRowStep; ++i) {
                    const int r = r0 + i * kRowStep;
                    const bool in = n0 + r < key_end;
                    const longlong2 off = in ? offsets_of(r) : make_longlong2(0, 0);
                    cp_async_16(ks + r * kPitch + c, kp.base + off.x + c, in && c < d);
                    cp_async_16(vs + r * kPitch + c, vp.base + off.y + c, in && c < dv);
                }
            } else {
#pragma unroll 1
                for (int idx = threadIdx.x; idx < BN * HD; idx += kThreads) {
                    const int r = idx / HD, c = idx % HD;
                    T kx = zero, vx = zero;
                    if (n0 + r < key_end) {
                        const longlong2 off = offsets_of(r);
                        if (c < d) kx = kp.base[off.x + c];
                        if (c < dv) vx = vp.base[off.y + c];
                    }
                    ks[r * kPitch + c] = kx, vs[r * kPitch + c] = vx;
                }
            }
        }
        cp_async_commit();  // empty groups keep the wait counts uniform
    };
    // Thread r < BN looks up key r of a tile (page_of: a global load, issued an iteration before
    // its result is stored) and stores its offsets in the tile's slot.
    const bool looks_up = threadIdx.x < BN;
    auto lookup = [&](int tile) {
        const int key = key_begin + tile * BN + static_cast<int>(threadIdx.x);
        return looks_up && tile < n_tiles && key < key_end ? row_offsets(key) : make_longlong2(0, 0);
    };
    auto store_offsets = [&](int tile, longlong2 off) {
        if (looks_up && tile < n_tiles) offsets_s[(tile % 2) * BN + threadIdx.x] = off;
    };

    // The first STAGES - 1 tiles look their pages up as they issue; tile STAGES - 1's offsets
    // are stored for iteration 0, which stores tile STAGES's in the other slot, and so on.
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) issue_tile(t, [&](int r) { return row_offsets(key_begin + t * BN + r); });
    store_offsets(STAGES - 1, lookup(STAGES - 1));
    __syncthreads();  // Q and the offsets stored

    const T* q_warp = q_s + row_warp * 16 * kPitch;
    unsigned q_frag[kQInRegs ? HD / 16 : 1][4];
    auto q_fragment = [&](int kk, unsigned (&a)[4]) {
        ldmatrix_x4(a, q_warp + (lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
    };
    if constexpr (kQInRegs) {
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) q_fragment(kk, q_frag[kk]);
    }

    // The windows of this thread's two rows (lane / 4 and lane / 4 + 8 of the warp's slice).
    RowWindow window[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = row0 + row_warp * 16 + lane / 4 + h * 8;
        window[h] = row_window(unit->position + r % tile_nq, causal, left, right);
    }

    float o_acc[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[j][e] = 0.f;
    float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};  // log2 units; sum quad-partial

    for (int tile = 0; tile < n_tiles; ++tile) {
        cp_async_wait<STAGES - 2>();
        // The tile landed for all threads, the stage refilled below is free, the offsets stored
        // last iteration are visible and the slot stored this iteration was last read before.
        __syncthreads();
        const int refill = tile + STAGES - 1;
        issue_tile(refill, [&](int r) { return offsets_s[(refill % 2) * BN + r]; });
        const longlong2 next_offsets = lookup(refill + 1);
        const T* k_tile = k_s + (tile % STAGES) * BN * kPitch + key_warp * kWarpKeys * kPitch;
        const T* v_tile = v_s + (tile % STAGES) * BN * kPitch + key_warp * kWarpKeys * kPitch;
        const int n0 = key_begin + tile * BN + key_warp * kWarpKeys;

        float s[kWarpKeys / 8][4];
#pragma unroll
        for (int j = 0; j < kWarpKeys / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            unsigned a[4];
            if constexpr (kQInRegs) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[e] = q_frag[kk][e];
            } else {
                q_fragment(kk, a);
            }
#pragma unroll
            for (int j = 0; j < kWarpKeys / 8; j += 2) {
                unsigned bf[4];
                ldmatrix_x4(bf, k_tile + (j * 8 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8);
                const unsigned b_lo[2] = {bf[0], bf[1]}, b_hi[2] = {bf[2], bf[3]};
                mma_16816<T>(s[j], a, b_lo);
                mma_16816<T>(s[j + 1], a, b_hi);
            }
        }

        // Scores into log2 units (softcap: c tanh(s / c) first), keys outside the unit or the
        // row's window masked by select, so a NaN key never reaches a row that does not see it.
#pragma unroll
        for (int j = 0; j < kWarpKeys / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[j][e] * qk_scale;
                if (flags & kSoftcap) x = fast_tanh(x) * softcap_log2;
                const int key = n0 + j * 8 + (lane % 4) * 2 + (e % 2);
                s[j][e] = key < key_end && window[e / 2].sees(key) ? x : kNegInf;
            }

        // Online softmax per row (one quad holds a row): S becomes P, O and sums rescaled.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = kNegInf;
#pragma unroll
            for (int j = 0; j < kWarpKeys / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
            tile_max = quad_max(tile_max);
            const float new_max = fmaxf(row_max[h], tile_max);
            const float base = new_max == kNegInf ? 0.f : new_max;  // all masked so far: p = 0
            const float alpha = fast_exp2(row_max[h] - base);
            row_max[h] = new_max;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < kWarpKeys / 8; ++j)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    s[j][e] = fast_exp2(s[j][e] - base);
                    sum += s[j][e];
                }
            row_sum[h] = row_sum[h] * alpha + sum;
#pragma unroll
            for (int j = 0; j < HD / 8; ++j) o_acc[j][2 * h] *= alpha, o_acc[j][2 * h + 1] *= alpha;
        }

        // O += P V, P re-packed from the S accumulators: k16 step t is S tiles 2t and 2t + 1.
#pragma unroll
        for (int t = 0; t < kWarpKeys / 16; ++t) {
            const unsigned p[4] = {pack2<T>(s[2 * t][0], s[2 * t][1]), pack2<T>(s[2 * t][2], s[2 * t][3]),
                                   pack2<T>(s[2 * t + 1][0], s[2 * t + 1][1]),
                                   pack2<T>(s[2 * t + 1][2], s[2 * t + 1][3])};
#pragma unroll
            for (int j = 0; j < HD / 8; j += 2) {
                unsigned bf[4];
                ldmatrix_x4_trans(bf, v_tile + (t * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + (j + lane / 16) * 8);
                const unsigned b_lo[2] = {bf[0], bf[1]}, b_hi[2] = {bf[2], bf[3]};
                mma_16816<T>(o_acc[j], p, b_lo);
                mma_16816<T>(o_acc[j + 1], p, b_hi);
            }
        }
        store_offsets(refill + 1, next_offsets);  // last, so the page load's latency hides behind the tile
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages: they hold the key warps' O now

    // The key warps' (max, sum, O) merge in a fixed order: O staged unscaled as float in the
    // stage memory, [key warp][block row][HD].
    float* o_stage = reinterpret_cast<float*>(k_s);
    float(*max_s)[kBlockRows] = reinterpret_cast<float(*)[kBlockRows]>(o_stage + kKeyWarps * kBlockRows * HD);
    float(*sum_s)[kBlockRows] = max_s + kKeyWarps;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = quad_sum(row_sum[h]);
        const int r = row_warp * 16 + lane / 4 + h * 8;
        if (lane % 4 == 0) max_s[key_warp][r] = row_max[h], sum_s[key_warp][r] = l;
        float* dst = o_stage + (key_warp * kBlockRows + r) * HD + (lane % 4) * 2;
#pragma unroll
        for (int j = 0; j < HD / 8; ++j) dst[j * 8] = o_acc[j][2 * h], dst[j * 8 + 1] = o_acc[j][2 * h + 1];
    }
    __syncthreads();

    // A sequence of one unit a tile writes out / lse; else partials of q_tile x G rows a KV head.
    // The unit's facts again from shared memory: no registers held them through the loop.
    const int seq = unit->batch, seq_first = unit->row_begin, first_query = unit->query0;
    const int queries_here = unit->queries;
    const bool direct = unit->count == 1;
    const int64 part_row0 = (static_cast<int64>(blockIdx.x) * heads_kv + head) * group * q_tile + row0;
    const int block_rows = min(kBlockRows, group * queries_here - row0);
    // Each row's place in out / lse or the partials, once a row (the offsets' slots are free now).
    int64* out_rows_s = reinterpret_cast<int64*>(offsets_s);
    if (const int r = threadIdx.x; r < block_rows) {  // kBlockRows <= kThreads
        const int packed = row0 + r;
        out_rows_s[r] = direct ? queries.out_row(seq, seq_first, head * group + packed / queries_here,
                                                 first_query + packed % queries_here, heads_kv * group)
                               : part_row0 + r;
    }
    __syncthreads();
    const bool sink_unit = sinks != nullptr && unit->split == 0;  // a tile's first unit carries the sink
    // Row r's merged (max m, sum total) over the key warps, O's shift `base`, the sink folded into m and total;
    // returns O's factor, `empty`: the row saw no key.
    auto merged = [&](int r, float& base, float& m, float& total, bool& empty) {
        m = kNegInf;
#pragma unroll
        for (int w = 0; w < kKeyWarps; ++w) m = fmaxf(m, max_s[w][r]);
        base = m == kNegInf ? 0.f : m;
        total = 0.f;
#pragma unroll
        for (int w = 0; w < kKeyWarps; ++w) total += sum_s[w][r] * fast_exp2(max_s[w][r] - base);
        empty = total == 0.f;
        const int hq = head * group + (row0 + r) / queries_here;
        return sink_unit ? attention::fold_sink_log2(attention::sink_logit(sinks, sink_heads, hq) * attention::kLog2e,
                                                     m, total)
                         : 1.f;
    };
    for (int idx = threadIdx.x; idx < block_rows * dv; idx += kThreads) {
        const int r = idx / dv, c = idx % dv;
        float base, m, total;
        bool empty;
        const float f = merged(r, base, m, total, empty);
        float x = 0.f;
#pragma unroll
        for (int w = 0; w < kKeyWarps; ++w) x += o_stage[(w * kBlockRows + r) * HD + c] * fast_exp2(max_s[w][r] - base);
        x = empty ? 0.f : x * f / total;  // explicit 0 for a row that saw no key
        if (direct) out[out_rows_s[r] * dv + c] = from_accum<T>(x);
        else partial_o[out_rows_s[r] * dv + c] = x;
    }
    for (int r = threadIdx.x; r < block_rows; r += kThreads) {
        float base, m, total;
        bool empty;
        merged(r, base, m, total, empty);
        const float row_lse = total == 0.f ? kNegInf : ((m == kNegInf ? 0.f : m) + __log2f(total)) * kLn2;
        if (!direct) partial_lse[out_rows_s[r]] = row_lse;
        else if (flags & kWriteLse) lse[out_rows_s[r]] = row_lse;
    }
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_mma;
