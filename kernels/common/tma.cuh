// Hopper (sm_90) tensor-memory-accelerator loads and the mbarriers that count their bytes.
// A TmaDescriptor is the driver's 128-byte CUtensorMap (built on the host by
// cuTensorMapEncodeTiled, cufuse/_core/tma.py) passed by value as a `const __grid_constant__`
// kernel parameter, so its address is the parameter's own: the PTX needs only that address
// (NVRTC has no cuda.h, hence the own declaration). Layouts follow the PTX ISA's
// "cp.async.bulk.tensor" and "mbarrier" sections. The instructions exist on sm_90 only;
// callers guard their bodies accordingly.
#pragma once
#include "common/mma.cuh"  // smem_addr

namespace cufuse {

struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};

// An mbarrier expecting `arrivals` arrivals per phase (one thread initialises it).
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes initialised mbarriers visible to the other threads and to the async proxy (TMA);
// a block barrier must follow before anyone uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` more transaction bytes for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase of parity `parity` has completed. A fresh mbarrier is in phase 0,
// so waiting for parity 1 returns at once (the "previous" phase counts as complete).
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

// One 2-D box of `map` at element coordinates (inner, outer) into shared memory at dst,
// completing its bytes on `bar`. Parts of the box outside the tensor are zero-filled (and
// still count their bytes).
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor& map, int inner, int outer,
                                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(inner), "r"(outer), "r"(smem_addr(bar))
        : "memory");
}

// One 3-D box of `map` at element coordinates (c0 innermost, c1, c2) into shared memory at dst,
// completing its bytes on `bar`; zero-filled outside the tensor, as tma_load_2d.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor& map, int c0, int c1, int c2,
                                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
        : "memory");
}

// An L2 cache policy for tma_load_2d's hint: evict_first for bytes read once (a streamed
// weight), evict_last for bytes every block re-reads (x of the weight streams).
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
// tma_load_2d with an L2 cache policy from l2_policy_*.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor& map, int inner, int outer,
                                            unsigned long long* bar, unsigned long long policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(inner), "r"(outer), "r"(smem_addr(bar)), "l"(policy)
        : "memory");
}

}  // namespace cufuse
