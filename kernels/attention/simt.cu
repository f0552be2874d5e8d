// attention_fwd_simt: float32 / float64 attention without tensor cores, exact (IEEE exp
// and log, accumulation in the input's accumulator type), any head dim up to 256, any strides.
//
// Picked (cufuse/ops/attention/select.py) for every float32 and float64 call: the
// tensor-core kernels take 16-bit inputs only.
#include "common/attention_simt_row.cuh"

namespace cufuse {
namespace attention {

// float32/float64 path: one warp per query row (SimtRow), block = WARPS rows of one batch entry,
// over the keys the row's band (causal, window) sees.
template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_fwd_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       T* __restrict__ out, accum_t<T>* __restrict__ lse, int nq, int nk, int d, int dv,
                       int q_tiles, T scale, int flags, T softcap, int band_lo, int band_hi,
                       int64 q_row, int64 q_col, int64 k_row, int64 k_col,
                       int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS, const float* __restrict__ sinks,
                       int sink_heads) {
    using A = accum_t<T>;
    constexpr int kMaxHead = SimtRow<T>::kMaxHead;
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

    const KeyBand band{band_lo, band_hi};
    SimtRow<T> r;
    r.run(q_s[warp], d, dv, band.first_key(row), band.key_end(row, nk), flags & kSoftcap, to_accum(softcap),
          [&](int n) { return k_g + n * k_row; }, k_col, [&](int n) { return v_g + n * v_row; }, v_col);
    const int64 out_row = batch * nq + row;
    r.store(sinks, sink_heads, batch, out + out_row * dv, dv, (flags & kWriteLse) ? lse + out_row : nullptr);
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_fwd_simt;
