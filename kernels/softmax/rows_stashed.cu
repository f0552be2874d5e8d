// softmax_rows_stashed: one block a row, the row's last tile in registers and the others in
// shared memory (cp.async); softmax_rows_stashed_cluster: a cluster of such blocks a row.
//
// Picked (StashedRowsConfig, cufuse/ops/softmax/rows.py) past the register rows, on devices
// whose shared memory holds a rung at its blocks an SM (the H200; the A100 takes
// softmax_rows_split there): 2-byte rows of 4097..8192 16-byte vectors (512 x 4 + 3 tiles, two
// blocks an SM), float32 rows of 4097..8192 (256 x 8 + 3, two an SM) and 8193..16384 vectors
// (512 x 4 + 7, one an SM); the cluster kernel (clusters of 8, sm_90) for float32 rows of
// 49152..65536 vectors. docs/softmax.md, "Rows".
#include "softmax/row_chunk.cuh"

// One block a row of up to (StashTiles + 1) tiles of Threads x Vecs vectors: the last tile in
// registers, the others in dynamic shared memory ([StashTiles][Vecs][Threads], cp.async, one
// group a tile, merged as it lands). A 128 KB row then keeps two blocks an SM, so one block's
// loads overlap the other's reductions and stores (a 1024-thread block holding it all in
// registers is alone on its SM: H200, 1024 x 65536 float16, 0.81x copy against 0.91). Each
// thread reads back only the slots it copied itself: no block barrier between a tile's
// arrival and its use. With Cluster > 1 a cluster of such blocks shares a row, block `rank`
// holding elements [rank * chunk_len, ...), their statistics pushed through distributed
// shared memory (pulled with a second barrier, this measured 0.25-0.78x: docs/softmax.md).
template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int Cluster>
__device__ __forceinline__ void softmax_rows_stashed_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                          int64 so, int64 si, int64 sl, int64 chunk_len, int64 r, int rank) {
    using A = cufuse::accum_t<T>;
    using ChunkT = Chunk<T, Threads, Vecs>;
    __shared__ BlockSlots<A, Threads> slots;
    extern __shared__ uint4 stash_bytes[];
    cufuse::Vec16<T>* stash = reinterpret_cast<cufuse::Vec16<T>*>(stash_bytes);
    RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
    // (One block: the whole row, chunk_len unread -- kept as a run-time bound, the extra
    // registers made the 2-byte kernels spill. It aligns the row's origin, the cluster's
    // blocks share one row and keep theirs.)
    const int64 begin = Cluster == 1 ? 0 : min(length, rank * chunk_len);
    const int64 end = Cluster == 1 ? align_row_origin(row, length, (StashTiles + 1) * ChunkT::capacity) : min(length, begin + chunk_len);
    auto tile_begin = [&](int t) { return min(end, begin + static_cast<int64>(t) * ChunkT::capacity); };
    auto tile_end = [&](int t) { return min(end, tile_begin(t) + ChunkT::capacity); };
    auto stash_tile = [&](int t) { return stash + t * Vecs * Threads; };
    if (row.in_vec) {
#pragma unroll
        for (int t = 0; t < StashTiles; ++t) {
            ChunkT::stash_async(stash_tile(t), row, tile_begin(t), tile_end(t), threadIdx.x);
            cufuse::cp_async_commit();
        }
    }
    ChunkT last, c;
    last.load(row, tile_begin(StashTiles), tile_end(StashTiles), threadIdx.x);
    OnlineStats<A> stats;
#pragma unroll 1
    for (int t = 0; t < StashTiles; ++t) {
        if (row.in_vec) {
            cp_async_wait_pending(StashTiles - 1 - t);  // tile t's group has landed
            c.load_from_stash(stash_tile(t), false, row, tile_begin(t), tile_end(t), threadIdx.x);
        } else {
            c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            c.stash(stash_tile(t), threadIdx.x);
        }
        stats.merge(c);
    }
    stats.merge(last);
    A row_max = group_reduce<true, Threads, Threads>(stats.m, slots.max);
    A row_sum = group_reduce<false, Threads, Threads>(rescale(stats.s, stats.m, row_max), slots.sum);
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        static_assert(Cluster <= Threads, "thread q pushes the block's pair to block q");
        __shared__ A inbox[Cluster][2];  // every block's (max, sum) of the row
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (threadIdx.x < Cluster) push_pair(cluster, inbox[rank], threadIdx.x, row_max, row_sum);
        cluster.sync();
        merge_inbox<Cluster, 2>(&inbox[0][0], row_max, row_sum);
    }
#endif
    const Normalizer<A, Log> f(row_max, row_sum);
    last.store(row, tile_begin(StashTiles), tile_end(StashTiles), threadIdx.x, f);
#pragma unroll 1
    for (int t = StashTiles - 1; t >= 0; --t) {
        c.load_from_stash(stash_tile(t), !row.in_vec, row, tile_begin(t), tile_end(t), threadIdx.x);
        c.store(row, tile_begin(t), tile_end(t), threadIdx.x, f);
    }
}

template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si, int64 sl,
                         int64 chunk_len) {
    softmax_rows_stashed_body<T, Log, Threads, Vecs, StashTiles, 1>(x, y, length, inner, so, si, sl, chunk_len, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int BlocksPerSM, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed_cluster(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si,
                                 int64 sl, int64 chunk_len) {
    cluster_arrive_relaxed();
    softmax_rows_stashed_body<T, Log, Threads, Vecs, StashTiles, Cluster>(
        x, y, length, inner, so, si, sl, chunk_len, blockIdx.x / Cluster, static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif
