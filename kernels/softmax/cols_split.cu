// softmax_cols_split: the reduced axis strided over a contiguous inner axis, every element read
// once and written once: strips of adjacent columns held on chip by the co-resident blocks of a
// persistent grid, a strip's rows split over blocks_per_strip blocks that exchange their column
// statistics through global memory (the scheme of softmax_rows_split).
//
// Picked (ColsSplitConfig, cufuse/ops/softmax/cols.py) for float16, bfloat16 and float32 column
// layouts with aligned 16-byte column vectors (cols_vectorizable), columns from one tile (256
// rows of 2-byte types, 128 of float32) to what the resident grid holds (H200: 202752 rows);
// the other column layouts take cols.cu. docs/softmax.md, "Columns".
#include "common/columns.cuh"

namespace cufuse {
namespace softmax_detail {

// One block's part of a column strip: rows [begin, end) of the reduced axis, cut into tiles of
// TileRows = Slices*Vecs rows (thread: column vector `lane`, row `slice` of each Slices-row
// band). Tiles [0, stashed) live in dynamic shared memory ([tile][Vecs][Threads]: conflict-free),
// the last one in registers where RegisterTile; a thread reads back only the slots it wrote.
template <typename T, int Threads, int ColLanes, int Vecs, bool RegisterTile> struct StripPart {
    using V = Vec16<T>;
    static constexpr int VS = V::size, Slices = Threads / ColLanes, Cols = ColLanes * VS, TileRows = Slices * Vecs, Warps = Threads / 32;
    static_assert(32 % ColLanes == 0 && Threads % 32 == 0 && Cols <= Threads,
                  "a warp holds whole rows of the strip; a thread per column merges the warps");
    V* stash;
    int64 begin, end;
    int stashed;  // tiles in shared memory; the register tile, if any, is tile `stashed`
    __device__ __forceinline__ StripPart(V* stash_, int64 length, int64 part, int64 index) : stash(stash_) {
        begin = min(length, index * part);
        end = min(length, begin + part);
        const int tiles = static_cast<int>(max(int64(1), (end - begin + TileRows - 1) / TileRows));
        stashed = RegisterTile ? tiles - 1 : tiles;
    }
    __device__ __forceinline__ int64 row(int t, int v, int slice) const { return begin + static_cast<int64>(t) * TileRows + v * Slices + slice; }
    __device__ __forceinline__ V* slot(int t, int v) const { return stash + (t * Vecs + v) * Threads + threadIdx.x; }
    __device__ __forceinline__ bool present(const ColumnVector<T, ColLanes>& cv, int64 l) const { return cv.active && l < end; }
};

// Slot (t, v) of the part of strip cv requested into shared memory: cp.async, or a synchronous
// load where x is not 16-byte aligned. The caller commits the group.
template <typename Part, typename T, int ColLanes>
__device__ __forceinline__ void request_strip_slot(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl, int t, int v) {
    const int64 l = p.row(t, v, cv.slice);
    if (!p.present(cv, l)) return;
    if (cv.in_vec) cp_async_16(p.slot(t, v), cv.in + l * sl, true);
    else *p.slot(t, v) = load_columns(cv.in + l * sl, false);
}

// Every shared-memory tile of the part requested, one cp.async group a tile.
template <int Vecs, typename Part, typename T, int ColLanes>
__device__ __forceinline__ void request_strip_tiles(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl) {
    for (int t = 0; t < p.stashed; ++t) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) request_strip_slot(p, cv, sl, t, v);
        cp_async_commit();
    }
}

// The thread's online (max, sum) of its VS columns over the part: the register tile loaded
// (its loads in flight with the tiles') and merged first, then each shared-memory tile as its
// group lands (tile t: the t-th of the thread's `stashed` pending groups).
template <int Vecs, bool RegisterTile, typename Part, typename T, int ColLanes, typename A = accum_t<T>>
__device__ __forceinline__ void merge_strip_part(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl,
                                                 Vec16<T> (&last)[RegisterTile ? Vecs : 1], A (&m)[Vec16<T>::size],
                                                 A (&s)[Vec16<T>::size]) {
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) m[j] = neg_infinity<A>(), s[j] = 0;
    if constexpr (RegisterTile) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(p.stashed, v, cv.slice);
            last[v] = p.present(cv, l) ? load_columns(cv.in + l * sl, cv.in_vec) : neg_inf_vector<T>();
        }
        merge_columns<T, Vecs>(last, m, s);
    }
    for (int t = 0; t < p.stashed; ++t) {
        cp_async_wait_pending(p.stashed - 1 - t);  // tile t's group has landed
        Vec16<T> c[Vecs];
#pragma unroll
        for (int v = 0; v < Vecs; ++v) c[v] = p.present(cv, p.row(t, v, cv.slice)) ? *p.slot(t, v) : neg_inf_vector<T>();
        merge_columns<T, Vecs>(c, m, s);
    }
}

