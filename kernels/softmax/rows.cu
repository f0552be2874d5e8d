// softmax_rows: each row held in the registers of one group of threads, Group lanes of a warp
// (several rows a warp), read once and written once; softmax_block_rows: the same with the
// whole block a row (Group == WholeBlock), its width set at launch.
//
// Picked (RowsConfig, cufuse/ops/softmax/rows.py) for rows of up to 4096 16-byte vectors
// (32768 float16 / 16384 float32 / 8192 float64 elements) whose reduced axis is contiguous, or
// whose reduced and inner axes are both strided (cufuse/ops/softmax/select.py; docs/softmax.md,
// "Rows"): sub-warp groups and warps on rungs of vectors a lane, and from 257 vectors one block
// a row (softmax_block_rows) whose width (a multiple of 32, fixed at launch) and vectors a lane are
// sized so that the row fills the block. A contiguous row that starts off a 16-byte boundary is
// read and written in aligned vectors from the boundary below it (align_row_origin), so the rung
// holds one vector more than the row.
#include "common/row_chunk.cuh"

// Group threads per row, Threads/Group rows per block (Group == WholeBlock: one row a block of
// blockDim.x <= Threads lanes); rows of length <= lanes*Vecs*VS. ExpOnce (softmax only): the
// exps of the sum are kept in registers and scaled at the store.
template <typename T, bool Log, int Threads, int Group, int Vecs, bool ExpOnce>
__device__ __forceinline__ void softmax_rows_body(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length, int64 inner,
                                                  int64 so, int64 si, int64 sl) {
    using A = cufuse::accum_t<T>;
    __shared__ BlockSlots<A, Threads> slots;
    constexpr int RowsPerBlock = Group == WholeBlock ? 1 : Threads / Group;
    const int lane = Group == WholeBlock ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % Group;
    const int64 r = static_cast<int64>(blockIdx.x) * RowsPerBlock + (Group == WholeBlock ? 0 : threadIdx.x / Group);
    const bool active = r < rows;  // inactive groups still join the shuffles, with an empty row
    using ChunkT = Chunk<T, Group, Vecs>;
    RowView<T> row = make_row(x, y, active ? r : 0, length, inner, so, si, sl);
    const int64 end = active ? align_row_origin(row, length, ChunkT::capacity_now()) : 0;
    ChunkT c;
    c.load(row, 0, end, lane);
    finish_row<Log, Group, Threads, ExpOnce>(c, slots, row, 0, end, lane);
}

template <typename T, bool Log, int Threads, int Group, int Vecs, bool ExpOnce>
__global__ void __launch_bounds__(Threads) softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length,
                                                        int64 inner, int64 so, int64 si, int64 sl) {
    softmax_rows_body<T, Log, Threads, Group, Vecs, ExpOnce>(x, y, rows, length, inner, so, si, sl);
}

// One row a block of any multiple of 32 threads up to 1024 (the width fixed at launch), its
// registers capped at MaxRegisters: with the slot stride known only at run time ptxas kept
// every slot's offsets live (float32 8 vectors a lane: 99 registers, where a compile-time
// width took 57-80), which cut the blocks an SM (9000 float32 elements on 288 x 8
// at 0.62 of the copy, 320 x 8 of the compile-time kernel at 1.01).
template <typename T, bool Log, int Vecs, bool ExpOnce, int MaxRegisters>
__global__ void __maxnreg__(MaxRegisters) softmax_block_rows(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length,
                                                             int64 inner, int64 so, int64 si, int64 sl) {
    softmax_rows_body<T, Log, 1024, WholeBlock, Vecs, ExpOnce>(x, y, rows, length, inner, so, si, sl);
}
