// softmax_rows_stashed: one block a row, the row's last tile in registers and the others in
// shared memory (cp.async); softmax_rows_stashed_cluster: a cluster of such blocks a row.
//
// Picked (StashedRowsConfig, cufuse/ops/softmax/rows.py) past the register rows, on devices
// whose shared memory holds the rung (cufuse/ops/softmax/select.py, stashed_rows): 2- and
// 4-byte rows of 4097..16384 16-byte vectors, 4 vectors a lane, the fewest shared-memory tiles
// that hold the row at up to 512 threads, the block's width then sized so that the row fills
// it, two blocks an SM where their shared memory fits, else one (the A100's 164 KB an SM
// holds fewer); the cluster kernel (clusters of 8, sm_90) for float32 rows of 49152..65536
// vectors. docs/softmax.md, "Rows".
#include "common/row_chunk.cuh"

// One block a row of up to (stash_tiles + 1) tiles of blockDim.x (<= Threads) x Vecs vectors:
// the last tile in registers, the others in dynamic shared memory ([stash_tiles][Vecs]
// [blockDim.x], cp.async, one group a tile, merged as it lands; at most 7 tiles, what
// cp_async_wait_pending counts). A 128 KB row then keeps two blocks an SM, so one block's
// loads overlap the other's reductions and stores (a 1024-thread block holding it all in
// registers is alone on its SM: H200, 1024 x 65536 float16, 0.81x copy against 0.91). Each
// thread reads back only the slots it copied itself: no block barrier between a tile's
// arrival and its use. With Cluster > 1 a cluster of such blocks shares a row, block `rank`
// holding elements [rank * chunk_len, ...), every warp's statistics pushed through distributed
// shared memory (ClusterStats: no block reduction, no cluster barrier).
template <typename T, bool Log, int Threads, int Vecs, int Cluster, typename Exchange>
__device__ __forceinline__ void softmax_rows_stashed_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                          int64 so, int64 si, int64 sl, int64 chunk_len, int stash_tiles, int64 r,
                                                          int rank, Exchange* cluster_stats) {
    using A = cufuse::accum_t<T>;
    using ChunkT = Chunk<T, WholeBlock, Vecs>;
    __shared__ BlockSlots<A, Threads> slots;
    extern __shared__ uint4 stash_bytes[];
    cufuse::Vec16<T>* stash = reinterpret_cast<cufuse::Vec16<T>*>(stash_bytes);
    RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
    // (One block: the whole row, chunk_len unread -- kept as a run-time bound, the extra
    // registers made the 2-byte kernels spill. It aligns the row's origin, the cluster's
    // blocks share one row and keep theirs.)
    const int64 begin = Cluster == 1 ? 0 : min(length, rank * chunk_len);
    const int64 end = Cluster == 1 ? align_row_origin(row, length, (stash_tiles + 1) * ChunkT::capacity_now()) : min(length, begin + chunk_len);
    auto tile_begin = [&](int t) { return min(end, begin + static_cast<int64>(t) * ChunkT::capacity_now()); };
    auto tile_end = [&](int t) { return min(end, tile_begin(t) + ChunkT::capacity_now()); };
    auto stash_tile = [&](int t) { return stash + t * Vecs * static_cast<int>(blockDim.x); };
    if (row.in_vec) {
#pragma unroll 1
        for (int t = 0; t < stash_tiles; ++t) {
            ChunkT::stash_async(stash_tile(t), row, tile_begin(t), tile_end(t), threadIdx.x);
            cufuse::cp_async_commit();
        }
    }
    ChunkT last, c;
    last.load(row, tile_begin(stash_tiles), tile_end(stash_tiles), threadIdx.x);
    OnlineStats<A> stats;
#pragma unroll 1
    for (int t = 0; t < stash_tiles; ++t) {
        if (row.in_vec) {
            cp_async_wait_pending(stash_tiles - 1 - t);  // tile t's group has landed
            c.load_from_stash(stash_tile(t), false, row, tile_begin(t), tile_end(t), threadIdx.x);
        } else {
            c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            c.stash(stash_tile(t), threadIdx.x);
        }
        stats.merge(c);
    }
    stats.merge(last);
    A row_max = stats.m, row_sum = stats.s;
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        cluster_wait();  // the kernel's opening arrive: every peer's mbarriers are initialised
        cluster_stats->exchange(row_max, row_sum, rank, blockDim.x / 32, 0);
    } else
#endif
    {
        row_max = group_reduce<true, WholeBlock, Threads>(stats.m, slots.max);
        row_sum = group_reduce<false, WholeBlock, Threads>(rescale(stats.s, stats.m, row_max), slots.sum);
    }
    const Normalizer<A, Log> f(row_max, row_sum);
    last.store(row, tile_begin(stash_tiles), tile_end(stash_tiles), threadIdx.x, f);
#pragma unroll 1
    for (int t = stash_tiles - 1; t >= 0; --t) {
        c.load_from_stash(stash_tile(t), !row.in_vec, row, tile_begin(t), tile_end(t), threadIdx.x);
        c.store(row, tile_begin(t), tile_end(t), threadIdx.x, f);
    }
}

template <typename T, bool Log, int Threads, int Vecs, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si, int64 sl,
                         int64 chunk_len, int stash_tiles) {
    softmax_rows_stashed_body<T, Log, Threads, Vecs, 1>(x, y, length, inner, so, si, sl, chunk_len, stash_tiles, blockIdx.x, 0,
                                                        static_cast<void*>(nullptr));
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int Vecs, int BlocksPerSM, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed_cluster(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si,
                                 int64 sl, int64 chunk_len, int stash_tiles) {
    __shared__ ClusterStats<cufuse::accum_t<T>, Cluster, Threads / 32, 1> cluster_stats;
    cluster_stats.init();
    cluster_arrive_relaxed();
    softmax_rows_stashed_body<T, Log, Threads, Vecs, Cluster>(x, y, length, inner, so, si, sl, chunk_len, stash_tiles, blockIdx.x / Cluster,
                                                              static_cast<int>(cooperative_groups::this_cluster().block_rank()),
                                                              &cluster_stats);
}
#endif