// The block's (max, sum) of each of its Cols columns from the threads' online pairs: across a
// warp's slices by shuffles (the slices of one column vector are lanes ColLanes, 2*ColLanes,
// ... apart), across warps in shared memory; thread c < Cols writes column c's pair to
// block_stats (no barrier after).
template <int Threads, int ColLanes, int VS, typename A>
__device__ __forceinline__ void block_column_stats(A (&m)[VS], A (&s)[VS], A (&warp_stats)[Threads / 32][ColLanes * VS][2],
                                                   A (&block_stats)[ColLanes * VS][2], int lane) {
    constexpr int Warps = Threads / 32, Cols = ColLanes * VS;
#pragma unroll
    for (int offset = ColLanes; offset < 32; offset *= 2)
#pragma unroll
        for (int j = 0; j < VS; ++j) {
            const A other_m = __shfl_xor_sync(0xffffffffu, m[j], offset), other_s = __shfl_xor_sync(0xffffffffu, s[j], offset);
            merge_stats(m[j], s[j], other_m, other_s);
        }
    const int warp = threadIdx.x / 32, c = threadIdx.x;
    if (threadIdx.x % 32 < ColLanes) {
#pragma unroll
        for (int j = 0; j < VS; ++j) warp_stats[warp][lane * VS + j][0] = m[j], warp_stats[warp][lane * VS + j][1] = s[j];
    }
    __syncthreads();
    if (c < Cols) {
        A col_max = neg_infinity<A>(), col_sum = 0;
        for (int w = 0; w < Warps; ++w) merge_stats(col_max, col_sum, warp_stats[w][c][0], warp_stats[w][c][1]);
        block_stats[c][0] = col_max;
        block_stats[c][1] = col_sum;
    }
}

// Output pass of the part: the register tile, then the shared-memory tiles. after_read(t, v)
// runs once the thread has read slot (t, v) (the split kernel refills it there).
template <bool Log, int Vecs, bool RegisterTile, typename Part, typename T, int ColLanes, typename A, typename AfterRead>
__device__ __forceinline__ void store_strip_part(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 inner,
                                                 const Normalizer<A, Log> (&f)[Vec16<T>::size],
                                                 const Vec16<T> (&last)[RegisterTile ? Vecs : 1], AfterRead after_read) {
    if constexpr (RegisterTile) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(p.stashed, v, cv.slice);
            if (p.present(cv, l)) store_columns(cv.out + l * inner, cv.out_vec, normalize_columns<T, Log>(f, last[v]));
        }
    }
    for (int t = 0; t < p.stashed; ++t) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(t, v, cv.slice);
            if (p.present(cv, l)) store_columns(cv.out + l * inner, cv.out_vec, normalize_columns<T, Log>(f, *p.slot(t, v)));
            after_read(t, v);
        }
    }
}

template <typename A> struct StatsPair;
template <> struct StatsPair<float> { using type = float2; };
template <> struct StatsPair<double> { using type = double2; };

// The column statistics of a strip split over `parts` blocks of a persistent grid, through
// global memory: thread c < Cols publishes block_stats[c] to strip_partials[part][c], the block
// arrives at `counter` and waits for `target` arrivals, then Threads / Cols threads a column
// merge the parts' pairs (independent loads, several a thread), and thread c < Cols merges
// those into block_stats[c] (no barrier after). group_stats: scratch, free on entry.
template <int Threads, int Cols, typename A>
__device__ __forceinline__ void exchange_column_stats(A (&block_stats)[Cols][2], A (&group_stats)[Threads / Cols][Cols][2],
                                                      A* strip_partials, int part, int parts, unsigned* counter, unsigned target) {
    using Pair = typename StatsPair<A>::type;
    constexpr int Groups = Threads / Cols;
    Pair* pairs = reinterpret_cast<Pair*>(strip_partials);
    const int c = threadIdx.x % Cols, group = threadIdx.x / Cols;
    if (threadIdx.x < Cols) pairs[part * Cols + c] = Pair{block_stats[c][0], block_stats[c][1]};
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // cumulative: the block's writes, ordered before it by the barrier (as in a grid sync)
        atomicAdd(counter, 1u);
        wait_for_arrivals(counter, target);
        __threadfence();
    }
    __syncthreads();
    A m = neg_infinity<A>(), s = 0;
#pragma unroll 4
    for (int q = group; q < parts; q += Groups) {
        const Pair other = __ldcg(pairs + q * Cols + c);
        merge_stats(m, s, other.x, other.y);
    }
    group_stats[group][c][0] = m;
    group_stats[group][c][1] = s;
    __syncthreads();
    if (threadIdx.x < Cols) {
        m = neg_infinity<A>(), s = 0;
#pragma unroll
        for (int g = 0; g < Groups; ++g) merge_stats(m, s, group_stats[g][c][0], group_stats[g][c][1]);
        block_stats[c][0] = m;
        block_stats[c][1] = s;
    }
}

}  // namespace softmax_detail
}  // namespace cufuse

