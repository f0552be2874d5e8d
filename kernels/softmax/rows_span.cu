// softmax_rows_span: many short rows, one after another in memory, a block's span of whole rows
// staged through shared memory, so that global memory sees only aligned 16-byte vectors
// whatever the row length and alignment (common/span_stage.cuh); Group lanes a row read it
// back from the tile, PerLane elements a lane.
//
// Picked (SpanRowsConfig, cufuse/ops/softmax/rows.py) for dense rows (unit element stride, row
// stride = length) of up to 256 elements whose length is not a multiple of the 16-byte vector:
// most such rows start off a vector boundary, where softmax_rows pays a masked head and tail a
// row (671088 x 100 float16: 0.59 of the copy). docs/softmax.md, "Span rows".
#include "common/span_stage.cuh"
#include "common/row_chunk.cuh"  // group_reduce

// Rows [blockIdx.x * tile_rows, + tile_rows) of length <= Group * PerLane; tile_rows a multiple
// of Threads / Group. Dynamic shared memory: the tile, tile_rows * length elements, the head
// (span_fill) and Group * PerLane elements of padding, in whole vectors. One tile a block: a
// persistent grid double-buffering its tiles measured slower (0.60 against
// 0.74 of the copy at 671088 x 100 float16), the instructions, not the loads, being the limit.
template <typename T, bool Log, int Threads, int Group, int PerLane, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM) softmax_rows_span(const T* __restrict__ x, T* __restrict__ y, int64 rows,
                                                                          int length, int tile_rows) {
    using A = cufuse::accum_t<T>;
    extern __shared__ uint4 tile_bytes[];
    T* tile = reinterpret_cast<T*>(tile_bytes);
    const int64 first_row = static_cast<int64>(blockIdx.x) * tile_rows;
    const int rows_here = static_cast<int>(min(static_cast<int64>(tile_rows), rows - first_row));
    const int64 begin = first_row * length;
    const int n = rows_here * length;
    const int head = cufuse::span_fill<T, Threads>(tile, x + begin, n);
    cufuse::cp_async_wait<0>();
    __syncthreads();

    constexpr int Groups = Threads / Group;
    const int lane = threadIdx.x % Group;
    // Slot k of a lane holds row element k * Group + lane; bit k of `valid` says whether the row
    // has it. Every slot is loaded (the tile has Group * PerLane elements of padding past its
    // last row) and those past the row take -inf by a select: branches or bounds tests a slot
    // cost as much as the slot's arithmetic (the rungs' capacities step by 4/3 or 3/2, so few
    // slots are idle).
    unsigned valid = 0;
#pragma unroll
    for (int k = 0; k < PerLane; ++k) valid |= static_cast<unsigned>(k * Group + lane < length) << k;
    // Every thread of the block makes the same passes (the group shuffles and the barrier below
    // need all of them): a group past the tile's last row reduces the last row again and stores
    // nothing.
    const int passes = (rows_here + Groups - 1) / Groups;
    for (int pass = 0; pass < passes; ++pass) {
        const int r = pass * Groups + static_cast<int>(threadIdx.x) / Group;
        const bool active = r < rows_here;
        T* row = tile + head + (active ? r : rows_here - 1) * length + lane;
        A v[PerLane];
        A m = cufuse::neg_infinity<A>();
#pragma unroll
        for (int k = 0; k < PerLane; ++k) {
            const A a = cufuse::to_accum(row[k * Group]);
            v[k] = valid >> k & 1 ? a : cufuse::neg_infinity<A>();
            m = max_nan(m, v[k]);
        }
        m = group_reduce<true, Group, Threads>(m, static_cast<A*>(nullptr));
        // exp(v - m) as one FMA and one MUFU for float (log2(e) * v - log2(e) * m; a row of -inf
        // still gives NaN, as -inf - -inf does). softmax keeps its exps (float16 / bfloat16
        // outputs take the flushed ones, wider outputs keep their subnormals); the sum's terms
        // are flushed (its largest is 1).
        const A m_log2 = m * A(1.4426950408889634);
        A s = 0;
#pragma unroll
        for (int k = 0; k < PerLane; ++k) {
            A term;
            if constexpr (sizeof(A) == 8) term = exp_accum(v[k] - m);
            else if (Log || sizeof(T) == 2) term = cufuse::fast_exp2(fmaf(v[k], 1.4426950408889634f, -m_log2));
            else term = exp2f(fmaf(v[k], 1.4426950408889634f, -m_log2));
            if (!Log) v[k] = term;
            s += term;
        }
        s = group_reduce<false, Group, Threads>(s, static_cast<A*>(nullptr));
        // softmax: exp * (1 / s), a row whose max is not finite all NaN (Normalizer's rule; s >= 1
        // otherwise, so the approximate reciprocal is safe); log_softmax: Normalizer's map.
        // The results go back in place: the barrier orders every group's reads of this pass
        // (the padding slots reach into the next rows, an idle group reads the last row) before
        // any write (compute-sanitizer racecheck; the values read there are dropped).
        __syncthreads();
        if (active) {
            if constexpr (Log) {
                const Normalizer<A, true> log_map(m, s);
#pragma unroll
                for (int k = 0; k < PerLane; ++k)
                    if (valid >> k & 1) row[k * Group] = cufuse::from_accum<T>(log_map(v[k]));
            } else {
                A scale;
                if constexpr (sizeof(A) == 4) scale = isfinite(m) ? cufuse::fast_rcp(s) : nan_value<A>();
                else scale = Normalizer<A, false>(m, s).k;
#pragma unroll
                for (int k = 0; k < PerLane; ++k)
                    if (valid >> k & 1) row[k * Group] = cufuse::from_accum<T>(v[k] * scale);
            }
        }
    }
    __syncthreads();
    cufuse::span_store<T, Threads>(y + begin, tile, head, n);
}
