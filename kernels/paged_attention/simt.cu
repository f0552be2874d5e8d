// paged_attention_simt: PagedAttention for float32 / float64 without tensor cores, exact (IEEE
// exp, log and tanh, accumulation in the input's accumulator type), head dims up to 256.
//
// Picked (cufuse/ops/paged_attention/select.py) for every float32 and float64 call: the
// tensor-core kernel takes 16-bit inputs only. One warp per query row (b, query head, query), or
// (token, query head) packed with cu_q (found by a binary search over cu_q), over all the keys
// its window sees; no key split.
#include "common/attention_simt_row.cuh"
#include "paged_attention/paged.cuh"

namespace cufuse {
namespace paged {

template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    paged_attention_simt(const T* __restrict__ q, const T* __restrict__ k_pages, const T* __restrict__ v_pages,
                         const int* __restrict__ block_table, const int* __restrict__ seq_lens, T* __restrict__ out,
                         accum_t<T>* __restrict__ lse, int batch_count, int heads_kv, int group, int nq, int d, int dv,
                         int page_size, int max_keys, const int* __restrict__ cu_q, int64 cu_q_stride, T scale,
                         T softcap, int left, int right, int flags, int64 q_batch, int64 q_head, int64 q_row,
                         int64 q_col, int64 k_page, int64 k_head, int64 k_row, int64 v_page, int64 v_head, int64 v_row,
                         int64 table_row, int64 table_col, int64 lens_stride, const float* __restrict__ sinks, int sink_heads) {
    using A = accum_t<T>;
    constexpr int kMaxHead = attention::SimtRow<T>::kMaxHead;
    __shared__ A q_s[WARPS][kMaxHead];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int heads_q = heads_kv * group;
    const int64 row = static_cast<int64>(blockIdx.x) * WARPS + warp;  // out's row, flat
    const SeqRows queries{cu_q, cu_q_stride, nq, 1};
    if (row >= (cu_q == nullptr ? static_cast<int64>(batch_count) : 1) * heads_q * nq) return;
    int b, hq, i;
    const bool owned = queries.locate(row, batch_count, heads_q, b, hq, i);
    const int head = hq / group;
    const T* q_g = q + b * q_batch + static_cast<int64>(queries.begin(b) + i) * q_row + hq * q_head;
    for (int c = lane; c < d; c += 32) q_s[warp][c] = owned ? to_accum(q_g[c * q_col]) * to_accum(scale) : A(0);
    __syncwarp();

    const int length = owned ? clamp_length(seq_lens, lens_stride, b, max_keys) : 0;
    const int position = owned ? i + length - queries.count(b) : -1;  // a packed row no sequence owns sees no key
    const Table table{block_table + b * table_row, table_col, page_size};
    const Pages<T> kp{k_pages + head * k_head, k_page, k_row};
    const Pages<T> vp{v_pages + head * v_head, v_page, v_row};
    const RowWindow window = row_window(position, flags & kCausal, left, right);
    const int key_begin = max(0, window.lo), key_end = min(length, window.hi + 1);
    attention::SimtRow<T> r;
    r.run(q_s[warp], d, dv, key_begin, key_end, flags & kSoftcap, to_accum(softcap),
          [&](int n) { return kp.base + kp.offset(table.page_of(n), n % page_size); }, 1,
          [&](int n) { return vp.base + vp.offset(table.page_of(n), n % page_size); }, 1);
    r.store(sinks, sink_heads, hq, out + row * dv, dv, (flags & kWriteLse) ? lse + row : nullptr);
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_simt;
