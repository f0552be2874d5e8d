// softmax_cols_short: reduced axes of at most MaxLength elements strided over a contiguous
// inner axis (axis=0 of a (4, 3000000) matrix, a short middle axis): a thread a column, its
// `length` elements loaded at once into registers, reduced and written back -- one read.
//
// Picked (ColsShortConfig, cufuse/ops/softmax/cols.py) for column layouts of at most 16
// rows: the two-read column kernels split such a column over 16 slices (most of them idle)
// and the column split needs a tile's rows. Adjacent threads take adjacent columns, so a
// warp's accesses to one reduced index are consecutive elements. docs/softmax.md, "Columns".
#include "softmax/statistics.cuh"

template <typename T, bool Log, int Threads, int MaxLength>
__global__ void __launch_bounds__(Threads) softmax_cols_short(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                              int64 inner, int64 so, int64 si, int64 sl) {
    using A = cufuse::accum_t<T>;
    const int64 c = static_cast<int64>(blockIdx.x) * Threads + threadIdx.x;  // column (o, i), i fastest
    if (c >= outer * inner) return;
    const int64 o = c / inner, i = c - o * inner;
    const T* in = x + o * so + i * si;
    T* out = y + o * length * inner + i;
    A a[MaxLength];
    A m = cufuse::neg_infinity<A>();
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) {
        a[l] = l < length ? cufuse::to_accum(in[l * sl]) : cufuse::neg_infinity<A>();
        m = max_nan(m, a[l]);
    }
    // (All -inf: exp(-inf - -inf) is NaN, but the Normalizer makes such a column NaN anyway.)
    A s = 0;
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) s += exp_accum_ftz(a[l] - m);
    const Normalizer<A, Log> f(m, s);
#pragma unroll
    for (int l = 0; l < MaxLength; ++l)
        if (l < length) out[l * inner] = cufuse::from_accum<T>(f.template to<T>(a[l]));
}
