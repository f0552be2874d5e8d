// softmax_rows_cluster: one thread-block cluster a row (sm_90), each block a share of the row
// in registers, the blocks' statistics pushed through distributed shared memory (ClusterStats).
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
    __shared__ ClusterStats<A, Cluster, Threads / 32, 2> stats;
    const unsigned rank = cooperative_groups::this_cluster().block_rank();
    const int64 clusters = gridDim.x / Cluster;
    const int64 begin = rank * chunk_len, end = min(length, begin + chunk_len);
    stats.init();
    cluster_arrive_relaxed();
    unsigned round = 0;  // (every block of a cluster serves the same rows)
    for (int64 r = static_cast<int64>(blockIdx.x) / Cluster; r < rows; r += clusters, ++round) {
        const RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
        Chunk<T, Threads, Vecs> c;
        c.load(row, begin, end, threadIdx.x);
        A m = c.max(), s = c.sum_exp(m);
        if (round == 0) cluster_wait();  // the opening arrive: every peer's mbarriers are initialised
        stats.exchange(m, s, rank, Threads / 32, round);
        c.store(row, begin, end, threadIdx.x, Normalizer<A, Log>(m, s));
    }
    if (round == 0) cluster_wait();  // a block without rows still completes the opening phase
}
#endif
