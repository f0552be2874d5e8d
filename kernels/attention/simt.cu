// attention_fwd_simt: float32 / float64 attention without tensor cores, exact (IEEE exp
// and log, accumulation in the input's accumulator type), any head dim up to 256, any strides.
//
// Picked (cufuse/ops/attention/select.py) for every float32 and float64 call: the
// tensor-core kernels take 16-bit inputs only.
#include "common/attention_layout.cuh"

namespace cufuse {
namespace attention {

// float32/float64 path: one warp per query row, block = WARPS rows of one batch entry, over the
// keys the row's band (causal, window) sees; softcap c: c tanh(s / c) of each scaled score.
// Lanes take one key each for the scores (q row in shared memory), then the warp
// accumulates P V with lanes over the head dim (up to 8 columns each: dv <= 256).
template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_fwd_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       T* __restrict__ out, accum_t<T>* __restrict__ lse, int nq, int nk, int d, int dv,
                       int q_tiles, T scale, int flags, T softcap, int band_lo, int band_hi,
                       int64 q_row, int64 q_col, int64 k_row, int64 k_col,
                       int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS, const float* __restrict__ sinks,
                       int sink_heads) {
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

    const KeyBand band{band_lo, band_hi};
    const int key_begin = band.first_key(row), key_end = band.key_end(row, nk);
    const bool capped = flags & kSoftcap;
    const A cap = to_accum(softcap);
    const A neg_inf = neg_infinity<A>();
    A row_max = neg_inf, row_sum = 0;
    A acc[kColsPerLane];
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) acc[i] = 0;

    for (int n0 = key_begin; n0 < key_end; n0 += 32) {
        const int key = n0 + lane;
        A score = neg_inf;
        if (key < key_end) {
            const T* k_row_ptr = k_g + key * k_row;
            A dot = 0;
            for (int c = 0; c < d; ++c) dot += q_s[warp][c] * to_accum(k_row_ptr[c * k_col]);
            score = capped ? cap * exact_tanh(dot / cap) : dot;  // q holds the scale
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
    const bool empty = row_sum == A(0);  // no key: 0, also where v holds NaN
    if (sinks != nullptr) {  // natural units here
        const A f = fold_sink<false>(A(sink_logit(sinks, sink_heads, batch)), row_max, row_sum);
#pragma unroll
        for (int i = 0; i < kColsPerLane; ++i) acc[i] *= f;
    }
    const int64 out_row = batch * nq + row;
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < dv) out[out_row * dv + c] = from_accum<T>(empty ? A(0) : acc[i] / row_sum);
    }
    if ((flags & kWriteLse) && lane == 0) {
        const A base = row_max == neg_inf ? A(0) : row_max;
        lse[out_row] = row_sum == A(0) ? neg_inf : base + exact_log(row_sum);
    }
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_fwd_simt;
