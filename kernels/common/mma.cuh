// Tensor-core (mma.sync m16n8k16, ldmatrix) and cp.async wrappers for sm_80 and later.
// Used by the GEMM and attention kernels; fragment layouts follow the PTX ISA's
// "Matrix Fragments for mma.m16n8k16" tables.
#pragma once
#include "common/common.cuh"

namespace cufuse {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1; with pred false the 16 bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(smem)));
}

// The sum / max over the 4 lanes of a quad: an MMA accumulator row's partial values (mma.sync
// and wgmma fragments alike put a row's columns in one quad).
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// D = A*B + D for one 16x8x16 tile, float accumulators. T is __half or __nv_bfloat16.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <> __device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats packed as one 32-bit register of T (low half = first), as mma operands want.
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

// D = A*B + C for one 16x8x8 tile of tf32 operands (tf32 values in .b32 registers: float32
// bit patterns whose 13 low mantissa bits are zero), float32 accumulators. Fragment layout
// (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4: a = A(g, t), A(g+8, t),
// A(g, t+4), A(g+8, t+4); b = B(t, g), B(t+4, g); d as for m16n8k16.
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                              const float (&c)[4]) {  // d = a * b + c
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// a ~= big + small in tf32 ("3xTF32"): big = a rounded to tf32 (nearest, ties away from
// zero: add half a tf32 ulp, clear the 13 low bits); small = a - big (exact, |small| <=
// 2^-11 |a|) truncated to tf32, so |a - big - small| < 2^-21 |a|. Finite a only: an
// infinite a (or one within 2^-12 of the float32 maximum, whose big rounds to inf) gives
// small = inf - inf = NaN.
__device__ __forceinline__ void split_tf32(float a, unsigned& big, unsigned& small) {
    big = (__float_as_uint(a) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(a - __uint_as_float(big)) & 0xffffe000u;
}

// d += a * b for one 8x8x4 float64 tile (mma.sync m8n8k4 .f64, sm_80+; IEEE fused
// multiply-adds). Fragments (PTX ISA), g = lane / 4, t = lane % 4: a = A(g, t),
// b = B(t, g), (d0, d1) = D(g, 2t), D(g, 2t + 1).
__device__ __forceinline__ void mma_884_f64(double& d0, double& d1, double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+d"(d0), "+d"(d1)
                 : "d"(a), "d"(b));
}

// d += a * b for one 16x8x8 float64 tile (mma.sync m16n8k8 .f64, sm_90+: DMMA.16x8x8, the
// shape of cuBLAS's Hopper DGEMM). Fragments as mma_16816_f64 with k < 8: a[v] = A(g + 8 (v % 2),
// t + 4 (v / 2)), b[v] = B(t + 4v, g).
__device__ __forceinline__ void mma_1688_f64(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

// d += a * b for one 16x8x16 float64 tile (mma.sync m16n8k16 .f64, sm_90+: DMMA.16x8x16, 8x
// the work of m8n8k4 per instruction). Fragments (PTX ISA; CUTLASS SM90_16x8x16_F64F64F64F64_TN),
// g = lane / 4, t = lane % 4: a[v] = A(g + 8 (v % 2), t + 4 (v / 2)), b[v] = B(t + 4v, g),
// d as for m16n8k16 f16.
__device__ __forceinline__ void mma_16816_f64(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
        "{%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]),
          "d"(b[2]), "d"(b[3]));
}

}  // namespace cufuse
