// Device code shared by the logsumexp kernels (kernels/logsumexp/*.cu): the row statistics of
// a logsumexp with optional weights b (LseStats), their merge between threads, blocks and the
// parts of a split row (a fixed tree, so every call gives the same bits), the masked loads of
// a row read as aligned 16-byte vectors whatever its alignment, and SciPy's final rules.
//
// Rows are softmax's (outer, length, inner) view (kernels/softmax/statistics.cuh): element l
// of row r = (o, i) at a[o*so + i*si + l*sl], its weight at b[o*bo + i*bi + l*bl] (stride 0
// along broadcast axes); one value per row at value[r] (and its sign at sign[r]).
//
// Statistics: m = the NaN-keeping max over the kept entries (b != 0; all entries without b),
// s = sum of b * exp(x - shift(m)), shift(m) = m except 0 while m is -inf; `dropped`: a
// dropped entry (b == 0) was +inf or NaN, which SciPy's direct fallback turns into NaN when
// the stable result is not finite.
#pragma once

#include "common/row_chunk.cuh"

namespace cufuse {
namespace lse_detail {

using namespace softmax_detail;

template <typename A> __device__ __forceinline__ A shift_of(A m) { return m == neg_infinity<A>() ? A(0) : m; }
// exp(x - shift), exactly 1 where x == shift, except +inf for +inf entries under a +inf max:
// their weighted sum is then +-inf, or NaN where the weights' signs differ (SciPy's result).
template <typename A> __device__ __forceinline__ A exp_rel(A x, A shift) {
    return x == shift ? (isinf(shift) ? shift : A(1)) : exp_accum_ftz(x - shift);
}

template <typename A> struct LseStats {
    A m = neg_infinity<A>(), s = A(0);
    bool dropped = false;

    // s * factor, except an infinite s (from infinite weights) stays: the factor may underflow
    // to 0 where the true product is infinite.
    static __device__ __forceinline__ A rescaled(A s, A factor) { return isinf(s) ? s : s * factor; }
    __device__ __forceinline__ void merge(const LseStats& o) {
        const A big = max_nan(m, o.m), shift = shift_of(big);
        s = rescaled(s, exp_rel(m, shift)) + rescaled(o.s, exp_rel(o.m, shift));
        m = big;
        dropped = dropped || o.dropped;
    }
    // Count weighted entries (a[j], w[j]) at once: one rescale, one exp an entry. Only the first
    // `valid` enter the sum (a short column's rung pads its entries with -inf and weight 0:
    // no exps for them).
    template <int Count> __device__ __forceinline__ void add_weighted(const A (&a)[Count], const A (&w)[Count], int valid = Count) {
        A x[Count];
        A big = m;
#pragma unroll
        for (int j = 0; j < Count; ++j) {
            const bool drop = w[j] == A(0);
            dropped = dropped || (drop && !(a[j] < -neg_infinity<A>()));  // a dropped +inf or NaN
            x[j] = drop ? neg_infinity<A>() : a[j];
            big = max_nan(big, x[j]);
        }
        const A shift = shift_of(big);
        A sum = rescaled(s, exp_rel(m, shift));
#pragma unroll
        for (int j = 0; j < Count; ++j)
            if (j < valid) sum += isinf(w[j]) && x[j] > neg_infinity<A>() ? w[j] : w[j] * exp_rel(x[j], shift);
        s = sum;
        m = big;
    }
    // Count entries without weights (the cheap rule: a +inf max leaves s NaN, which the final
    // rule of unweighted rows ignores); the first `valid` enter the sum, the others are -inf.
    template <int Count> __device__ __forceinline__ void add(const A (&a)[Count], int valid = Count) {
        A big = m;
#pragma unroll
        for (int j = 0; j < Count; ++j) big = max_nan(big, a[j]);
        add_under(a, big, valid);
    }
    // The same where the caller knows big, the max of m and the entries (16-bit columns take
    // it on packed pairs: no float copy of an entry lives from the max to the sum).
    template <int Count> __device__ __forceinline__ void add_under(const A (&a)[Count], A big, int valid = Count) {
        const A shift = shift_of(big);
        A sum = s * exp_accum_ftz(m - shift);
#pragma unroll
        for (int j = 0; j < Count; ++j)
            if (j < valid) sum += exp_accum_ftz(a[j] - shift);
        s = sum;
        m = big;
    }
};

template <typename A> __device__ __forceinline__ LseStats<A> shfl_xor(const LseStats<A>& v, int offset) {
    LseStats<A> r;
    r.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
    r.s = __shfl_xor_sync(0xffffffffu, v.s, offset);
    r.dropped = __shfl_xor_sync(0xffffffffu, int(v.dropped), offset) != 0;
    return r;
}

// Merge over the Group threads of a row (a fixed tree: shuffles, then the warps of the block
// in order when Group == Threads). The result is valid in every thread of a sub-warp group and
// in thread 0 of a block group. `slots` holds Threads/32 stats.
template <int Group, int Threads, typename A>
__device__ __forceinline__ LseStats<A> group_merge(LseStats<A> v, LseStats<A>* slots) {
    constexpr int WarpWidth = Group < 32 ? Group : 32;
#pragma unroll
    for (int offset = WarpWidth / 2; offset > 0; offset >>= 1) v.merge(shfl_xor(v, offset));
    if constexpr (Group > 32) {
        static_assert(Group == Threads, "a group wider than a warp is the whole block");
        if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 1; w < Threads / 32; ++w) v.merge(slots[w]);
        __syncthreads();
    }
    return v;
}

// SciPy's result for a row's statistics: v = log|S| (S the weighted sum) and its sign sg (+1,
// -1, 0, NaN); a negative S without return_sign (`with_sign`) is NaN. Unweighted: m + log(s),
// or m itself when m is +inf (sign 1), -inf (all -inf: sign 0) or NaN.
template <bool Weighted, typename A>
__device__ __forceinline__ void row_result(const LseStats<A>& st, bool with_sign, A& v, A& sg) {
    if constexpr (Weighted) {
        v = shift_of(st.m) + log(fabs(st.s));
        sg = st.s > A(0) ? A(1) : st.s < A(0) ? A(-1) : st.s == A(0) ? A(0) : nan_value<A>();
        if (v != v || (st.dropped && !isfinite(v))) v = sg = nan_value<A>();
    } else {
        v = isfinite(st.m) ? st.m + log(st.s) : st.m;
        sg = st.m == neg_infinity<A>() ? A(0) : st.m != st.m ? nan_value<A>() : A(1);
    }
    if (!with_sign && sg < A(0)) v = nan_value<A>();
}

// row_result of row r stored: value[r], and sign[r] where sign is not null (return_sign).
template <bool Weighted, typename T, typename A>
__device__ __forceinline__ void store_result(const LseStats<A>& st, T* value, T* sign, int64 r) {
    A v, sg;
    row_result<Weighted>(st, sign != nullptr, v, sg);
    if (sign != nullptr) sign[r] = from_accum<T>(sg);
    value[r] = from_accum<T>(v);
}

// A split row: the part's statistics go to partials[item * parts + part] (3 accumulators:
// m, s, dropped); the block that arrives last at counters[item] merges every part with a fixed
// tree (a thread per part, in order where parts > Threads) and resets the counter. Returns
// true in the block (all its threads) that now holds the item's merged stats in thread 0.
// A call: it runs once a block, and inlined its registers made the bfloat16 rows spill.
template <int Threads, typename A>
__device__ __noinline__ bool merge_parts(LseStats<A>& st, LseStats<A>* slots, A* partials, unsigned* counters,
                                            int64 item, int parts, int part) {
    A* mine = partials + 3 * (item * parts + part);
    if (threadIdx.x == 0) mine[0] = st.m, mine[1] = st.s, mine[2] = st.dropped ? A(1) : A(0);
    if (!last_to_arrive(reinterpret_cast<int*>(counters + item), parts)) return false;
    LseStats<A> v;
    for (int p = threadIdx.x; p < parts; p += Threads) {
        const volatile A* q = partials + 3 * (item * parts + p);  // written by other blocks: not through L1
        LseStats<A> o;
        o.m = q[0], o.s = q[1], o.dropped = q[2] != A(0);
        v.merge(o);
    }
    st = group_merge<Threads, Threads>(v, slots);
    if (threadIdx.x == 0) counters[item] = 0;  // left zero for the next call on this stream
    return true;
}

// Strided elements p .. p + VS of a slot (those in [lo, hi); `fill` elsewhere): a call, so
// that the 64-bit address of every element is not held live across the tile (inlined, the
// 16-bit and double kernels spilled).
template <typename T>
__device__ __noinline__ Vec16<T> load_strided_slot(const T* base, int64 stride, int64 p, int64 lo, int64 hi, T fill) {
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) r.v[j] = p + j >= lo && p + j < hi ? base[(p + j) * stride] : fill;
    return r;
}

// The 16-byte slot of a row at coordinate p: coordinates count elements from `base` (the
// row's first element less `head`, so that p multiple of VS is a 16-byte aligned address when
// vec); only coordinates in [lo, hi) belong to the row (and to this part), the others read as
// `fill`. vec: unit stride and aligned (one vector load, masked at the ends); else one load an
// element at stride `stride`.
template <typename T>
__device__ __forceinline__ Vec16<T> load_slot(const T* base, int64 stride, bool vec, int64 p, int64 lo, int64 hi, T fill) {
    constexpr int VS = Vec16<T>::size;
    if (!vec) return load_strided_slot(base, stride, p, lo, hi, fill);
    Vec16<T> r;
    if (p + VS > lo && p < hi) {
        r = load_vec16(base + p);
#pragma unroll
        for (int j = 0; j < VS; ++j)
            if (p + j < lo || p + j >= hi) r.v[j] = fill;
    } else {
#pragma unroll
        for (int j = 0; j < VS; ++j) r.v[j] = fill;
    }
    return r;
}

}  // namespace lse_detail
}  // namespace cufuse
