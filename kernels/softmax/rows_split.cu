// softmax_rows_split: a persistent grid of co-resident blocks, blocks_per_row blocks a row, each
// holding its chunk in registers and shared memory; the blocks' statistics meet in a global
// scratch with an arrival counter a row. A chunk beyond registers + shared memory is streamed
// with the online rule and its middle tiles are read a second time.
//
// Picked (SplitConfig, cufuse/ops/softmax/split.py) for every row longer than the other rungs
// hold: past 4096 16-byte vectors on the A100 (every dtype) and for float64 without clusters;
// on the H200 past the stashed rows (2-byte types from 8193 vectors, float32 from 16385 except
// the stashed clusters' band) and past float64's clusters (16385 vectors). docs/softmax.md.
#include "common/row_chunk.cuh"

// Persistent grid: gridDim.x = blocks_per_row * rows_per_wave blocks, all co-resident (the
// host sizes it from the occupancy guaranteed by __launch_bounds__(Threads, BlocksPerSM) and
// the shared memory per block). Block b serves chunk b % blocks_per_row of rows
// b / blocks_per_row, + rows_per_wave, ...: the blocks of one row advance together, so the
// arrival wait cannot deadlock. A chunk is cut into tiles of one register Chunk: the last
// tile stays in registers, the first smem_tiles tiles are kept in dynamic shared memory,
// any tiles in between are streamed (read again in the output pass, most recent first).
// partials: 2 * rows * blocks_per_row accumulators; arrivals: rows counters, zero at entry
// and left zero at exit (each block of a row adds 1 on arrival and 1 on leaving).
// Pipelined: each shared-memory tile is its own cp.async group, merged as soon as it lands
// (the statistics of the first tiles overlap the loads of the later ones), the register
// tile's loads are issued before any wait, and the output pass requests the block's next
// row tile by tile as it frees each shared-memory tile (a thread refills only the slots it
// reads itself: no barrier), so with several rows per block the loads of the next row
// overlap the arrival wait and the stores of this one. Tiles are requested and merged last
// first. Otherwise one group, requested at the start of the row and waited for as a whole,
// and the register tile loaded last.
template <typename T, bool Log, int Threads, int Vecs, int BlocksPerSM, bool Pipelined>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_split(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length, int64 inner, int64 so, int64 si,
                       int64 sl, int64 chunk_len, int blocks_per_row, int smem_tiles, cufuse::accum_t<T>* partials,
                       unsigned* arrivals) {
    using A = cufuse::accum_t<T>;
    using ChunkT = Chunk<T, Threads, Vecs>;
    using cufuse::Vec16;
    __shared__ BlockSlots<A, Threads> slots;
    extern __shared__ uint4 stash_bytes[];
    Vec16<T>* stash = reinterpret_cast<Vec16<T>*>(stash_bytes);  // [smem_tiles][Vecs][Threads], conflict-free
    const int part = blockIdx.x % blocks_per_row;
    const int64 rows_per_wave = gridDim.x / blocks_per_row;
    // The block's chunk: elements [begin, chunk_hi) of every row, counted from the row's
    // vector-aligned origin where align_row_origin moves it (up to VS - 1 elements of the row
    // before, masked; where the chunks hold them), so that a misaligned row's slots
    // are aligned vectors but for its first and last (97 x 300007 float16 ran its scalar slots:
    // 0.21 of the copy). Tiles are counted for the longest row end (length + VS - 1); a row's
    // own end is chunk_end(row_end).
    const int64 begin = part * chunk_len, chunk_hi = begin + chunk_len;
    const int64 tiles = max(int64(1), (min(length + ChunkT::VS - 1, chunk_hi) - begin + ChunkT::capacity - 1) / ChunkT::capacity);
    // Tiles [0, stashed) live in shared memory, [stashed, tiles - 1) are streamed, the
    // last one stays in registers.
    const int stashed = static_cast<int>(min(static_cast<int64>(smem_tiles), tiles - 1));
    auto chunk_end = [&](int64 row_end) { return max(begin, min(row_end, chunk_hi)); };
    int64 end = begin;  // the current row's chunk end
    auto tile_begin = [&](int64 t) { return begin + t * ChunkT::capacity; };
    auto tile_end_of = [&](int64 t, int64 e) { return min(e, tile_begin(t) + ChunkT::capacity); };
    auto tile_end = [&](int64 t) { return tile_end_of(t, end); };
    auto stash_tile = [&](int64 t) { return stash + t * Vecs * Threads; };
    // Row r's view from its aligned origin where it has one; e: its chunk end.
    auto row_at = [&](int64 r, int64& e) {
        RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
        e = chunk_end(align_row_origin(row, length, static_cast<int64>(blocks_per_row) * chunk_len));
        return row;
    };
    auto request = [&](const RowView<T>& row, int t, int64 e) {  // tile t of an aligned row into shared memory
        ChunkT::stash_async(stash_tile(t), row, tile_begin(t), tile_end_of(t, e), threadIdx.x);
        if (Pipelined) cufuse::cp_async_commit();
    };
    const int64 first = blockIdx.x / blocks_per_row;
    if (Pipelined && first < rows) {
        int64 e;
        const RowView<T> row = row_at(first, e);
        if (row.in_vec)
            for (int t = stashed - 1; t >= 0; --t) request(row, t, e);
    }
    for (int64 r = first; r < rows; r += rows_per_wave) {
        const RowView<T> row = row_at(r, end);
        ChunkT c, last;  // c: the tile being merged or stored; last: the register tile
        // This thread's online (max, sum) over its slots of the chunk; the block reduces them
        // once a row (a block reduction a tile cost ~3 instructions an element and 4 barriers).
        OnlineStats<A> stats;
        // Pass 1. Aligned rows: every shared-memory tile is in flight with cp.async (up to
        // smem_tiles x 16 KB per block; pipelined: requested before this row), the other
        // tiles load meanwhile.
        if (!Pipelined && row.in_vec) {
            for (int t = 0; t < stashed; ++t) request(row, t, end);
            cufuse::cp_async_commit();
        }
        if (Pipelined) last.load(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x);
        for (int64 t = stashed; t < tiles - 1; ++t) {
            c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            stats.merge(c);
        }
        for (int i = 0; i < stashed; ++i) {
            const int t = Pipelined ? stashed - 1 - i : i;  // pipelined: in the order requested
            if (row.in_vec) {
                cp_async_wait_pending(Pipelined ? t : 0);  // tile t's group has landed
                c.load_from_stash(stash_tile(t), false, row, tile_begin(t), tile_end(t), threadIdx.x);
            } else {
                c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
                c.stash(stash_tile(t), threadIdx.x);
            }
            stats.merge(c);
        }
        if (!Pipelined) last.load(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x);
        stats.merge(last);
        const A m = group_reduce<true, Threads, Threads>(stats.m, slots.max);
        const A s = group_reduce<false, Threads, Threads>(rescale(stats.s, stats.m, m), slots.sum);
        A* row_partials = partials + 2 * r * blocks_per_row;
        if (threadIdx.x == 0) {
            row_partials[2 * part] = m;
            row_partials[2 * part + 1] = s;
            __threadfence();
            atomicAdd(arrivals + r, 1u);
            wait_for_arrivals(arrivals + r, blocks_per_row);
            __threadfence();
        }
        __syncthreads();
        A row_max = cufuse::neg_infinity<A>();
        for (int q = threadIdx.x; q < blocks_per_row; q += Threads) row_max = max_nan(row_max, __ldcg(row_partials + 2 * q));
        row_max = group_reduce<true, Threads, Threads>(row_max, slots.max);
        A row_sum = 0;
        for (int q = threadIdx.x; q < blocks_per_row; q += Threads)
            row_sum += rescale(__ldcg(row_partials + 2 * q + 1), __ldcg(row_partials + 2 * q), row_max);
        row_sum = group_reduce<false, Threads, Threads>(row_sum, slots.sum);
        // Every thread has read the partials (group_reduce ends with a barrier): leave the
        // row. The last of its blocks to leave re-arms the counter for the next call, so the
        // scratch is reused without a memset (the others have all passed their wait).
        if (threadIdx.x == 0 && atomicAdd(arrivals + r, 1u) == 2u * blocks_per_row - 1u) atomicExch(arrivals + r, 0u);
        const Normalizer<A, Log> f(row_max, row_sum);
        // (The next row's view is rebuilt at each refill: kept live, it made 16-bit types spill.)
        int64 next_end;
        const bool refill = Pipelined && r + rows_per_wave < rows && row_at(r + rows_per_wave, next_end).in_vec;
        // Pass 2, last tile first (in registers), then the streamed tiles read most recently
        // (the likeliest to be in L2), then the shared-memory tiles.
        last.store(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x, f);
        for (int64 t = tiles - 2; t >= 0; --t) {
            if (t < stashed) {
                c.load_from_stash(stash_tile(t), !row.in_vec, row, tile_begin(t), tile_end(t), threadIdx.x);
                if (refill) {
                    compiler_barrier();  // the reads above stay before the refill
                    const RowView<T> next = row_at(r + rows_per_wave, next_end);
                    request(next, static_cast<int>(t), next_end);
                }
            } else {
                c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            }
            c.store(row, tile_begin(t), tile_end(t), threadIdx.x, f);
        }
    }
}
