// The two halves of a softmax whose reduction is split across arrays (cufuse.dask: a row that
// spans several chunks, on one GPU or several). Picked by cufuse.ops.softmax.partials, never by
// softmax() itself:
//   softmax_rows_lse / softmax_cols_lse  one read of a chunk, one value per row: the log of the
//       row's sum of exps (its logsumexp, SciPy's non-finite rules: +inf with a +inf entry,
//       -inf when every entry is -inf, NaN with a NaN), in the accumulator type. Rows whose
//       elements are contiguous (sl == 1) take a block a row (16-byte loads where the row
//       starts aligned); strided ones (the reduced axis leading) a thread a row, so that a warp
//       reads 32 adjacent rows at once.
//   softmax_apply_lse  the second pass: exp(x - lse) (NaN where lse is not finite: SciPy's row
//       of NaN) or x - lse (log_softmax), lse merged from every chunk's partial.
// Rows are the (outer, length, inner) view of every softmax kernel (statistics.cuh).
#include "common/statistics.cuh"

namespace cufuse {
namespace softmax_detail {

// (max, sum of exp(x - max)) of the elements seen so far by one thread, `count` at a time:
// one rescale per group, so about one exp an element.
template <typename A, int Count> __device__ __forceinline__ void online_add(A& m, A& s, const A (&v)[Count]) {
    A big = m;
#pragma unroll
    for (int j = 0; j < Count; ++j) big = max_nan(big, v[j]);
    if (big == neg_infinity<A>()) return;  // all -inf so far: nothing to add
    s = rescale(s, m, big);
#pragma unroll
    for (int j = 0; j < Count; ++j) s += exp_accum_ftz(v[j] - big);
    m = big;
}
template <typename A> __device__ __forceinline__ void online_merge(A& m, A& s, A other_m, A other_s) {
    const A big = max_nan(m, other_m);
    s = rescale(s, m, big) + rescale(other_s, other_m, big);
    m = big;
}
template <typename A> __device__ __forceinline__ A lse_of(A m, A s) { return isfinite(m) ? m + log(s) : m; }

template <typename T, typename A = accum_t<T>> __device__ __forceinline__ A apply_one(A v, A a, bool log) {
    // a NaN argument instead of a branch around the exp (double's exp call spilled in a branch)
    return log ? v - a : exp_accum(isfinite(a) ? v - a : nan_value<A>());
}

}  // namespace softmax_detail
}  // namespace cufuse

using namespace cufuse;
using namespace cufuse::softmax_detail;

// A block of Threads a row: rows = outer * inner, row r = (r / inner, r % inner).
template <typename T, int Threads>
__global__ void __launch_bounds__(Threads) softmax_rows_lse(const T* __restrict__ x, accum_t<T>* __restrict__ lse,
                                                            int64 length, int64 inner, int64 so, int64 si, int64 sl) {
    using A = accum_t<T>;
    constexpr int VS = Vec16<T>::size;
    const int64 row = blockIdx.x;
    const T* base = x + (row / inner) * so + (row % inner) * si;
    A m = neg_infinity<A>(), s = A(0);
    int64 done = 0;
    if (sl == 1 && aligned16(base)) {
        done = length / VS * VS;
        for (int64 l = threadIdx.x * VS; l < done; l += Threads * VS) {
            const Vec16<T> r = load_vec16(base + l);
            A v[VS];
#pragma unroll
            for (int j = 0; j < VS; ++j) v[j] = to_accum(r.v[j]);
            online_add(m, s, v);
        }
    }
    for (int64 l = done + threadIdx.x; l < length; l += Threads) {
        const A v[1] = {to_accum(base[l * sl])};
        online_add(m, s, v);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    __shared__ A warp_m[Threads / 32], warp_s[Threads / 32];
    if (threadIdx.x % 32 == 0) warp_m[threadIdx.x / 32] = m, warp_s[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < Threads / 32; ++w) online_merge(m, s, warp_m[w], warp_s[w]);
        lse[row] = lse_of(m, s);
    }
}

// A thread a row (adjacent threads: adjacent inner indices, so loads coalesce when si == 1).
template <typename T, int Threads>
__global__ void __launch_bounds__(Threads) softmax_cols_lse(const T* __restrict__ x, accum_t<T>* __restrict__ lse,
                                                            int64 rows, int64 length, int64 inner, int64 so, int64 si,
                                                            int64 sl) {
    using A = accum_t<T>;
    const int64 row = int64(blockIdx.x) * Threads + threadIdx.x;
    if (row >= rows) return;
    const T* base = x + (row / inner) * so + (row % inner) * si;
    A m = neg_infinity<A>(), s = A(0);
    // 8 loads ahead of their adds (an element at a time: one load in flight a thread)
    constexpr int Ahead = 8;
    int64 l = 0;
    for (; l + Ahead <= length; l += Ahead) {
        A v[Ahead][1];
#pragma unroll
        for (int u = 0; u < Ahead; ++u) v[u][0] = to_accum(base[(l + u) * sl]);
#pragma unroll
        for (int u = 0; u < Ahead; ++u) online_add(m, s, v[u]);
    }
    for (; l < length; ++l) {
        const A v[1] = {to_accum(base[l * sl])};
        online_add(m, s, v);
    }
    lse[row] = lse_of(m, s);
}

// out[o, l, i] from x[o, l, i] (both C-contiguous) and lse[o, i]. inner == 1: a block a row
// of `length` (16-byte vectors where the rows are whole vectors); otherwise a block a line of
// `inner` elements (o, l), each its own lse.
template <typename T, bool Log, int Threads>
__global__ void __launch_bounds__(Threads) softmax_apply_lse(const T* __restrict__ x, const accum_t<T>* __restrict__ lse,
                                                             T* __restrict__ out, int64 outer, int64 length, int64 inner) {
    using A = accum_t<T>;
    constexpr int VS = Vec16<T>::size;
    if (inner == 1) {
        const bool vectors = length % VS == 0 && aligned16(x) && aligned16(out);
        for (int64 row = blockIdx.x; row < outer; row += gridDim.x) {
            const A a = lse[row];
            const T* src = x + row * length;
            T* dst = out + row * length;
            int64 done = 0;
            if (vectors) {
                done = length;
                for (int64 l = threadIdx.x * VS; l < length; l += Threads * VS) {
                    Vec16<T> r = load_vec16(src + l);
#pragma unroll
                    for (int j = 0; j < VS; ++j) r.v[j] = from_accum<T>(apply_one<T>(to_accum(r.v[j]), a, Log));
                    store_vec16(dst + l, r);
                }
            }
            for (int64 l = done + threadIdx.x; l < length; l += Threads)
                dst[l] = from_accum<T>(apply_one<T>(to_accum(src[l]), a, Log));
        }
        return;
    }
    for (int64 line = blockIdx.x; line < outer * length; line += gridDim.x) {
        const A* row_lse = lse + (line / length) * inner;
        for (int64 i = threadIdx.x; i < inner; i += Threads)
            out[line * inner + i] = from_accum<T>(apply_one<T>(to_accum(x[line * inner + i]), row_lse[i], Log));
    }
}
