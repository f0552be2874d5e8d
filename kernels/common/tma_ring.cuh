// The TMA-fed main loop of a warpgroup-MMA GEMM (sm_90a): a producer warp loads the k tiles
// of two operands through tensor maps into a ring of shared-memory stages, consumer
// warpgroups run wgmma on them, and mbarriers pass each stage between the two ("full": its
// bytes landed; "empty": its MMAs are done), with no block-wide barrier after the init.
#pragma once
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace cufuse {

struct NoHook {
    __device__ __forceinline__ void operator()() const {}
};

// Block: CONSUMERS threads (consumer warpgroups), then one producer warp. A stage holds the
// A operand (x of a GEMM) as [XROWS][BK] (BK / 64 boxes of [XROWS][64]), then B (a weight):
// K-major as [BN][BK] (BK / 64 boxes of [BN][64]), N-major as BN / 64 boxes of [BK][64]; all
// 128-byte swizzled by the tensor maps, which is the layout the wgmma descriptors read
// (kmajor_atom_offset / nmajor_atom_offset), zero-filled past the tensors' ends. A `work`
// names a tile's k range and corner (k_begin, k_tiles, m0, n0). The ring counts the k tiles
// that passed through it (`passed`, kept by each side), so that one block can run several works
// through it (a persistent GEMM on it measured no faster: docs/linear.md): k tile number
// `passed` uses stage passed % STAGES in round passed / STAGES. One producer thread waits for the stage's "empty" mbarrier, announces
// its bytes on its "full" mbarrier and issues the boxes. Consumers wait for "full", issue the
// stage's wgmmas (`stage_mma(acc, stage)`: one commit group), and once wgmma.wait_group says a
// tile's MMAs PENDING tiles back are done, lane 0 of each consumer warp arrives on that
// stage's "empty" (count: consumer warps); a work's last PENDING stages are released once its
// accumulators are complete. L2_HINTS: the loads ask L2 to evict B (read once) first and keep A
// (re-read by every block; +2-5 % on the weight streams). B_PARTS: B's BN columns
// come from B_PARTS maps, BN / B_PARTS columns of each at the same column n0 (the gated GEMM:
// w_gate's columns, then w_up's, so one wgmma chain covers both). READERS: the consumer threads
// that read each stage and release it (all CONSUMERS; a ping-pong GEMM: one warpgroup, whose
// tile owns the stage). Shared memory: STAGES stages at `smem` (1024-byte aligned), then
// 2 x STAGES mbarriers.
template <typename T, int XROWS, int BN, int BK, int STAGES, int PENDING, int CONSUMERS, bool B_KMAJOR,
          bool L2_HINTS = false, int B_PARTS = 1, int READERS = CONSUMERS>
struct TmaWgmmaRing {
    static constexpr int X_ELEMS = XROWS * BK, STAGE_ELEMS = (XROWS + BN) * BK;
    static constexpr int PART_N = BN / B_PARTS;
    static constexpr unsigned STAGE_BYTES = STAGE_ELEMS * sizeof(T);
    static_assert(BK % 64 == 0 && XROWS % 8 == 0 && BN % 64 == 0, "whole 128-byte swizzle atoms");
    // A K-major part is whole 1024-byte swizzle groups of 8 rows; an N-major one whole atoms of 64 n.
    static_assert(BN % B_PARTS == 0 && PART_N % (B_KMAJOR ? 8 : 64) == 0, "B parts of whole swizzle atoms");
    static_assert(PENDING >= 0 && PENDING < STAGES, "a stage is released PENDING tiles after its wgmmas");
    static_assert(READERS % 128 == 0 && CONSUMERS % READERS == 0, "whole consumer warpgroups read a stage");

    T* smem;
    unsigned long long* full;
    unsigned long long* empty;

    // Every thread of the block: the barriers initialised and visible (one block barrier).
    __device__ __forceinline__ explicit TmaWgmmaRing(T* stages) : smem(stages) {
        full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_ELEMS);
        empty = full + STAGES;
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; ++s) {
                mbarrier_init(full + s, 1);
                mbarrier_init(empty + s, READERS / 32);
            }
            mbarrier_init_fence();
        }
        __syncthreads();
    }

    __device__ __forceinline__ static bool is_producer() { return threadIdx.x >= CONSUMERS; }

    // The producer thread (threadIdx.x == CONSUMERS): every k tile of `work`; B part p from
    // w_map (p = 0) or w2_map (p = 1).
    template <typename Work>
    __device__ __forceinline__ void produce(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                            const TmaDescriptor& w2_map, const Work& work, int& passed) {
        static_assert(B_PARTS == 1 || B_PARTS == 2, "one or two weight maps");
        const unsigned long long x_policy = L2_HINTS ? l2_policy_evict_last() : 0;
        const unsigned long long w_policy = L2_HINTS ? l2_policy_evict_first() : 0;
        auto load = [&](const TmaDescriptor& map, unsigned long long policy, void* dst, int inner, int outer,
                        unsigned long long* bar) {
            if constexpr (L2_HINTS)
                tma_load_2d(dst, map, inner, outer, bar, policy);
            else
                tma_load_2d(dst, map, inner, outer, bar);
        };
        for (int kt = 0; kt < work.k_tiles; ++kt, ++passed) {
            const int s = passed % STAGES;
            mbarrier_wait(empty + s, ((passed / STAGES) & 1) ^ 1);  // round 0 passes at once
            T* stage = smem + s * STAGE_ELEMS;
            mbarrier_arrive_expect_tx(full + s, STAGE_BYTES);
            const int k0 = int(work.k_begin) + kt * BK;
#pragma unroll
            for (int a = 0; a < BK / 64; ++a) load(x_map, x_policy, stage + a * XROWS * 64, k0 + 64 * a, int(work.m0), full + s);
#pragma unroll
            for (int p = 0; p < B_PARTS; ++p) {
                const TmaDescriptor& map = p == 0 ? w_map : w2_map;
                T* part = stage + X_ELEMS + p * PART_N * (B_KMAJOR ? 64 : BK);
                if constexpr (B_KMAJOR) {
#pragma unroll
                    for (int a = 0; a < BK / 64; ++a)
                        load(map, w_policy, part + a * BN * 64, k0 + 64 * a, int(work.n0), full + s);
                } else {
#pragma unroll
                    for (int j = 0; j < PART_N / 64; ++j)
                        load(map, w_policy, part + j * BK * 64, int(work.n0) + 64 * j, k0, full + s);
                }
            }
        }
    }

    // The consumer threads: acc = the sum over `work`'s k tiles, complete on return, and every
    // stage of the work released. `last_landed()` runs once the work's last k tile has landed
    // (a ping-pong GEMM hands the other warpgroup its turn there).
    template <int ACC, typename Work, typename StageMma, typename LastLanded = NoHook>
    __device__ __forceinline__ void consume(const Work& work, float (&acc)[ACC], StageMma stage_mma, int& passed,
                                            LastLanded last_landed = {}) {
        const int lane = threadIdx.x & 31;
        const int first = passed;
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
        if (work.k_tiles == 0) last_landed();
        for (int kt = 0; kt < work.k_tiles; ++kt, ++passed) {
            const int s = passed % STAGES;
            mbarrier_wait(full + s, (passed / STAGES) & 1);
            if (kt == work.k_tiles - 1) last_landed();
            stage_mma(acc, smem + s * STAGE_ELEMS);
            wgmma_wait<PENDING>();
#pragma unroll
            for (int i = 0; i < ACC; ++i) pin(acc[i]);
            if (kt >= PENDING && lane == 0) mbarrier_arrive(empty + (passed - PENDING) % STAGES);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < ACC; ++i) pin(acc[i]);
        if (lane == 0)
            for (int done = max(first, passed - PENDING); done < passed; ++done) mbarrier_arrive(empty + done % STAGES);
    }
};

// One tile through a fresh ring (the non-persistent kernels). Returns false in the producer
// warp (its other lanes leave at once), true in the consumers with acc complete. w2_map: B's
// second part where B_PARTS is 2 (ignored otherwise).
template <typename T, int XROWS, int BN, int BK, int STAGES, int PENDING, int CONSUMERS, bool B_KMAJOR,
          bool L2_HINTS = false, int B_PARTS = 1, int ACC, typename Work, typename StageMma>
__device__ __forceinline__ bool tma_wgmma_ring(const TmaDescriptor& x_map, const TmaDescriptor& w_map,
                                               const TmaDescriptor& w2_map, const Work& work, T* smem,
                                               float (&acc)[ACC], StageMma stage_mma) {
    TmaWgmmaRing<T, XROWS, BN, BK, STAGES, PENDING, CONSUMERS, B_KMAJOR, L2_HINTS, B_PARTS> ring(smem);
    int passed = 0;
    if (ring.is_producer()) {
        if (threadIdx.x == CONSUMERS) ring.produce(x_map, w_map, w2_map, work, passed);
        return false;
    }
    ring.consume(work, acc, stage_mma, passed);
    return true;
}

}  // namespace cufuse
