// Device code shared by the kernel families of kernels/paged_attention/: where a key of a
// sequence lives in the page pool, which keys a query row sees (causal, window), the score
// transform (scale, softcap) and the work schedule that splits long sequences' keys.
//
// Shapes: q (B, Hq, Nq, D) with any strides; k_pages (P, Hkv, S, D) and v_pages
// (P, Hkv, S, Dv) with unit last stride; block_table (B, max_pages) and seq_lens (B,) int32
// with any strides. Query head hq uses KV head hq / G (G = Hq / Hkv). Query i of sequence b
// sits at position p = i + L - Nq, L = its clamped length (see clamp_length).
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

// One work unit: keys [key_begin, key_end) of sequence `batch`, which `count` units
// (first ... first + count - 1) share.
struct Unit {
    int batch, key_begin, key_end, first, count;
};

// The unit with index `unit` of the schedule every block recomputes from seq_lens (no host
// synchronisation): a sequence with v visible keys gets n = round(v * target_units /
// (blocks_per_unit * total visible keys)) units, at least one (an empty one for a sequence
// without keys) and no chunk under `min_chunk` keys, each of ceil(v / n) keys rounded up to
// `align` (its last one shorter). Rounding to the nearest count, not up from a common chunk,
// keeps equal lengths at whole waves (8 x 8192 keys, 8 KV heads, 132 slots: 2 units a sequence,
// 128 blocks, not 3 and 192). There are at most target_units / blocks_per_unit + B / 2 units
// (the host sizes the grid by target_units / blocks_per_unit + B). Returns false past the last
// unit. All THREADS threads of the block call it.
template <int THREADS>
__device__ bool find_unit(const int* seq_lens, int64 lens_stride, int batch_count, int max_keys, int nq, int left,
                          int blocks_per_unit, int target_units, int min_chunk, int align, int unit, Unit& found) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "block size");
    constexpr int kWarps = THREADS / 32;
    __shared__ long long warp_total[kWarps];
    __shared__ int warp_units[kWarps];
    __shared__ Unit result;
    __shared__ int found_flag;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    auto visible = [&](int b) {
        const int length = clamp_length(seq_lens, lens_stride, b, max_keys);
        return length - first_visible_key(length, nq, left);
    };

    long long total = 0;
    for (int b = tid; b < batch_count; b += THREADS) total += visible(b);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(0xffffffffu, total, off);
    if (lane == 0) warp_total[warp] = total;
    if (tid == 0) found_flag = 0;
    __syncthreads();
    total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += warp_total[w];
    // (units, keys a unit) of a sequence with v visible keys
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
        int count, chunk;
        split(visible(b), count, chunk);
        units += count;
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
            const int length = clamp_length(seq_lens, lens_stride, b, max_keys);
            const int lo = first_visible_key(length, nq, left);
            int count, chunk;
            split(length - lo, count, chunk);
            if (unit < first + count) {
                const int begin = lo + (unit - first) * chunk;
                result = Unit{b, begin, min(length, begin + chunk), first, count};
                found_flag = 1;
                break;
            }
            first += count;
        }
    }
    __syncthreads();
    found = result;
    return found_flag != 0;
}

}  // namespace paged
}  // namespace cufuse
