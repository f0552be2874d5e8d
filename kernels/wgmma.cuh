// Hopper (sm_90a) warpgroup-MMA helpers: shared-memory matrix descriptors for 128-byte
// swizzled tiles, the wgmma fence / commit / wait wrappers and the async-proxy fence.
// Used by the GEMM and attention kernels; layouts follow the PTX ISA's "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout" sections. The instructions themselves
// (wgmma.mma_async.*) exist only on sm_90a; callers guard their bodies accordingly.
#pragma once
#include "mma.cuh"

namespace cufuse {

// Shared-memory matrix descriptor of a K-major tile whose rows are 128 bytes, 128-byte
// swizzle: start address >> 4 (bits 0-13), leading byte offset unused by swizzled K-major
// layouts (1, bits 16-29), stride byte offset 1024 >> 4 = 8 rows of 128 bytes between
// core-matrix groups (bits 32-45), layout type 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ unsigned long long sw128_kmajor_desc(const void* tile) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

// N-major B tile [BK][BN] as 128-byte swizzle atoms of 8 k rows x 64 n (1024 bytes each):
// atom (n / 64, k / 8) at element (n / 64) * BK * 64 + (k / 8) * 512, row k % 8 of the atom
// 64 elements further per row, its 16-byte chunk c at chunk c ^ (k % 8).
enum : int { WGMMA_ATOM_N = 64 };  // n per 128-byte swizzle atom row (16-bit types)
template <int BK>
__device__ __forceinline__ int nmajor_atom_offset(int k, int n) {  // element offset, n a multiple of 8
    const int r = k & 7;
    return (n / WGMMA_ATOM_N) * BK * WGMMA_ATOM_N + (k >> 3) * 8 * WGMMA_ATOM_N + r * WGMMA_ATOM_N +
           ((((n % WGMMA_ATOM_N) >> 3) ^ r) << 3);
}

// Descriptor of that layout (the MN-major canonical form ((8 chunks, n atoms), (8 rows, k groups))):
// leading byte offset = bytes between n atoms (BK * 128, bits 16-29), stride byte offset =
// bytes between groups of 8 k rows (1024, bits 32-45), 128-byte swizzle (bits 62-63).
template <int BK>
__device__ __forceinline__ unsigned long long sw128_nmajor_desc(const void* tile) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(BK * 128 >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// cp.async of one N-major weight tile (w + k * ldw + n; N % 8 == 0, so a chunk is all in or
// all out): consecutive threads take consecutive 16-byte chunks of a k row (coalesced).
template <typename T, int BN, int BK, int THREADS>
__device__ __forceinline__ void wgmma_load_b_nmajor(T* sb, const T* __restrict__ w, int64 n0, int64 k0, int64 N,
                                                    int64 k_end, int64 ldw) {
    constexpr int row_chunks = BN / 8;
    static_assert(BN % WGMMA_ATOM_N == 0 && BK % 8 == 0 && BK * row_chunks % THREADS == 0, "B tile geometry");
#pragma unroll
    for (int i = 0; i < BK * row_chunks / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        const int k = c / row_chunks, n = (c % row_chunks) * 8;
        const bool ok = k0 + k < k_end && n0 + n < N;
        cp_async_16(sb + nmajor_atom_offset<BK>(k, n), ok ? w + (k0 + k) * ldw + n0 + n : w, ok);
    }
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// Shared memory written by the generic proxy (cp.async) becomes visible to wgmma's async proxy.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across wgmma issue and wait.
__device__ __forceinline__ void pin(float& v) { asm volatile("" : "+f"(v)::"memory"); }

}  // namespace cufuse
