// Device code shared by the kernel families of kernels/paged_attention/: where a key of a
// sequence lives in the page pool, which keys a query row sees (causal, window), the score
// transform (scale, softcap) and the work schedule that splits long sequences' keys.
//
// Shapes: q (B, Hq, Nq, D), or packed (Tq, Hq, D) with cu_seqlens_q (SeqRows), with any
// strides; k_pages (P, Hkv, S, D) and v_pages (P, Hkv, S, Dv) with unit last stride;
// block_table (B, max_pages) and seq_lens (B,) int32 with any strides. Query head hq uses KV
// head hq / G (G = Hq / Hkv). Query i of sequence b (of nq_b queries) sits at position
// p = i + L - nq_b, L = its clamped length (see clamp_length).
#pragma once
#include "common/attention_layout.cuh"

namespace cufuse {
namespace paged {

using attention::kLn2;

// Run-time flags (cufuse/ops/paged_attention/problem.py writes them).
enum Flags : int { kCausal = 1, kWriteLse = 2, kVecKV = 4, kSoftcap = 8 };

// One KV head of the page pool of k or v: the element (page, slot, col) at
// base + page * page_stride + slot * row_stride + col.
template <typename T> struct Pages {
    const T* base;
    int64 page_stride, row_stride;
    __device__ __forceinline__ int64 offset(int page, int slot) const {
        return page * page_stride + slot * row_stride;
    }
};

// The table of one sequence: the page holding key n is table[(n / page_size) * col_stride].
struct Table {
    const int* row;
    int64 col_stride;
    int page_size;
    __device__ __forceinline__ int page_of(int key) const { return __ldg(row + (key / page_size) * col_stride); }
};

// seq_lens[b] clamped to [0, max_keys] (max_pages * S): a length past the table reads no
// entry beyond it. Out-of-range lengths and pages are the caller's contract (checked on the
// NumPy path and under CUFUSE_DEBUG=1); the clamp only keeps the kernels inside the table.
__device__ __forceinline__ int clamp_length(const int* seq_lens, int64 stride, int b, int max_keys) {
    return min(max(__ldg(seq_lens + b * stride), 0), max_keys);
}

using attention::find_sequence;

// The query rows (or kv_append's new rows) of each sequence: `bound` (Nq) a sequence when `cu`
// is null, else packed, sequence b owning rows cu[b] ..< cu[b + 1] of `bound` (Tq), clamped to
// [0, bound] so that a bad prefix sum never leaves q or out. A work unit takes `tile` rows of
// one sequence (Nq when not packed).
struct SeqRows {
    const int* cu;
    int64 cu_stride;
    int bound, tile;
    __device__ __forceinline__ int begin(int b) const {
        return cu == nullptr ? 0 : min(max(__ldg(cu + b * cu_stride), 0), bound);
    }
    __device__ __forceinline__ int count(int b) const {
        if (cu == nullptr) return bound;
        const int first = begin(b);
        return min(max(__ldg(cu + (b + 1) * cu_stride), first), bound) - first;
    }
    __device__ __forceinline__ int tiles(int count) const { return (count + tile - 1) / tile; }
    // cu[b] <= cu[b + 1]: where every b has it, the sequences' rows never overlap (the host's grid bound)
    __device__ __forceinline__ bool ordered(int b) const {
        return cu == nullptr || __ldg(cu + b * cu_stride) <= __ldg(cu + (b + 1) * cu_stride);
    }
    // The row of (sequence b's row i, head h) in a C-contiguous (B, heads, Nq) or packed
    // (T, heads) output; `first` = begin(b).
    __device__ __forceinline__ int64 out_row(int b, int first, int h, int i, int heads) const {
        return cu == nullptr ? (static_cast<int64>(b) * heads + h) * bound + i
                             : static_cast<int64>(first + i) * heads + h;
    }
    // Output row `row` (the order out_row gives) -> (sequence b, head h, row i of b); false for
    // a packed row that no sequence owns (a prefix sum outside the caller's contract).
    __device__ __forceinline__ bool locate(int64 row, int batch_count, int heads, int& b, int& h, int& i) const {
        if (cu == nullptr) {
            i = static_cast<int>(row % bound), h = static_cast<int>(row / bound % heads);
            b = static_cast<int>(row / (static_cast<int64>(bound) * heads));
            return true;
        }
        const int t = static_cast<int>(row / heads);
        h = static_cast<int>(row % heads);
        b = batch_count > 0 ? find_sequence(cu, cu_stride, batch_count, t) : 0;
        i = t - begin(b);
        return batch_count > 0 && i >= 0 && i < count(b);
    }
};

// Keys of a sequence of length L any of its nq query rows sees: [first_visible_key, L). With a
// left window (left >= 0) the first query (p = L - nq) sees back to p - left; the last query
// (p = L - 1) sees up to L - 1 whatever the right window.
__device__ __forceinline__ int first_visible_key(int length, int nq, int left) {
    return left < 0 ? 0 : max(0, length - nq - left);
}

// Keys [lo, hi] a query at position p sees (hi may pass the length: keys stop at L anyway).
// left / right < 0: unlimited on that side (kUnlimited; the host clamps windows to it and
// keeps max_pages * S below it, so p +- a window never overflows); causal caps right at 0.
using attention::kUnlimited;
struct RowWindow {
    int lo, hi;
    __device__ __forceinline__ bool sees(int key) const { return key >= lo && key <= hi; }
};
__device__ __forceinline__ RowWindow row_window(int p, bool causal, int left, int right) {
    const int right_limit = causal ? 0 : (right < 0 ? kUnlimited : right);  // windows are >= 0
    return RowWindow{left < 0 ? -kUnlimited : p - left, p + right_limit};
}

// One work unit: keys [key_begin, key_end) of sequence `batch` for one query tile, the
// `queries` queries from `query0` of the sequence (rows from row_begin + query0 of packed q),
// the first at key position `position`; the sequence's every tile is split into `count` units
// (split 0 ... count - 1), the units of tile t being first + t * count ... + count - 1.
struct Unit {
    int batch, key_begin, key_end, first, count, split, row_begin, query0, queries, position;
};

// The unit with index `unit` of the schedule every block recomputes from seq_lens and the
// query rows (no host synchronisation): a sequence with v visible keys and n_t query tiles
// weighs w = v * n_t and gets n = round(v * target_units / (blocks_per_unit * total weight))
// splits a tile, at least one (an empty one for a sequence without keys) and no chunk under
// `min_chunk` keys, each of ceil(v / n) keys rounded up to `align` (its last one shorter); a
// sequence without queries gets no unit. Rounding to the nearest count, not up from a common
// chunk, keeps equal lengths at whole waves (8 x 8192 keys, 8 KV heads, 132 slots: 2 units a
// sequence, 128 blocks, not 3 and 192). There are at most target_units / blocks_per_unit +
// (the query tiles) units: + B unpacked, + floor(Tq / tile) + B packed (the host's grid). A
// unit's keys are those of its split that its tile's queries see (`right_limit`: causal 0, else
// the right window, -1 unlimited), so a prefill tile skips the keys of later queries.
// Returns the unit in shared memory (read again after a long loop, its fields need no
// registers meanwhile), null past the last unit (and for all where the query rows' prefix sums
// decrease). All THREADS threads of the block call it.
template <int THREADS>
__device__ const Unit* find_unit(const int* seq_lens, int64 lens_stride, int batch_count, int max_keys,
                                 SeqRows queries, int left, int right_limit, int blocks_per_unit, int target_units,
                                 int min_chunk, int align, int unit) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block size");
    constexpr int kWarps = THREADS / 32;
    __shared__ long long warp_total[kWarps];
    __shared__ int warp_units[kWarps];
    __shared__ Unit result;
    __shared__ int found_flag;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // (clamped length, first visible key, query tiles) of sequence b
    auto sequence = [&](int b, int& length, int& lo) {
        length = clamp_length(seq_lens, lens_stride, b, max_keys);
        const int nq = queries.count(b);
        lo = first_visible_key(length, nq, left);
        return queries.tiles(nq);
    };

