// The TMA-fed main loop of a warpgroup-MMA GEMM (sm_90a): a producer warp loads the k tiles
// of two operands through tensor maps into a ring of shared-memory stages, consumer
// warpgroups run wgmma on them, and mbarriers pass each stage between the two ("full": its
// bytes landed; "empty": its MMAs are done), with no block-wide barrier after the init.
#pragma once
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace cufuse {

// Block: CONSUMERS threads (consumer warpgroups), then one producer warp. A stage holds the
// A operand (x of a GEMM) as [XROWS][BK] (BK / 64 boxes of [XROWS][64]), then B (a weight):
// K-major as [BN][BK] (BK / 64 boxes of [BN][64]), N-major as BN / 64 boxes of [BK][64]; all
// 128-byte swizzled by the tensor maps, which is the layout the wgmma descriptors read
// (kmajor_atom_offset / nmajor_atom_offset), zero-filled past the tensors' ends. `work` names
// the block's k range and tile corner (k_begin, k_tiles, m0, n0). One producer thread waits
// for stage kt % STAGES's "empty" mbarrier, announces the stage's bytes on its "full"
// mbarrier and issues the boxes; the producer warp leaves after its last tile. Consumers wait
// for "full", issue the stage's wgmmas (`stage_mma(acc, stage)`: one commit group), and once
// wgmma.wait_group says tile kt - PENDING's MMAs are done, lane 0 of each consumer warp
// arrives on that stage's "empty" (count: consumer warps). Returns false in the producer
// warp, true in the consumers with acc complete. L2_HINTS: the loads ask L2 to evict B (read
// once) first and keep A (re-read by every block; run S8-2: +2-5 % on the weight streams).
// Shared memory: STAGES stages at `smem` (1024-byte aligned), then 2 x STAGES mbarriers.
template <typename T, int XROWS, int BN, int BK, int STAGES, int PENDING, int CONSUMERS, bool B_KMAJOR,
          bool L2_HINTS = false, int ACC, typename Work, typename StageMma>
__device__ __forceinline__ bool tma_wgmma_ring(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                               const Work& work, T* smem, float (&acc)[ACC], StageMma stage_mma) {
    constexpr int X_ELEMS = XROWS * BK, STAGE_ELEMS = (XROWS + BN) * BK;
    constexpr unsigned STAGE_BYTES = STAGE_ELEMS * sizeof(T);
    static_assert(BK % 64 == 0 && XROWS % 8 == 0 && BN % 64 == 0, "whole 128-byte swizzle atoms");
    static_assert(PENDING >= 0 && PENDING < STAGES, "a stage is released PENDING tiles after its wgmmas");
    unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_ELEMS);
    unsigned long long* empty = full + STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + s, 1);
            mbarrier_init(empty + s, CONSUMERS / 32);
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    if (threadIdx.x >= CONSUMERS) {  // the producer warp
        if (threadIdx.x == CONSUMERS) {
            const unsigned long long x_policy = L2_HINTS ? l2_policy_evict_last() : 0;
            const unsigned long long w_policy = L2_HINTS ? l2_policy_evict_first() : 0;
            auto load_x = [&](void* dst, int inner, int outer, unsigned long long* bar) {
                if constexpr (L2_HINTS)
                    tma_load_2d(dst, x_map, inner, outer, bar, x_policy);
                else
                    tma_load_2d(dst, x_map, inner, outer, bar);
            };
            auto load_w = [&](void* dst, int inner, int outer, unsigned long long* bar) {
                if constexpr (L2_HINTS)
                    tma_load_2d(dst, w_map, inner, outer, bar, w_policy);
                else
                    tma_load_2d(dst, w_map, inner, outer, bar);
            };
            for (int kt = 0; kt < work.k_tiles; ++kt) {
                const int s = kt % STAGES;
                mbarrier_wait(empty + s, ((kt / STAGES) & 1) ^ 1);  // round 0 passes at once
                T* stage = smem + s * STAGE_ELEMS;
                mbarrier_arrive_expect_tx(full + s, STAGE_BYTES);
                const int k0 = int(work.k_begin) + kt * BK;
#pragma unroll
                for (int a = 0; a < BK / 64; ++a)
                    load_x(stage + a * XROWS * 64, k0 + 64 * a, int(work.m0), full + s);
                if constexpr (B_KMAJOR) {
#pragma unroll
                    for (int a = 0; a < BK / 64; ++a)
                        load_w(stage + X_ELEMS + a * BN * 64, k0 + 64 * a, int(work.n0), full + s);
                } else {
#pragma unroll
                    for (int j = 0; j < BN / 64; ++j)
                        load_w(stage + X_ELEMS + j * BK * 64, int(work.n0) + 64 * j, k0, full + s);
                }
            }
        }
        return false;
    }

    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    for (int kt = 0; kt < work.k_tiles; ++kt) {
        const int s = kt % STAGES;
        mbarrier_wait(full + s, (kt / STAGES) & 1);
        stage_mma(acc, smem + s * STAGE_ELEMS);
        wgmma_wait<PENDING>();
#pragma unroll
        for (int i = 0; i < ACC; ++i) pin(acc[i]);
        if (kt >= PENDING && lane == 0) mbarrier_arrive(empty + (kt - PENDING) % STAGES);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < ACC; ++i) pin(acc[i]);
    return true;
}

}  // namespace cufuse
