// softmax_rows_cluster: one thread-block cluster a row (sm_90), each block a share of the row
// in registers, the blocks' statistics pushed through distributed shared memory.
//
// Picked (ClusterConfig, cufuse/ops/softmax/rows.py) for float64 only, on devices with clusters
// of 8: rows of 4097..8192 16-byte vectors (512 x 4, clusters of 4) and 8193..16384 (clusters
// of 8). The 2- and 4-byte types lost their cluster rung to the split and stashed kernels
// (docs/softmax.md, "Rows").
#include "common/row_chunk.cuh"

#if __CUDA_ARCH__ >= 900  // __cluster_dims__ does not compile for earlier targets
// One cluster of Cluster blocks per row; block `rank` holds elements [rank*chunk_len, ...).
// Up to 4 vectors a thread, two blocks share an SM (the ladder relies on it); 8 vectors,
// three (the occupancy of its 72 registers before the flushed exps, which let ptxas keep more
// in flight: 96 registers unbounded, 80 under the bound, no spills). A grid of fewer
// clusters than rows loops: cluster q serves rows q, q + clusters, ... (persistent clusters:
// no cluster launch per row, whose placement needs Cluster free slots in one GPC at once).
template <typename T, bool Log, int Threads, int Vecs, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, Vecs <= 4 ? 2 : 3)
    softmax_rows_cluster(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length, int64 inner, int64 so, int64 si,
                         int64 sl, int64 chunk_len) {
    using A = cufuse::accum_t<T>;
    namespace cg = cooperative_groups;
    __shared__ BlockSlots<A, Threads> slots;
    // [row parity][rank][max, sum]: the row's pairs of every block, pushed by each. A block
    // pushes into row r + 2 clusters' slots only after passing row r + clusters' barrier,
    // which no block reaches before it has merged row r.
    __shared__ A inbox[2][Cluster][2];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const int64 clusters = gridDim.x / Cluster;
    const int64 begin = rank * chunk_len, end = min(length, begin + chunk_len);
    cluster_arrive_relaxed();
    bool peers_running = false;  // (every block of a cluster serves the same rows)
    int parity = 0;
    for (int64 r = static_cast<int64>(blockIdx.x) / Cluster; r < rows; r += clusters, parity ^= 1) {
        const RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
        Chunk<T, Threads, Vecs> c;
        c.load(row, begin, end, threadIdx.x);
        A m, s, row_max, row_sum;
        chunk_stats<Threads, Threads>(c, slots, m, s);
        if (!peers_running) cluster_wait(), peers_running = true;
        if (threadIdx.x < Cluster) push_pair(cluster, inbox[parity][rank], threadIdx.x, m, s);
        cluster.sync();
        merge_inbox<Cluster, 2>(&inbox[parity][0][0], row_max, row_sum);
        c.store(row, begin, end, threadIdx.x, Normalizer<A, Log>(row_max, row_sum));
    }
    if (!peers_running) cluster_wait();  // no push after the last barrier: nothing to wait for at exit
}
#endif
