// softmax_cols[_cluster] and softmax_cols_vec[_cluster]: the reduced axis strided over a
// contiguous inner axis (axis=0 of a C-contiguous matrix), columns read twice (online
// statistics, then the output pass); in clusters (sm_90) each block's part of the column is
// small enough that the second read comes from L2.
//
// Picked (ColsConfig, ColsVecConfig: cufuse/ops/softmax/cols.py) for column layouts the column
// split (cols_split.cu) does not take: layouts without aligned 16-byte column vectors, float64,
// and columns shorter than one of its tiles or longer than its resident grid holds. float32
// with aligned vectors takes softmax_cols_vec (8 lanes of 4 columns, clusters of 8), every other
// case the scalar softmax_cols (clusters of 4); clusters from 2048 rows. docs/softmax.md.
#include "common/columns.cuh"

// Reduced axis strided (sl != 1), inner axis contiguous: block = 32 columns x Slices slices of
// the reduced axis, so every warp access is 32 consecutive elements. Online statistics over
// the slice (Unroll loads in flight per thread), merged across slices in shared memory; the
// output pass reads the column again. With Cluster > 1 the blocks of a cluster split the
// reduced axis and merge their column statistics through distributed shared memory: a
// block's part is small (1/Cluster of the column tile), so its second read comes from L2.
template <typename T, bool Log, int Slices, int Unroll, int Cluster>
__device__ __forceinline__ void softmax_cols_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                  int64 so, int64 si, int64 sl, int64 column_block, int rank) {
    using A = cufuse::accum_t<T>;
    __shared__ A slice_max[Slices][32], slice_sum[Slices][32];
    const int64 column_tiles = (inner + 31) / 32;
    const int64 o = column_block / column_tiles;
    const int col = threadIdx.x % 32, slice = threadIdx.x / 32;
    const int64 i = (column_block - o * column_tiles) * 32 + col;
    const bool active = i < inner;
    const T* in = x + o * so + (active ? i : 0) * si;
    T* out = y + o * length * inner + i;
    const int64 part = (length + Cluster - 1) / Cluster;
    const int64 begin = min(length, rank * part), end = min(length, begin + part);
    A m = cufuse::neg_infinity<A>(), s = 0;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        A a[Unroll];
        A tile_m = cufuse::neg_infinity<A>();
        // A tile wholly inside the part loads unconditionally off a stepped pointer: a 64-bit
        // bounds test and index product an element (~34 instructions an element) left the
        // loads predicated, 1 to 3 in flight at the first use. (float64 keeps the element
        // tests: its 2 loads were in flight, and its cluster kernel spilled with the branch.)
        if (sizeof(T) < 8 && active && l0 + static_cast<int64>(Unroll - 1) * Slices < end) {
            const T* p = in + l0 * sl;
#pragma unroll
            for (int u = 0; u < Unroll; ++u, p += Slices * sl) a[u] = cufuse::to_accum(*p);
#pragma unroll
            for (int u = 0; u < Unroll; ++u) tile_m = max_nan(tile_m, a[u]);
        } else {
#pragma unroll
            for (int u = 0; u < Unroll; ++u) {
                const int64 l = l0 + static_cast<int64>(u) * Slices;
                a[u] = active && l < end ? cufuse::to_accum(in[l * sl]) : cufuse::neg_infinity<A>();
                tile_m = max_nan(tile_m, a[u]);
            }
        }
        const A new_m = max_nan(m, tile_m);
        s = rescale(s, m, new_m);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) s += exp_accum_ftz(a[u] - new_m);
        m = new_m;
    }
    slice_max[slice][col] = m;
    __syncthreads();
    A col_max = cufuse::neg_infinity<A>();
#pragma unroll
    for (int q = 0; q < Slices; ++q) col_max = max_nan(col_max, slice_max[q][col]);
    slice_sum[slice][col] = rescale(s, m, col_max);
    __syncthreads();
    A col_sum = 0;
#pragma unroll
    for (int q = 0; q < Slices; ++q) col_sum += slice_sum[q][col];
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        static_assert(Cluster <= Slices, "warp q pushes the block's column pairs to block q");
        __shared__ A inbox[Cluster][32][2];  // (max, sum) of each column from every block of the cluster
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (slice < Cluster) push_pair(cluster, inbox[rank][col], slice, col_max, col_sum);
        cluster.sync();
        merge_inbox<Cluster, 64>(&inbox[0][col][0], col_max, col_sum);
    }
#endif
    if (!active) return;
    const Normalizer<A, Log> f(col_max, col_sum);
    // Tiles of Unroll as in the first pass (an element at a time, ptxas kept 4 loads in flight;
    // float64, whose exp is a call, keeps the element loop: its tiles spilled).
    int64 l0 = begin + slice;
    if constexpr (sizeof(T) < 8) {
        for (; l0 + static_cast<int64>(Unroll - 1) * Slices < end; l0 += static_cast<int64>(Slices) * Unroll) {
            T r[Unroll];
#pragma unroll
            for (int u = 0; u < Unroll; ++u) r[u] = in[(l0 + static_cast<int64>(u) * Slices) * sl];
#pragma unroll
            for (int u = 0; u < Unroll; ++u)
                out[(l0 + static_cast<int64>(u) * Slices) * inner] = cufuse::from_accum<T>(f.template to<T>(cufuse::to_accum(r[u])));
        }
    }
    for (int64 l = l0; l < end; l += Slices) out[l * inner] = cufuse::from_accum<T>(f.template to<T>(cufuse::to_accum(in[l * sl])));
}

