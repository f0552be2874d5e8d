// Attention device code shared by the kernel families of kernels/attention/ (and
// kernels/paged_attention/): how a flat batch index maps to q, k and v (BatchLayout), the
// run-time flags, which keys a query row sees (KeyBand), the score transform (softcap), and
// the staged-rows copy of the O epilogue (mma and wgmma).
//
// Shapes: q (batch, nq, d), k (batch, nk, d), v (batch, nk, dv), out C-contiguous
// (batch, nq, dv), lse (batch, nq). The batch index is decomposed into up to four
// collapsed leading dims (BatchLayout), each tensor with its own strides (0 = broadcast),
// so MQA/GQA and strided views need no copy. All offsets are 64-bit.
#pragma once
#include "common/mma.cuh"

namespace cufuse {
namespace attention {

constexpr float kLn2 = 0.6931471805599453f;

// Flat batch index -> element offsets of q, k, v. Dims are outermost first; size0 is
// implicit (the grid covers it). Passed as 15 scalar kernel arguments (BATCH_LAYOUT_PARAMS),
// the argument kinds every launcher handles.
struct BatchLayout {
    int64 size1, size2, size3;
    int64 q0, q1, q2, q3;
    int64 k0, k1, k2, k3;
    int64 v0, v1, v2, v3;

    __device__ __forceinline__ void offsets(int64 b, int64& q, int64& k, int64& v) const {
        const int64 i3 = b % size3;
        b /= size3;
        const int64 i2 = b % size2;
        b /= size2;
        const int64 i1 = b % size1;
        const int64 i0 = b / size1;
        q = i0 * q0 + i1 * q1 + i2 * q2 + i3 * q3;
        k = i0 * k0 + i1 * k1 + i2 * k2 + i3 * k3;
        v = i0 * v0 + i1 * v1 + i2 * v2 + i3 * v3;
    }
};

#define BATCH_LAYOUT_PARAMS                                                                       \
    int64 size1, int64 size2, int64 size3, int64 q0, int64 q1, int64 q2, int64 q3, int64 k0, int64 k1, \
        int64 k2, int64 k3, int64 v0, int64 v1, int64 v2, int64 v3
#define BATCH_LAYOUT BatchLayout{size1, size2, size3, q0, q1, q2, q3, k0, k1, k2, k3, v0, v1, v2, v3}

// Run-time flags of the forward kernels (cufuse/ops/attention/problem.py writes them).
enum Flags : int { kCausal = 1, kWriteLse = 2, kVecQ = 4, kVecK = 8, kVecV = 16, kSoftcap = 32 };

// The keys query i sees: [i + lo, i + hi] within [0, nk). The host folds the bottom-right
// shift (nk - queries), the window (left, right) and causal (right capped at 0) into lo and
// hi, an unlimited side being -+kUnlimited; it keeps nk + nq below kUnlimited, so no sum
// overflows 32 bits.
constexpr int kUnlimited = 1 << 30;
// The first and last query (x, y) of rows [r0, r1) (r1 > r0) whose queries repeat every
// `period` rows (packed query heads: G x Nq rows, period Nq): a range inside one period, else
// all of its queries.
__device__ __forceinline__ int2 query_range(int r0, int r1, int period) {
    const bool one = r0 / period == (r1 - 1) / period;
    return one ? int2{r0 % period, (r1 - 1) % period} : int2{0, period - 1};
}

struct KeyBand {
    int lo, hi;
    __device__ __forceinline__ int first_key(int query) const { return max(0, query + lo); }
    __device__ __forceinline__ int key_end(int query, int nk) const { return min(nk, query + hi + 1); }
    __device__ __forceinline__ bool sees(int key, int query) const {
        const int offset = key - query;
        return offset >= lo && offset <= hi;
    }
};

// IEEE exp, log and tanh of the accumulator type (the float32 / float64 kernels: exact).
template <typename A> __device__ __forceinline__ A exact_exp(A x) {
    if constexpr (sizeof(A) == 4) return expf(x); else return exp(x);
}
template <typename A> __device__ __forceinline__ A exact_log(A x) {
    if constexpr (sizeof(A) == 4) return logf(x); else return log(x);
}
template <typename A> __device__ __forceinline__ A exact_tanh(A x) {
    if constexpr (sizeof(A) == 4) return tanhf(x); else return tanh(x);
}

// Attention sinks (gpt-oss): a learned logit of the row's head joins its softmax as one more key
// whose value is 0. A kernel folds it into the row's (max m, sum l) in its epilogue, in one key
// split only (split 0): the lse merge of the splits then gives the exact result. `sinks` null:
// none (every kernel tests that first, so the calls without sinks run as before).
constexpr float kLog2e = 1.4426950408889634f;

// The sink of batch item `item` (the host's flat item, times the packed group plus the row's
// group for packed rows): sinks[item % heads].
__device__ __forceinline__ float sink_logit(const float* sinks, int heads, int64 item) {
    return __ldg(sinks + item % heads);
}

// Folds the sink `sink` (in m's units: log2 with LOG2, MUFU ex2; else natural, IEEE exp) into a
// row's max m and sum l (of exp(s - m)); returns the factor of the row's unnormalised O. A row
// without keys (m = -inf, l = 0) gets m = sink, l = 1 and factor 0; a -inf sink changes nothing.
template <bool LOG2, typename A>
__device__ __forceinline__ A fold_sink(A sink, A& m, A& l) {
    auto exp_of = [](A x) {
        if constexpr (LOG2) return fast_exp2(x);
        else return exact_exp(x);
    };
    const A m2 = m > sink ? m : sink;  // a NaN sink leaves m, its exp makes l NaN
    const A base = m2 == neg_infinity<A>() ? A(0) : m2;
    const A f = m == neg_infinity<A>() ? A(0) : exp_of(m - base);
    l = l * f + exp_of(sink - base);
    m = m2;
    return f;
}
// The log2-unit float form of the 16-bit kernels.
__device__ __forceinline__ float fold_sink_log2(float sink2, float& m, float& l) {
    return fold_sink<true>(sink2, m, l);
}

// Soft-capping (Gemma 2, kSoftcap): a score s becomes c tanh(s scale / c). The kernels then
// take scale / c as their score scale and multiply tanh's result by c (c log2 e in log2 units).

// `threads` threads (this one is `tid`) copy `rows` x `cols` elements from shared memory
// (element (r, c) at src + place(r, c), a Chunk's elements contiguous) to rows of dst `pitch`
// elements apart, Chunk (sizeof(Chunk) / sizeof(T) elements, dividing cols and pitch) per thread
// and step: consecutive threads take consecutive chunks, so each store instruction is coalesced.
template <typename Chunk, typename T, typename Place>
__device__ __forceinline__ void copy_rows(T* dst, const T* src, Place place, int rows, int cols, int64 pitch, int tid,
                                          int threads) {
    constexpr int kElems = sizeof(Chunk) / sizeof(T);
    const int chunks = cols / kElems;
    for (int idx = tid; idx < rows * chunks; idx += threads) {
        const int r = idx / chunks, c = (idx % chunks) * kElems;
        *reinterpret_cast<Chunk*>(dst + r * pitch + c) =
            *reinterpret_cast<const Chunk*>(src + place(r, c));
    }
}

// The sequence b in [0, batch) with cu[b] <= t < cu[b + 1] (the last such b where lengths are 0);
// cu's entries are `stride` apart.
__device__ __forceinline__ int find_sequence(const int* cu, int64 stride, int batch, int t) {
    int lo = 0, hi = batch;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (__ldg(cu + mid * stride) <= t) lo = mid; else hi = mid;
    }
    return lo;
}

}  // namespace attention
}  // namespace cufuse
