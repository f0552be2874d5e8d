// attention_decode: decode (few query rows, long keys) as pure K/V streaming, float16 /
// bfloat16, head dims up to 256 (buckets 32, 64, 128, 256).
//
// Picked (cufuse/ops/attention/select.py) for 16-bit inputs with at most
// DECODE_STREAM_MAX_QUERIES (4) query rows whose k and v have unit column stride and 16-byte
// aligned rows; the keys are split over blocks (select.split_decode_keys) and the splits
// merged by attention_merge. Other decode shapes take attention_fwd_mma's one-warp tile.
#include "common/attention_layout.cuh"

namespace cufuse {
namespace attention {

// Decode (few query rows, long keys): pure K/V streaming without shared-memory staging.
// One block per (query row, key split, batch); its WARPS warps take interleaved groups of
// UNROLL * KEYS_PER_LOAD keys, so the block reads a contiguous stretch of K and V. A key row
// of HD elements is HD / 8 lanes of one 16-byte load each (KEYS_PER_LOAD = 256 / HD keys per
// warp load); all UNROLL K and V loads of a group are issued before any is used. Scores are
// reduced over the lanes of a key, the online softmax runs per warp in the log2 domain, and
// the warps merge through shared memory. Needs unit column stride and 16-byte aligned rows
// of k and v (the vec16 flags); q is read once with its strides.
template <typename T, int HD, int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32)
    attention_decode(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_o,
                     float* __restrict__ partial_lse, int nq, int nk, int d, int dv, int splits,
                     int keys_per_split, float scale_log2, int flags, float softcap_log2, int band_lo, int band_hi,
                     int64 q_row, int64 q_col, int64 k_row,
                     int64 k_col, int64 v_row, int64 v_col, BATCH_LAYOUT_PARAMS, const float* __restrict__ sinks,
                     int sink_heads) {
    begin_dependent_grid();
    static_assert(HD % 8 == 0 && 256 % HD == 0, "head dim: 8 lanes x 16 bytes divide a warp load");
    constexpr int kLanesPerKey = HD / 8;
    constexpr int kKeysPerLoad = 32 / kLanesPerKey;
    constexpr int kGroupKeys = UNROLL * kKeysPerLoad;
    const float kNegInf = neg_infinity<float>();
    __shared__ float warp_max_s[WARPS], warp_sum_s[WARPS];
    __shared__ float warp_o_s[WARPS][HD];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int chunk = lane % kLanesPerKey, key_in_load = lane / kLanesPerKey;
    const int col = chunk * 8;
    int64 bid = blockIdx.x;
    const int row = static_cast<int>(bid % nq);
    bid /= nq;
    const int split = static_cast<int>(bid % splits);
    const int64 batch = bid / splits;
    const int64 batch_count = gridDim.x / (static_cast<int64>(nq) * splits);

    int64 q_off, k_off, v_off;
    BATCH_LAYOUT.offsets(batch, q_off, k_off, v_off);
    float q_reg[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
        q_reg[e] = col + e < d ? to_accum(q[q_off + row * q_row + (col + e) * q_col]) * scale_log2 : 0.f;
    const T* k_g = k + k_off + col;
    const T* v_g = v + v_off + col;
    const bool k_cols = col < d, v_cols = col < dv;

    // The split's share of the keys the row's band (causal, window) sees.
    const KeyBand band{band_lo, band_hi};
    const int key_begin = band.first_key(row) + split * keys_per_split;
    const int key_end = min(band.key_end(row, nk), key_begin + keys_per_split);
    const bool capped = flags & kSoftcap;

    float row_max = kNegInf, row_sum = 0.f;  // warp-uniform max; sum over this lane's keys
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;

    for (int n0 = key_begin + warp * kGroupKeys; n0 < key_end; n0 += WARPS * kGroupKeys) {
        uint4 k_vec[UNROLL], v_vec[UNROLL];
        const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int key = n0 + u * kKeysPerLoad + key_in_load;
            const bool in = key < key_end;
            k_vec[u] = in && k_cols ? __ldg(reinterpret_cast<const uint4*>(k_g + key * k_row)) : zero;
            v_vec[u] = in && v_cols ? __ldg(reinterpret_cast<const uint4*>(v_g + key * v_row)) : zero;
        }
        float score[UNROLL];
        float group_max = kNegInf;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const T* kv = reinterpret_cast<const T*>(&k_vec[u]);
            float dot = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) dot += q_reg[e] * to_accum(kv[e]);
#pragma unroll
            for (int off = kLanesPerKey / 2; off >= 1; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (capped) dot = fast_tanh(dot) * softcap_log2;  // q holds scale / c: c tanh(s / c) in log2 units
            const int key = n0 + u * kKeysPerLoad + key_in_load;
            score[u] = key < key_end ? dot : kNegInf;
            group_max = fmaxf(group_max, score[u]);
        }
#pragma unroll
        for (int off = kLanesPerKey; off < 32; off *= 2)
            group_max = fmaxf(group_max, __shfl_xor_sync(0xffffffffu, group_max, off));
        const float new_max = fmaxf(row_max, group_max);
        const float base = new_max == kNegInf ? 0.f : new_max;  // all masked so far: p = 0
        const float alpha = fast_exp2(row_max - base);
        row_max = new_max;
        row_sum *= alpha;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= alpha;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const float p = fast_exp2(score[u] - base);  // NaN score: NaN p, NaN row
            row_sum += p;
            const T* vv = reinterpret_cast<const T*>(&v_vec[u]);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] += p * to_accum(vv[e]);
        }
    }

    // Lanes holding the same columns for different keys combine (same max: warp-uniform).
#pragma unroll
    for (int off = kLanesPerKey; off < 32; off *= 2) {
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, off);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], off);
    }
    if (lane == 0) warp_max_s[warp] = row_max, warp_sum_s[warp] = row_sum;
    if (key_in_load == 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e) warp_o_s[warp][col + e] = acc[e];
    }
    __syncthreads();

    float block_max = kNegInf;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) block_max = fmaxf(block_max, warp_max_s[w]);
    const float base = block_max == kNegInf ? 0.f : block_max;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += warp_sum_s[w] * fast_exp2(warp_max_s[w] - base);
    const bool empty = total == 0.f;  // no key: 0, also where v holds NaN
    float row_m = block_max, f = 1.f;
    if (sinks != nullptr && split == 0)  // split 0 alone carries the sink
        f = fold_sink_log2(sink_logit(sinks, sink_heads, batch) * kLog2e, row_m, total);
    const float inv = empty ? 0.f : f / total;
    const int64 out_row = batch * nq + row;
    const int64 part_row = (split * batch_count + batch) * nq + row;
    for (int c = threadIdx.x; c < dv; c += WARPS * 32) {
        float x = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) x += warp_o_s[w][c] * fast_exp2(warp_max_s[w] - base);
        x = empty ? 0.f : x * inv;
        if (splits > 1) partial_o[part_row * dv + c] = x;
        else out[out_row * dv + c] = from_accum<T>(x);
    }
    if (threadIdx.x == 0) {
        const float row_lse = total == 0.f ? kNegInf : (row_m + __log2f(total)) * kLn2;
        if (splits > 1) partial_lse[part_row] = row_lse;
        else if (flags & kWriteLse) lse[out_row] = row_lse;
    }
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_decode;
