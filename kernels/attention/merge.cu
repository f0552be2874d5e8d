// attention_merge: the log-sum-exp merge of the float32 partials (O, lse) of a key split.
//
// Launched (cufuse/ops/attention/merge.py) after attention_fwd_mma or attention_decode
// whenever their plan splits the keys over several blocks (splits > 1).
#include "attention/layout.cuh"

namespace cufuse {
namespace attention {

// out = sum_s exp(lse_s - lse) o_s with lse = log sum_s exp(lse_s); splits whose keys were
// all masked (lse_s = -inf) weigh 0; a NaN partial makes the row NaN. One block of THREADS
// per row: a decode of one KV head has few rows and hundreds of splits, so the warps take
// interleaved splits (lane = column) and add their sums through shared memory in a fixed
// order (reproducible).
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                    T* __restrict__ out, float* __restrict__ lse, int64 rows, int dv, int splits, int write_lse) {
    constexpr int kWarps = THREADS / 32;
    constexpr int kMaxCols = 256;  // MAX_HEAD_DIM
    const float kNegInf = neg_infinity<float>();
    __shared__ float warp_s[kWarps];
    __shared__ float sums_s[kWarps][kMaxCols];
    const int64 row = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    // max and sum of the split weights: per thread, then per warp, then warp by warp in order
    auto block_reduce = [&](float x, bool is_max) {
        for (int off = 16; off >= 1; off /= 2) {
            const float y = __shfl_xor_sync(0xffffffffu, x, off);
            x = is_max ? nan_max(x, y) : x + y;
        }
        __syncthreads();  // the previous reduction's readers are done
        if (lane == 0) warp_s[warp] = x;
        __syncthreads();
        x = warp_s[0];
        for (int w = 1; w < kWarps; ++w) x = is_max ? nan_max(x, warp_s[w]) : x + warp_s[w];
        return x;
    };
    float max_lse = kNegInf;
    for (int s = threadIdx.x; s < splits; s += THREADS) max_lse = nan_max(max_lse, partial_lse[s * rows + row]);
    max_lse = block_reduce(max_lse, true);
    const float base = max_lse == kNegInf ? 0.f : max_lse;
    float total = 0.f;
    for (int s = threadIdx.x; s < splits; s += THREADS) total += __expf(partial_lse[s * rows + row] - base);
    total = block_reduce(total, false);
    const float inv = total == 0.f ? 0.f : 1.f / total;

    for (int c0 = 0; c0 < dv; c0 += 32) {
        const int c = c0 + lane;
        float acc = 0.f;
        for (int s = warp; s < splits; s += kWarps)
            if (c < dv) acc += __expf(partial_lse[s * rows + row] - base) * partial_o[(s * rows + row) * dv + c];
        sums_s[warp][c] = acc;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < dv; c += THREADS) {
        float acc = 0.f;
        for (int w = 0; w < kWarps; ++w) acc += sums_s[w][c];
        out[row * dv + c] = from_accum<T>(acc * inv);
    }
    if (write_lse && threadIdx.x == 0) lse[row] = total == 0.f ? kNegInf : base + __logf(total);
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_merge;
