// softmax_rows: each row held in the registers of one group of threads, Group lanes of a warp
// (several rows a warp) or the whole block (Group == Threads), read once and written once.
//
// Picked (RowsConfig, cufuse/ops/softmax/rows.py) for rows of up to 4096 16-byte vectors
// (32768 float16 / 16384 float32 / 8192 float64 elements) whose reduced axis is contiguous, or
// whose reduced and inner axes are both strided: the capacity ladder of
// cufuse/ops/softmax/select.py, one rung per doubling (docs/softmax.md, "Rows"). A contiguous
// row that starts off a 16-byte boundary is read and written in aligned vectors from the
// boundary below it (align_row_origin), so the rung holds one vector more than the row.
#include "softmax/row_chunk.cuh"

// Group threads per row, Threads/Group rows per block; rows of length <= Group*Vecs*VS.
// ExpOnce (softmax only): the exps of the sum are kept in registers and scaled at the store.
template <typename T, bool Log, int Threads, int Group, int Vecs, bool ExpOnce>
__global__ void __launch_bounds__(Threads) softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length,
                                                        int64 inner, int64 so, int64 si, int64 sl) {
    using A = cufuse::accum_t<T>;
    __shared__ BlockSlots<A, Threads> slots;
    constexpr int RowsPerBlock = Threads / Group;
    const int lane = threadIdx.x % Group;
    const int64 r = static_cast<int64>(blockIdx.x) * RowsPerBlock + threadIdx.x / Group;
    const bool active = r < rows;  // inactive groups still join the shuffles, with an empty row
    using ChunkT = Chunk<T, Group, Vecs>;
    RowView<T> row = make_row(x, y, active ? r : 0, length, inner, so, si, sl);
    const int64 end = active ? align_row_origin(row, length, ChunkT::capacity) : 0;
    ChunkT c;
    c.load(row, 0, end, lane);
    finish_row<Log, Group, Threads, ExpOnce>(c, slots, row, 0, end, lane);
}
