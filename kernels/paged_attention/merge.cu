// paged_attention_merge: the log-sum-exp merge of the float32 partials (O, lse) that
// paged_attention_mma writes for sequences whose keys it split over several work units.
//
// Launched (cufuse/ops/paged_attention/mma.py) after paged_attention_mma whenever the
// host's bound on a sequence's keys (max_pages * S) exceeds one unit's minimum chunk, so
// that some sequence may have been split; rows of unsplit sequences return at once (the
// forward kernel wrote them). attention_merge (kernels/attention/merge.cu) does not fit: its
// splits are a fixed count per call, here every sequence has its own unit range.
#include "paged_attention/paged.cuh"

namespace cufuse {
namespace paged {

// One block per output row (b, KV head, packed row); unit_meta[2b], [2b + 1]: the first unit
// of sequence b and how many it has. out = sum_u exp(lse_u - lse) o_u in unit order (bitwise
// reproducible); units whose keys were all masked (lse_u = -inf) weigh 0; NaN propagates.
template <typename T>
__global__ void __launch_bounds__(128)
    paged_attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                          const int* __restrict__ unit_meta, T* __restrict__ out, float* __restrict__ lse,
                          int rows_per_batch, int dv, int write_lse) {
    const float kNegInf = neg_infinity<float>();
    const int64 row = blockIdx.x;
    const int b = static_cast<int>(row / rows_per_batch), row_in_batch = static_cast<int>(row % rows_per_batch);
    const int first = unit_meta[2 * b], count = unit_meta[2 * b + 1];
    if (count <= 1) return;
    auto part = [&](int u) { return static_cast<int64>(first + u) * rows_per_batch + row_in_batch; };
    float max_lse = kNegInf;
    for (int u = 0; u < count; ++u) max_lse = nan_max(max_lse, partial_lse[part(u)]);
    const float base = max_lse == kNegInf ? 0.f : max_lse;
    float total = 0.f;
    for (int u = 0; u < count; ++u) total += __expf(partial_lse[part(u)] - base);
    const float inv = total == 0.f ? 0.f : 1.f / total;
    for (int c = threadIdx.x; c < dv; c += blockDim.x) {
        float acc = 0.f;
        for (int u = 0; u < count; ++u) acc += __expf(partial_lse[part(u)] - base) * partial_o[part(u) * dv + c];
        out[row * dv + c] = from_accum<T>(acc * inv);
    }
    if (write_lse && threadIdx.x == 0) lse[row] = total == 0.f ? kNegInf : base + __logf(total);
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_merge;
