// 16-byte vectors of adjacent columns (kernels/softmax/cols.cu's softmax_cols_vec,
// cols_split.cu, the short-column kernels of softmax and logsumexp): a thread's column vector
// (ColumnVector), its loads and stores (and a vector off the boundary cut from two aligned
// ones, passed between lanes), the per-column max and online (max, sum) merge, the
// normalised vector, and the block's (or cluster's) column statistics turned into Normalizers
// (column_normalizers).
#pragma once

#include "common/statistics.cuh"

namespace cufuse {
namespace softmax_detail {

// The column kernels with 16-byte vectors: a thread holds VS adjacent columns of a reduced index.
template <typename T> __device__ __forceinline__ Vec16<T> neg_inf_vector() {
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) r.v[j] = neg_inf_value<T>();
    return r;
}
// One vector of columns; a base that is not 16-byte aligned takes unit-stride scalars, inline
// (a call's saved registers spilled the vector column kernel's log_softmax).
template <typename T> __device__ __forceinline__ Vec16<T> load_columns(const T* p, bool vec) {
    return vec ? load_vec16(p) : load_scalars_inline(p, int64(1), int64(Vec16<T>::size));
}
// Count vectors of columns at reduced indices l0 + u*step (the input's reduced stride sl), -inf
// from `end` on or where the thread holds no columns. A tile of aligned vectors wholly inside
// takes 128-bit values under one branch: a select between a load and the -inf vector element
// by element put a PRMT an element right after each load (16-bit types), one load in flight.
template <typename T, int Count>
__device__ __forceinline__ void load_column_tile(Vec16<T> (&v)[Count], const T* in, int64 sl, int64 l0, int64 step, int64 end,
                                                 bool active, bool vec) {
    if (active && vec && l0 + (Count - 1) * step < end) {
#pragma unroll
        for (int u = 0; u < Count; ++u)
            *reinterpret_cast<uint4*>(&v[u]) = __ldg(reinterpret_cast<const uint4*>(in + (l0 + u * step) * sl));
    } else {
#pragma unroll
        for (int u = 0; u < Count; ++u) {
            const int64 l = l0 + u * step;
            v[u] = active && l < end ? load_columns(in + l * sl, vec) : neg_inf_vector<T>();
        }
    }
}
template <typename T> __device__ __forceinline__ void store_columns(T* p, bool vec, const Vec16<T>& r) {
    if (vec) store_vec16(p, r);
    else store_scalars_inline(p, int64(1), int64(Vec16<T>::size), r);
}

// Bytes [shift, shift + 16) of the 32 bytes lo:hi, shift in [0, 16): a vector of columns off
// the 16-byte boundary cut from the two aligned vectors around it (softmax_cols_short_shifted).
// The word offset is picked by selects: a run-time index into the eight words would put them
// in local memory.
__device__ __forceinline__ uint4 funnel_bytes16(const uint4& lo, const uint4& hi, int shift) {
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int words = shift >> 2, bits = (shift & 3) * 8;
    unsigned r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        unsigned a = w[i], b = w[i + 1];
#pragma unroll
        for (int s = 1; s < 4; ++s)
            if (words == s) a = w[i + s], b = w[i + s + 1];
        r[i] = __funnelshift_r(a, b, bits);
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}

// A 16-byte value from the lane `delta` below (up) or above (down) in the warp; every lane calls.
__device__ __forceinline__ uint4 shfl_up16(const uint4& v, unsigned delta) {
    return make_uint4(__shfl_up_sync(0xffffffffu, v.x, delta), __shfl_up_sync(0xffffffffu, v.y, delta),
                      __shfl_up_sync(0xffffffffu, v.z, delta), __shfl_up_sync(0xffffffffu, v.w, delta));
}
__device__ __forceinline__ uint4 shfl_down16(const uint4& v, unsigned delta) {
    return make_uint4(__shfl_down_sync(0xffffffffu, v.x, delta), __shfl_down_sync(0xffffffffu, v.y, delta),
                      __shfl_down_sync(0xffffffffu, v.z, delta), __shfl_down_sync(0xffffffffu, v.w, delta));
}

// The NaN-keeping max of each of the VS columns over Count vectors. 16-bit types take the
// maxima in pairs: no float copies of the elements live until the sum.
template <typename T, int Count, typename A = accum_t<T>>
__device__ __forceinline__ void column_max(const Vec16<T> (&v)[Count], A (&m)[Vec16<T>::size]) {
    constexpr int VS = Vec16<T>::size;
    if constexpr (sizeof(T) == 2) {
        using T2 = typename Packed2<T>::type;
#pragma unroll
        for (int p = 0; p < VS / 2; ++p) {
            T2 pair_m = reinterpret_cast<const T2*>(v[0].v)[p];
#pragma unroll
            for (int u = 1; u < Count; ++u) pair_m = __hmax2_nan(pair_m, reinterpret_cast<const T2*>(v[u].v)[p]);
            m[2 * p] = to_accum(pair_m.x), m[2 * p + 1] = to_accum(pair_m.y);
        }
    } else {
#pragma unroll
        for (int j = 0; j < VS; ++j) {
            m[j] = to_accum(v[0].v[j]);
#pragma unroll
            for (int u = 1; u < Count; ++u) m[j] = max_nan(m[j], to_accum(v[u].v[j]));
        }
    }
}

// The online (max, sum) of each of the VS columns, merged with Count more vectors (padding
// -inf). While a column has seen only -inf its sum is meaningless (exp(-inf - -inf)): rescale
// drops it once a larger maximum comes, and an all -inf column is NaN anyway.
template <typename T, int Count, typename A = accum_t<T>>
__device__ __forceinline__ void merge_columns(const Vec16<T> (&v)[Count], A (&m)[Vec16<T>::size], A (&s)[Vec16<T>::size]) {
    constexpr int VS = Vec16<T>::size;
    A tile_m[VS];
    column_max<T, Count>(v, tile_m);
#pragma unroll
    for (int j = 0; j < VS; ++j) {
        const A new_m = max_nan(m[j], tile_m[j]);
        s[j] = rescale(s[j], m[j], new_m);
#pragma unroll
        for (int u = 0; u < Count; ++u) s[j] += exp_accum_ftz(to_accum(v[u].v[j]) - new_m);
        m[j] = new_m;
    }
}

template <typename T, bool Log, typename A = accum_t<T>>
__device__ __forceinline__ Vec16<T> normalize_columns(const Normalizer<A, Log> (&f)[Vec16<T>::size], const Vec16<T>& v) {
    A a[Vec16<T>::size];
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) a[j] = f[j].template to<T>(to_accum(v.v[j]));
    return vector_from_accum<T>(a);
}

// A thread's vector of columns in the 16-byte column kernels: block `column_block` covers Cols =
// ColLanes*VS adjacent columns of one outer index, lane `lane` VS of them, slice `slice` the
// reduced indices it walks. inner is a multiple of VS: a vector is all in or all out.
template <typename T, int ColLanes> struct ColumnVector {
    static constexpr int VS = Vec16<T>::size, Cols = ColLanes * VS;
    int lane, slice;
    bool active, in_vec, out_vec;  // in_vec / out_vec: 16-byte aligned base
    const T* in;
    T* out;
    __device__ __forceinline__ ColumnVector(const T* x, T* y, int64 length, int64 inner, int64 so, int64 column_block) {
        const int64 column_tiles = (inner + Cols - 1) / Cols;
        const int64 o = column_block / column_tiles;
        lane = threadIdx.x % ColLanes;
        slice = threadIdx.x / ColLanes;
        const int64 i0 = (column_block - o * column_tiles) * Cols + lane * VS;
        active = i0 < inner;
        in = x + o * so + (active ? i0 : 0);
        out = y + o * length * inner + i0;
        in_vec = aligned16(x);
        out_vec = aligned16(y);
    }
};

// The normalisers of the VS columns from lane*VS: block_stats holds the block's (max, sum) of
// each of its Cols columns (written by threads c < Cols, no barrier since); with Cluster > 1
// they are merged over the cluster's blocks by push (the kernel opened a cluster barrier phase).
template <int Cluster, int Cols, int VS, typename A, bool Log>
__device__ __forceinline__ void column_normalizers(A (&block_stats)[Cols][2], int lane, Normalizer<A, Log> (&f)[VS]) {
    const A(*stats)[2] = block_stats;
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        __shared__ A inbox[Cluster][Cols][2];  // (max, sum) of each column from every block
        __shared__ A cluster_stats[Cols][2];
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        const int c = threadIdx.x;
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (c < Cols)
#pragma unroll
            for (unsigned q = 0; q < Cluster; ++q)
                push_pair(cluster, inbox[cluster.block_rank()][c], q, block_stats[c][0], block_stats[c][1]);
        cluster.sync();
        if (c < Cols) merge_inbox<Cluster, 2 * Cols>(&inbox[0][c][0], cluster_stats[c][0], cluster_stats[c][1]);
        __syncthreads();
        stats = cluster_stats;
    } else
#endif
    {
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < VS; ++j) f[j] = Normalizer<A, Log>(stats[lane * VS + j][0], stats[lane * VS + j][1]);
}

}  // namespace softmax_detail
}  // namespace cufuse