// A persistent grid of strips_per_wave x blocks_per_strip co-resident blocks (the host sizes it
// from the occupancy guaranteed by __launch_bounds__(Threads, BlocksPerSM) and the shared memory
// per block). A strip is Cols = ColLanes*VS adjacent columns of one outer index (ColLanes 16-byte
// vectors: ColLanes*16 bytes contiguous a row; strips = outer x column strips). Block b holds
// part b % blocks_per_strip (rows [part*part_rows, ...)) of strips b / blocks_per_strip,
// + strips_per_wave, ..., in tiles of TileRows = Slices*Vecs rows (StripPart): all but the last in
// dynamic shared memory through cp.async, one group a tile, merged into the thread's online
// per-column (max, sum) as each lands; with RegisterTile the last one in registers. The blocks of
// one strip advance together, so the arrival wait cannot deadlock. Column statistics meet across
// a warp's slices by shuffles, across warps in shared memory, and across the strip's blocks in
// global memory: partials [parity][slot][part][Cols][2] (2 x gridDim.x x Cols pairs; parity: a
// block may publish its next strip's pairs while a slower block of its slot still reads this
// strip's) and one arrival counter a slot, counting up by blocks_per_strip a strip (a block
// arrives at its next strip only after all arrived at this one); each block adds 1 more on
// leaving and the last to leave zeroes the counter, so the scratch is reused without a memset.
// The output pass refills each shared-memory slot, once read, with the block's next strip (a
// thread refills only the slots it reads itself: no barrier), so the next strip's loads overlap
// this one's stores. Needs si == 1 and so, sl, inner multiples of VS (the host checks); an x or y
// base that is not 16-byte aligned takes scalar accesses (x's tiles then loaded synchronously).
template <typename T, bool Log, int Threads, int ColLanes, int Vecs, bool RegisterTile, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_cols_split(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so, int64 si,
                       int64 sl, int64 part_rows, int blocks_per_strip, int64 strips, cufuse::accum_t<T>* partials,
                       unsigned* arrivals) {
    using A = cufuse::accum_t<T>;
    using Part = StripPart<T, Threads, ColLanes, Vecs, RegisterTile>;
    constexpr int VS = Part::VS, Cols = Part::Cols;
    static_assert(Threads / Cols <= Part::Warps, "the exchange's per-group pairs reuse warp_stats");
    __shared__ A warp_stats[Part::Warps][Cols][2];
    __shared__ A block_stats[Cols][2];
    extern __shared__ uint4 stash_bytes[];
    const int part = blockIdx.x % blocks_per_strip;
    const int64 slot = blockIdx.x / blocks_per_strip, strips_per_wave = gridDim.x / blocks_per_strip;
    if (slot >= strips) return;
    const Part p(reinterpret_cast<typename Part::V*>(stash_bytes), length, part_rows, part);
    auto column_vector = [&](int64 strip) { return ColumnVector<T, ColLanes>(x, y, length, inner, so, strip); };
    unsigned* counter = arrivals + slot;
    A* slot_partials = partials + 2 * slot * blocks_per_strip * Cols;
    request_strip_tiles<Vecs>(p, column_vector(slot), sl);
    unsigned arrived = 0;  // arrivals at this slot's counter once every block reached this strip
    int parity = 0;
    for (int64 strip = slot; strip < strips; strip += strips_per_wave, parity ^= 1) {
        const ColumnVector<T, ColLanes> cv = column_vector(strip);
        A m[VS], s[VS];
        typename Part::V last[RegisterTile ? Vecs : 1];
        merge_strip_part<Vecs, RegisterTile>(p, cv, sl, last, m, s);
        block_column_stats<Threads, ColLanes>(m, s, warp_stats, block_stats, cv.lane);
        arrived += blocks_per_strip;
        exchange_column_stats<Threads, Cols>(block_stats, reinterpret_cast<A(&)[Threads / Cols][Cols][2]>(warp_stats),
                                             slot_partials + static_cast<int64>(parity) * 2 * gridDim.x * Cols, part,
                                             blocks_per_strip, counter, arrived);
        Normalizer<A, Log> f[VS];
        column_normalizers<1, Cols>(block_stats, cv.lane, f);
        const bool refill = strip + strips_per_wave < strips;
        const ColumnVector<T, ColLanes> next = column_vector(refill ? strip + strips_per_wave : strip);
        store_strip_part<Log, Vecs, RegisterTile>(p, cv, inner, f, last, [&](int t, int v) {
            if (!refill) return;
            compiler_barrier();  // the read of slot (t, v) stays before its refill
            request_strip_slot(p, next, sl, t, v);
            if (v == Vecs - 1) cufuse::cp_async_commit();
        });
    }
    // Every thread read its partials before the exchange's last barrier: leave the slot. The
    // last block to leave re-arms the counter for the next call (the others passed their waits).
    if (threadIdx.x == 0 && atomicAdd(counter, 1u) == arrived + blocks_per_strip - 1u) atomicExch(counter, 0u);
}