template <typename T, bool Log, int Slices, int Unroll>
__global__ void __launch_bounds__(32 * Slices, 2) softmax_cols(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                            int64 inner, int64 so, int64 si, int64 sl) {
    softmax_cols_body<T, Log, Slices, Unroll, 1>(x, y, length, inner, so, si, sl, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Slices, int Unroll, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(32 * Slices, 2)
    softmax_cols_cluster(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so, int64 si,
                         int64 sl) {
    cluster_arrive_relaxed();
    softmax_cols_body<T, Log, Slices, Unroll, Cluster>(x, y, length, inner, so, si, sl, blockIdx.x / Cluster,
                                                       static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif

// Reduced axis strided, inner axis contiguous, 16-byte vectors across columns: a block covers
// Cols = ColLanes*VS columns x Slices = Threads/ColLanes slices of the reduced axis. Each
// thread keeps the online (max, sum) of its VS columns over its slice with Unroll vectors in
// flight; slices merge in shared memory, a cluster's blocks (each 1/Cluster of the column)
// through distributed shared memory. The output pass reads the block's part again (small:
// from L2). Needs si == 1 and so, sl, inner multiples of VS (the host checks); an x or y
// base that is not 16-byte aligned takes scalar accesses.
template <typename T, bool Log, int Threads, int ColLanes, int Unroll, int Cluster>
__device__ __forceinline__ void softmax_cols_vec_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                      int64 so, int64 sl, int64 column_block, int rank) {
    using A = cufuse::accum_t<T>;
    using V = cufuse::Vec16<T>;
    constexpr int VS = V::size, Slices = Threads / ColLanes, Cols = ColLanes * VS;
    static_assert(Threads % ColLanes == 0 && Cols <= Threads, "a thread per column merges the slices");
    __shared__ A slice_stats[Slices][Cols];  // maxima, then sums rescaled to the column max
    __shared__ A block_stats[Cols][2];       // (max, sum) of each column, pushed to the cluster
    const ColumnVector<T, ColLanes> cv(x, y, length, inner, so, column_block);
    const int lane = cv.lane, slice = cv.slice;
    const bool active = cv.active, in_vec = cv.in_vec, out_vec = cv.out_vec;
    const T* in = cv.in;
    T* out = cv.out;
    const int64 part = (length + Cluster - 1) / Cluster;
    const int64 begin = min(length, rank * part), end = min(length, begin + part);
    A m[VS], s[VS];
#pragma unroll
    for (int j = 0; j < VS; ++j) m[j] = cufuse::neg_infinity<A>(), s[j] = 0;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        V v[Unroll];
        load_column_tile<T, Unroll>(v, in, sl, l0, Slices, end, active, in_vec);
        merge_columns<T, Unroll>(v, m, s);
    }
    // Merge the slices: thread c < Cols reduces column c over all slices.
    const int c = threadIdx.x;
#pragma unroll
    for (int j = 0; j < VS; ++j) slice_stats[slice][lane * VS + j] = m[j];
    __syncthreads();
    if (c < Cols) {
        A col_max = cufuse::neg_infinity<A>();
        for (int q = 0; q < Slices; ++q) col_max = max_nan(col_max, slice_stats[q][c]);
        block_stats[c][0] = col_max;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < VS; ++j) slice_stats[slice][lane * VS + j] = rescale(s[j], m[j], block_stats[lane * VS + j][0]);
    __syncthreads();
    if (c < Cols) {
        A col_sum = 0;
        for (int q = 0; q < Slices; ++q) col_sum += slice_stats[q][c];
        block_stats[c][1] = col_sum;
    }
    Normalizer<A, Log> f[VS];
    column_normalizers<Cluster, Cols>(block_stats, lane, f);
    if (!active) return;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        V v[Unroll];
        load_column_tile<T, Unroll>(v, in, sl, l0, Slices, end, active, in_vec);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const int64 l = l0 + static_cast<int64>(u) * Slices;
            const V r = normalize_columns<T, Log>(f, v[u]);
            if (l < end) store_columns(out + l * inner, out_vec, r);  // (a `break` here made ptxas spill log_softmax)
        }
    }
}

template <typename T, bool Log, int Threads, int ColLanes, int Unroll>
__global__ void __launch_bounds__(Threads) softmax_cols_vec(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                            int64 inner, int64 so, int64 si, int64 sl) {
    softmax_cols_vec_body<T, Log, Threads, ColLanes, Unroll, 1>(x, y, length, inner, so, sl, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int ColLanes, int Unroll, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads)
    softmax_cols_vec_cluster(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so,
                             int64 si, int64 sl) {
    cluster_arrive_relaxed();
    softmax_cols_vec_body<T, Log, Threads, ColLanes, Unroll, Cluster>(x, y, length, inner, so, sl, blockIdx.x / Cluster,
                                                                       static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif
