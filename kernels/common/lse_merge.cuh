// The log-sum-exp merge of a key split's float32 partials (O, lse): out = sum_s exp(lse_s -
// lse) o_s with lse = log sum_s exp(lse_s). Shared by attention_merge and
// paged_attention_merge.
//
// One block merges the columns [c0, c0 + 32) of one output row. Its warps take interleaved
// splits (lane = column) and each keeps an online (max, sum, O), so successive splits' loads
// do not wait on each other and stay in flight together (a loop that first reduced the lse
// and then summed O split after split measured 63 us for 512 splits of one row,
// docs/attention.md). The warps' states then combine in warp order: bitwise reproducible for
// a given block size. Splits whose keys were all masked (lse -inf, O 0) weigh 0; a NaN lse
// makes the row NaN.
#pragma once
#include "common/common.cuh"

namespace cufuse {

constexpr int kMergeMaxWarps = 32;
constexpr int kMergeColumns = 32;  // columns a block merges (one per lane)

// part_row(s): the partial row of split s (partial_lse[part_row], partial_o[part_row * dv]).
// lse_out: where the row's lse goes, or nullptr. Every thread of the block must call it.
template <typename T, int Group = 8, typename PartRow>
__device__ __forceinline__ void merge_partials(const float* __restrict__ partial_o,
                                               const float* __restrict__ partial_lse, PartRow part_row,
                                               int count, int dv, int c0, T* __restrict__ out_row,
                                               float* __restrict__ lse_out) {
    __shared__ float max_s[kMergeMaxWarps], sum_s[kMergeMaxWarps];
    __shared__ float o_s[kMergeMaxWarps][kMergeColumns];
    const float kNegInf = neg_infinity<float>();
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c = c0 + lane;
    const bool in_row = c < dv;
    float m = kNegInf, l = 0.f, acc = 0.f;
    auto merge = [&](float x, float o) {
        const float m_new = nan_max(m, x);
        const float base = m_new == kNegInf ? 0.f : m_new;
        const float scale = __expf(m - base), weight = __expf(x - base);
        acc = acc * scale + weight * o;
        l = l * scale + weight;
        m = m_new;
    };
    // Groups of Group splits load before the first merges: unrolled with an exit test a split,
    // the loop kept one split's two loads in flight a thread.
    int s = warp;
    for (; s + (Group - 1) * warps < count; s += Group * warps) {
        float x[Group], o[Group];
#pragma unroll
        for (int g = 0; g < Group; ++g) {
            const int64 part = part_row(s + g * warps);
            x[g] = partial_lse[part];
            o[g] = in_row ? partial_o[part * dv + c] : 0.f;
        }
#pragma unroll
        for (int g = 0; g < Group; ++g) merge(x[g], o[g]);
    }
    for (; s < count; s += warps) {
        const int64 part = part_row(s);
        merge(partial_lse[part], in_row ? partial_o[part * dv + c] : 0.f);
    }
    if (lane == 0) max_s[warp] = m, sum_s[warp] = l;
    o_s[warp][lane] = acc;
    __syncthreads();
    if (warp > 0) return;
    float max_all = kNegInf;
    for (int w = 0; w < warps; ++w) max_all = nan_max(max_all, max_s[w]);
    const float base = max_all == kNegInf ? 0.f : max_all;
    float total = 0.f, o = 0.f;
    for (int w = 0; w < warps; ++w) {
        const float f = __expf(max_s[w] - base);
        total += sum_s[w] * f;
        o += o_s[w][lane] * f;
    }
    if (in_row) out_row[c] = from_accum<T>(total == 0.f ? 0.f : o / total);
    if (lse_out != nullptr && c0 == 0 && lane == 0) *lse_out = total == 0.f ? kNegInf : base + __logf(total);
}

}  // namespace cufuse
