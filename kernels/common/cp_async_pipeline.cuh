// The multi-stage cp.async main loop of a tiled GEMM: STAGES shared-memory stages in a
// ring, STAGES - 1 k tiles in flight ahead of the one being computed, one block barrier
// per k tile (after it, stage kt has landed for every thread and the stage of tile kt - 1
// is free to refill).
#pragma once
#include "common/mma.cuh"  // cp_async_commit, cp_async_wait

namespace cufuse {

// `fill(stage, kt)` issues the cp.async copies of k tile kt into `stage` (called for kt <
// k_tiles only; an empty commit group past the end keeps the wait counts uniform at the
// tail); `compute(stage)` runs the block's MMAs on a landed stage. Stages are STAGE_ELEMS
// elements apart from `smem`. Returns with every copy complete.
template <int STAGES, int STAGE_ELEMS, typename T, typename Fill, typename Compute>
__device__ __forceinline__ void cp_async_pipeline(T* smem, int k_tiles, Fill fill, Compute compute) {
    auto load = [&](int kt) {
        T* stage = smem + (kt % STAGES) * STAGE_ELEMS;
        if (kt < k_tiles) fill(stage, kt);
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) load(s);
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        load(kt + STAGES - 1);
        compute(static_cast<const T*>(smem + (kt % STAGES) * STAGE_ELEMS));
    }
    cp_async_wait<0>();
}

}  // namespace cufuse
