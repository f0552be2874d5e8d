// attention_varlen_simt: attention over ragged packed batches (attention_varlen): q (Tq, Hq, D),
// k (Tk, Hkv, D), v (Tk, Hkv, Dv) with any strides, sequence b owning query rows
// cu_q[b] ..< cu_q[b + 1] and keys cu_k[b] ..< cu_k[b + 1]. Every dtype, any head dim up to 256.
//
// One warp per query row (token t, query head h): the warp finds its sequence by a binary search
// over cu_q on the device (the host never reads cu_seqlens: no synchronisation), then runs over
// the keys its band sees (causal bottom-right and window within the sequence), as
// attention_fwd_simt does. Exact in the accumulator type (IEEE exp, log, tanh). Query head h uses
// KV head h / group. Out-of-range offsets are the caller's contract; the kernel clamps key ranges
// to [0, Tk) so that it never reads outside k and v.
#include "common/attention_simt_row.cuh"

namespace cufuse {
namespace attention {

template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_varlen_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const int* __restrict__ cu_q, const int* __restrict__ cu_k, T* __restrict__ out,
                          accum_t<T>* __restrict__ lse, int batch, int tq, int tk, int heads_q, int group, int d,
                          int dv, accum_t<T> scale, accum_t<T> softcap, int left, int right, int flags,
                          int64 q_tok, int64 q_head, int64 q_col, int64 k_tok, int64 k_head, int64 k_col,
                          int64 v_tok, int64 v_head, int64 v_col, int64 cu_q_stride, int64 cu_k_stride,
                          const float* __restrict__ sinks, int sink_heads) {
    using A = accum_t<T>;
    constexpr int kMaxHead = SimtRow<T>::kMaxHead;
    __shared__ A q_s[WARPS][kMaxHead];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = blockIdx.x * WARPS + warp, hq = blockIdx.y;
    if (t >= tq) return;
    int q_begin = t, nq = 1, k_begin = 0, nk = 0;  // no sequence (B = 0 while Tq > 0): no key
    if (batch > 0) {
        const int b = find_sequence(cu_q, cu_q_stride, batch, t);
        q_begin = __ldg(cu_q + b * cu_q_stride), nq = __ldg(cu_q + (b + 1) * cu_q_stride) - q_begin;
        k_begin = min(max(__ldg(cu_k + b * cu_k_stride), 0), tk);
        nk = min(max(__ldg(cu_k + (b + 1) * cu_k_stride), k_begin), tk) - k_begin;
    }
    const int i = t - q_begin;
    const T* q_g = q + t * q_tok + hq * q_head;
    const T* k_g = k + k_begin * k_tok + (hq / group) * k_head;
    const T* v_g = v + k_begin * v_tok + (hq / group) * v_head;
    for (int c = lane; c < d; c += 32) q_s[warp][c] = to_accum(q_g[c * q_col]) * scale;
    __syncwarp();

    // keys [key_begin, key_end) of the sequence the row at position p = i + nk - nq sees
    const long long p = static_cast<long long>(i) + nk - nq;
    const long long hi_key = (flags & kCausal) ? p : (right < 0 ? nk - 1LL : p + right);  // causal caps right at 0
    const long long lo_key = left < 0 ? 0LL : p - left;
    const int key_begin = static_cast<int>(max(0LL, lo_key));
    const int key_end = static_cast<int>(min(static_cast<long long>(nk), hi_key + 1));
    SimtRow<T> r;
    r.run(q_s[warp], d, dv, key_begin, key_end, flags & kSoftcap, softcap, [&](int n) { return k_g + n * k_tok; },
          k_col, [&](int n) { return v_g + n * v_tok; }, v_col);
    const int64 out_row = static_cast<int64>(t) * heads_q + hq;
    r.store(sinks, sink_heads, hq, out + out_row * dv, dv, (flags & kWriteLse) ? lse + out_row : nullptr);
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_varlen_simt;
