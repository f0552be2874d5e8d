// paged_kv_append: writes k_new (B, Hkv, Nnew, D) and v_new (B, Hkv, Nnew, Dv), or packed
// (Tnew, Hkv, D / Dv) with cu_new (sequence b's rows cu_new[b] ..< cu_new[b + 1]), into the pages
// of each sequence at positions seq_lens[b] ..< seq_lens[b] + its new rows, in place, one launch.
//
// Picked (cufuse/ops/paged_attention/append.py) for every kv_append call on the GPU, any dtype.
// One block per (b, KV head, new token), or (token, KV head) packed, which finds its sequence by
// a binary search over cu_new: it looks the token's page up once and copies its K and V rows
// (element stores: the rows are short and the op moves the new tokens, not the cache). A
// position past the table (max_pages * S) is skipped; pages out of range are the caller's
// contract (checked under CUFUSE_DEBUG=1 and on the NumPy path).
#include "paged_attention/paged.cuh"

namespace cufuse {
namespace paged {

template <typename T>
__global__ void __launch_bounds__(128)
    paged_kv_append(T* __restrict__ k_pages, T* __restrict__ v_pages, const T* __restrict__ k_new,
                    const T* __restrict__ v_new, const int* __restrict__ block_table,
                    const int* __restrict__ seq_lens, int batch_count, int heads_kv, int n_new, int d, int dv,
                    int page_size, int max_keys, const int* __restrict__ cu_new, int64 cu_new_stride, int64 k_page, int64 k_head, int64 k_row, int64 v_page, int64 v_head, int64 v_row,
                    int64 kn_batch, int64 kn_head, int64 kn_row, int64 kn_col, int64 vn_batch, int64 vn_head,
                    int64 vn_row, int64 vn_col, int64 table_row, int64 table_col, int64 lens_stride) {
    begin_dependent_grid();
    const SeqRows rows{cu_new, cu_new_stride, n_new, 1};
    int b, head, n;
    if (!rows.locate(blockIdx.x, batch_count, heads_kv, b, head, n)) return;  // a token no sequence owns
    const int position = __ldg(seq_lens + b * lens_stride) + n;
    if (position < 0 || position >= max_keys) return;
    const int page = __ldg(block_table + b * table_row + (position / page_size) * table_col);
    const int slot = position % page_size;
    T* k_dst = k_pages + page * k_page + head * k_head + slot * k_row;
    T* v_dst = v_pages + page * v_page + head * v_head + slot * v_row;
    const int64 src_row = rows.begin(b) + n;
    const T* k_src = k_new + b * kn_batch + head * kn_head + src_row * kn_row;
    const T* v_src = v_new + b * vn_batch + head * vn_head + src_row * vn_row;
    for (int c = threadIdx.x; c < d; c += blockDim.x) k_dst[c] = k_src[c * kn_col];
    for (int c = threadIdx.x; c < dv; c += blockDim.x) v_dst[c] = v_src[c * vn_col];
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_kv_append;
