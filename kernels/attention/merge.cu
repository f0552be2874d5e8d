// attention_merge: the log-sum-exp merge of the float32 partials (O, lse) of a key split.
//
// Launched (cufuse/ops/attention/merge.py) after attention_fwd_mma or attention_decode
// whenever their plan splits the keys over several blocks (splits > 1).
#include "attention/layout.cuh"

namespace cufuse {
namespace attention {

// out = sum_s exp(lse_s - lse) o_s with lse = log sum_s exp(lse_s); splits whose keys were
// all masked (lse_s = -inf) weigh 0; a NaN partial makes the row NaN. One block per row.
template <typename T>
__global__ void __launch_bounds__(128)
    attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                    T* __restrict__ out, float* __restrict__ lse, int64 rows, int dv, int splits, int write_lse) {
    const float kNegInf = neg_infinity<float>();
    const int64 row = blockIdx.x;
    float max_lse = kNegInf;
    for (int s = 0; s < splits; ++s) max_lse = nan_max(max_lse, partial_lse[s * rows + row]);
    const float base = max_lse == kNegInf ? 0.f : max_lse;
    float total = 0.f;
    for (int s = 0; s < splits; ++s) total += __expf(partial_lse[s * rows + row] - base);
    const float inv = total == 0.f ? 0.f : 1.f / total;
    for (int c = threadIdx.x; c < dv; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < splits; ++s)
            acc += __expf(partial_lse[s * rows + row] - base) * partial_o[(s * rows + row) * dv + c];
        out[row * dv + c] = from_accum<T>(acc * inv);
    }
    if (write_lse && threadIdx.x == 0) lse[row] = total == 0.f ? kNegInf : base + __logf(total);
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_merge;