    long long total = 0;
    bool ordered = true;
    for (int b = tid; b < batch_count; b += THREADS) {
        int length, lo;
        const int tiles = sequence(b, length, lo);
        total += static_cast<long long>(length - lo) * tiles;
        ordered &= queries.ordered(b);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(0xffffffffu, total, off);
    // -1 (totals are >= 0): the warp met decreasing prefix sums, whose overlapping rows could outgrow the grid
    const bool warp_ordered = __all_sync(0xffffffffu, ordered);
    if (lane == 0) warp_total[warp] = warp_ordered ? total : -1;
    if (tid == 0) found_flag = 0;
    __syncthreads();
    total = 0;
    bool all_ordered = true;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += warp_total[w], all_ordered &= warp_total[w] >= 0;
    if (!all_ordered) return nullptr;  // invalid prefix sums: no unit, results unspecified but no access out of bounds
    // (units a tile, keys a unit) of a sequence with v visible keys
    auto split = [&](int v, int& count, int& chunk) {
        long long n = total > 0 ? (2 * static_cast<long long>(v) * target_units + total * blocks_per_unit) /
                                      (2 * total * blocks_per_unit)
                                : 1;
        n = max(1LL, min(n, static_cast<long long>(v / min_chunk)));
        chunk = static_cast<int>((v + n - 1) / n + align - 1) / align * align;
        count = v > 0 ? (v + chunk - 1) / chunk : 1;
    };

    // Each thread owns a contiguous run of sequences; an exclusive scan of the runs' unit
    // counts places them, and the owner of `unit` fills in `result`.
    const int per = (batch_count + THREADS - 1) / THREADS;
    const int b_begin = min(batch_count, tid * per), b_end = min(batch_count, b_begin + per);
    int units = 0;
    for (int b = b_begin; b < b_end; ++b) {
        int length, lo, count, chunk;
        const int tiles = sequence(b, length, lo);
        split(length - lo, count, chunk);
        units += tiles * count;
    }
    int inclusive = units;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const int x = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += x;
    }
    if (lane == 31) warp_units[warp] = inclusive;
    __syncthreads();
    int start = inclusive - units;
    for (int w = 0; w < warp; ++w) start += warp_units[w];
    if (unit >= start && unit < start + units) {
        int first = start;
        for (int b = b_begin; b < b_end; ++b) {
            int length, lo, count, chunk;
            const int tiles = sequence(b, length, lo);
            split(length - lo, count, chunk);
            if (unit < first + tiles * count) {
                const int tile = (unit - first) / count, part = (unit - first) % count;
                const int n_q = queries.count(b), query0 = tile * queries.tile;
                const int tile_nq = min(queries.tile, n_q - query0), position = query0 + length - n_q;
                // the tile's last query (at length - room - 1, room >= 0) sees right_limit keys further
                const int room = length - position - tile_nq;
                const int seen_end = right_limit < 0 || right_limit >= room ? length : length - room + right_limit;
                const int begin = lo + part * chunk;
                result = Unit{b, max(begin, left < 0 ? 0 : position - left), min(min(length, begin + chunk), seen_end),
                              first, count, part, queries.begin(b), query0, tile_nq, position};
                found_flag = 1;
                break;
            }
            first += tiles * count;
        }
    }
    __syncthreads();
    return found_flag != 0 ? &result : nullptr;
}

}  // namespace paged
}  // namespace cufuse
