// Split-K through slots: the blocks of one output tile (grid z = its splits, blockIdx.x the
// tile) each hold a partial tile in registers; every split stores its partial to its own
// slot of the workspace, and the block that arrives last sums the slots in split order (its
// own re-read too) and goes on as an unsplit block would (bias, activation, the only store).
// The sum's order is fixed, so the result's bits do not depend on which block arrives last
// (bitwise reproducible, as cuBLAS is). No atomics on the output cells, vector stores and
// loads, nothing to re-zero but the tile's counter.
// Used by the GEMM kernels (linear/*.cu) for any m16n8-style accumulator array.
#pragma once
#include "common/common.cuh"

namespace cufuse {

// Zeroes m16n8-style accumulator tiles (a warp's, or a split's partial sum).
template <typename A, int MI, int NI>
__device__ __forceinline__ void zero_accumulators(A (&acc)[MI][NI][4]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = A(0);
}

// Partial tiles are stored in accumulator order, 16 bytes per thread and unit (one float4 of
// float accumulators, two double2 of double ones, per (i, j)): each warp writes 512
// contiguous bytes a unit. Workspace (of the accumulator type A): gridDim.x x gridDim.z slots
// of MI x NI x 4 x THREADS values; `counters` one zero int per tile, zero again on exit. The
// whole block calls it, or with `sync_threads` > 0 only its first THREADS = sync_threads
// threads (last_to_arrive). Returns true in the last block, with acc the tile's full sum
// (((0 + slot 0) + slot 1) + slot 2 ...).
template <int THREADS, typename A, int MI, int NI>
__device__ __forceinline__ bool reduce_split_slots(A (&acc)[MI][NI][4], A* __restrict__ workspace,
                                                   int* __restrict__ counters, int sync_threads = 0) {
    constexpr int per_unit = Vec16<A>::size, units = 4 / per_unit;
    constexpr int slot_values = MI * NI * 4 * THREADS;
    const int splits = gridDim.z, split = blockIdx.z;
    // This thread's first unit of the tile's first slot: every access below is a constant
    // offset from it or from one per-slot pointer, so no table of addresses is kept in
    // registers across the slots.
    A* const mine = workspace + (int64(blockIdx.x) * splits * slot_values + threadIdx.x * per_unit);
    A* const own = mine + int64(split) * slot_values;
    // Unit e = (i, j, u) of the tile, in that order, sits e x THREADS x per_unit values into a slot.
#pragma unroll
    for (int e = 0; e < MI * NI * units; ++e) {
        const int i = e / (NI * units), j = e / units % NI, u = e % units;
        Vec16<A> values;
#pragma unroll
        for (int r = 0; r < per_unit; ++r) values.v[r] = acc[i][j][u * per_unit + r];
        store_vec16(own + e * THREADS * per_unit, values);
    }
    if (!last_to_arrive(counters + blockIdx.x, splits, sync_threads)) return false;
    zero_accumulators(acc);  // then 0 + slot 0 + slot 1 ...: every last block's order, its own slot re-read
    for (int z = 0; z < splits; ++z) {
        const A* part = mine + int64(z) * slot_values;
#pragma unroll
        for (int e = 0; e < MI * NI * units; ++e) {
            const int i = e / (NI * units), j = e / units % NI, u = e % units;
            Vec16<A> values;  // L2 only: other blocks wrote it
            *reinterpret_cast<uint4*>(&values) = __ldcg(reinterpret_cast<const uint4*>(part + e * THREADS * per_unit));
#pragma unroll
            for (int r = 0; r < per_unit; ++r) acc[i][j][u * per_unit + r] += values.v[r];
        }
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    return true;
}

}  // namespace cufuse
