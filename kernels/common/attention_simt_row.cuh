// The query row of the SIMT attention kernels (attention_fwd_simt, paged_attention_simt,
// attention_varlen_simt): one warp a row, exact in the accumulator type (IEEE exp, log, tanh).
// Lanes take one key each for the scores (the row's scaled q in shared memory), then the warp
// accumulates P V with lanes over the value columns (up to 8 each: dv <= 256).
#pragma once
#include "common/attention_layout.cuh"

namespace cufuse {
namespace attention {

template <typename T> struct SimtRow {
    using A = accum_t<T>;
    static constexpr int kMaxHead = 256, kColsPerLane = kMaxHead / 32;
    A row_max, row_sum, acc[kColsPerLane];

    // Online softmax over keys [key_begin, key_end): key_row(n) / value_row(n) point at key n's
    // row, whose columns are k_col / v_col apart; softcap c (capped): c tanh(s / c) of each score.
    template <typename KeyRow, typename ValueRow>
    __device__ __forceinline__ void run(const A* q_s, int d, int dv, int key_begin, int key_end, bool capped, A cap,
                                        KeyRow key_row, int64 k_col, ValueRow value_row, int64 v_col) {
        const int lane = threadIdx.x % 32;
        const A neg_inf = neg_infinity<A>();
        row_max = neg_inf, row_sum = 0;
#pragma unroll
        for (int i = 0; i < kColsPerLane; ++i) acc[i] = 0;
        for (int n0 = key_begin; n0 < key_end; n0 += 32) {
            const int key = n0 + lane;
            A score = neg_inf;
            if (key < key_end) {
                const T* k_g = key_row(key);
                A dot = 0;
                for (int c = 0; c < d; ++c) dot += q_s[c] * to_accum(k_g[c * k_col]);
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
                const T* v_g = value_row(n0 + t);
#pragma unroll
                for (int i = 0; i < kColsPerLane; ++i) {
                    const int c = lane + 32 * i;
                    if (c < dv) acc[i] += pt * to_accum(v_g[c * v_col]);
                }
            }
        }
    }

    // The row's epilogue: the sink (natural units; sinks null: none) folded in, out_row's dv
    // columns written (0 for a row without keys, also where v holds NaN), and lse (null: none).
    __device__ __forceinline__ void store(const float* sinks, int sink_heads, int64 sink_item, T* out_row, int dv,
                                          A* lse_row) {
        const int lane = threadIdx.x % 32;
        const A neg_inf = neg_infinity<A>();
        const bool empty = row_sum == A(0);
        if (sinks != nullptr) {
            const A f = fold_sink<false>(A(sink_logit(sinks, sink_heads, sink_item)), row_max, row_sum);
#pragma unroll
            for (int i = 0; i < kColsPerLane; ++i) acc[i] *= f;
        }
#pragma unroll
        for (int i = 0; i < kColsPerLane; ++i) {
            const int c = lane + 32 * i;
            if (c < dv) out_row[c] = from_accum<T>(empty ? A(0) : acc[i] / row_sum);
        }
        if (lse_row != nullptr && lane == 0) {
            const A base = row_max == neg_inf ? A(0) : row_max;
            *lse_row = row_sum == A(0) ? neg_inf : base + exact_log(row_sum);
        }
    }
};

}  // namespace attention
}  // namespace cufuse
