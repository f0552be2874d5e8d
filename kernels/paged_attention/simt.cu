// paged_attention_simt: PagedAttention for float32 / float64 without tensor cores, exact (IEEE
// exp, log and tanh, accumulation in the input's accumulator type), head dims up to 256.
//
// Picked (cufuse/ops/paged_attention/select.py) for every float32 and float64 call: the
// tensor-core kernel takes 16-bit inputs only. One warp per query row (b, query head, query),
// over all the keys its window sees; no key split.
#include "paged_attention/paged.cuh"

namespace cufuse {
namespace paged {

using attention::exact_exp;
using attention::exact_log;
using attention::exact_tanh;

template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    paged_attention_simt(const T* __restrict__ q, const T* __restrict__ k_pages, const T* __restrict__ v_pages,
                         const int* __restrict__ block_table, const int* __restrict__ seq_lens, T* __restrict__ out,
                         accum_t<T>* __restrict__ lse, int batch_count, int heads_kv, int group, int nq, int d, int dv,
                         int page_size, int max_keys, T scale, T softcap, int left, int right, int flags,
                         int64 q_batch, int64 q_head, int64 q_row, int64 q_col, int64 k_page, int64 k_head,
                         int64 k_row, int64 v_page, int64 v_head, int64 v_row, int64 table_row, int64 table_col,
                         int64 lens_stride, const float* __restrict__ sinks, int sink_heads) {
    using A = accum_t<T>;
    constexpr int kMaxHead = 256, kColsPerLane = kMaxHead / 32;
    __shared__ A q_s[WARPS][kMaxHead];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int heads_q = heads_kv * group;
    const int64 row = static_cast<int64>(blockIdx.x) * WARPS + warp;  // (b, query head, query) flat
    if (row >= static_cast<int64>(batch_count) * heads_q * nq) return;
    const int i = static_cast<int>(row % nq), hq = static_cast<int>(row / nq % heads_q);
    const int b = static_cast<int>(row / (static_cast<int64>(nq) * heads_q));
    const int head = hq / group;
    const T* q_g = q + b * q_batch + hq * q_head + i * q_row;
    for (int c = lane; c < d; c += 32) q_s[warp][c] = to_accum(q_g[c * q_col]) * to_accum(scale);
    __syncwarp();

    const int length = clamp_length(seq_lens, lens_stride, b, max_keys);
    const Table table{block_table + b * table_row, table_col, page_size};
    const Pages<T> kp{k_pages + head * k_head, k_page, k_row};
    const Pages<T> vp{v_pages + head * v_head, v_page, v_row};
    const RowWindow window = row_window(i + length - nq, flags & kCausal, left, right);
    const int key_begin = max(0, window.lo), key_end = min(length, window.hi + 1);
    const A neg_inf = neg_infinity<A>();
    const A cap = to_accum(softcap);
    A row_max = neg_inf, row_sum = 0;
    A acc[kColsPerLane];
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c) acc[c] = 0;

    for (int n0 = key_begin; n0 < key_end; n0 += 32) {
        const int key = n0 + lane;
        A score = neg_inf;
        if (key < key_end) {
            const T* k_g = kp.base + kp.offset(table.page_of(key), key % page_size);
            A dot = 0;
            for (int c = 0; c < d; ++c) dot += q_s[warp][c] * to_accum(k_g[c]);
            score = (flags & kSoftcap) ? cap * exact_tanh(dot / cap) : dot;
        }
        const A new_max = nan_max(row_max, warp_max(score));
        const A base = new_max == neg_inf ? A(0) : new_max;
        const A alpha = exact_exp(row_max - base);
        const A p = exact_exp(score - base);
        row_sum = row_sum * alpha + warp_sum(p);
        row_max = new_max;
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) acc[c] *= alpha;
        const int keys = min(32, key_end - n0);
        for (int t = 0; t < keys; ++t) {
            const A pt = __shfl_sync(0xffffffffu, p, t);
            const int key_t = n0 + t;
            const T* v_g = vp.base + vp.offset(table.page_of(key_t), key_t % page_size);
#pragma unroll
            for (int c = 0; c < kColsPerLane; ++c)
                if (lane + 32 * c < dv) acc[c] += pt * to_accum(v_g[lane + 32 * c]);
        }
    }
    const bool empty = row_sum == A(0);  // no key: 0, also where v holds NaN
    if (sinks != nullptr) {  // natural units here
        const A f = attention::fold_sink<false>(A(attention::sink_logit(sinks, sink_heads, hq)), row_max, row_sum);
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) acc[c] *= f;
    }
#pragma unroll
    for (int c = 0; c < kColsPerLane; ++c)
        if (lane + 32 * c < dv) out[row * dv + lane + 32 * c] = from_accum<T>(empty ? A(0) : acc[c] / row_sum);
    if ((flags & kWriteLse) && lane == 0) {
        const A base = row_max == neg_inf ? A(0) : row_max;
        lse[row] = row_sum == A(0) ? neg_inf : base + exact_log(row_sum);
    }
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_simt;
