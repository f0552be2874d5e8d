// Device helpers shared by every cufuse kernel: element types, conversions, warp
// reductions and 16-byte vectors. Tensor-core and async-copy wrappers are in mma.cuh.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace cufuse {

using int64 = long long;

// Accumulator type: float for the 16-bit types and float, double for double.
template <typename T> struct AccumOf { using type = float; };
template <> struct AccumOf<double> { using type = double; };
template <typename T> using accum_t = typename AccumOf<T>::type;

__device__ __forceinline__ float to_accum(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_accum(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_accum(float x) { return x; }
__device__ __forceinline__ double to_accum(double x) { return x; }

template <typename T> __device__ __forceinline__ T from_accum(accum_t<T> x);
template <> __device__ __forceinline__ __half from_accum<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_accum<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ float from_accum<float>(float x) { return x; }
template <> __device__ __forceinline__ double from_accum<double>(double x) { return x; }

template <typename A> __device__ __forceinline__ A neg_infinity();
template <> __device__ __forceinline__ float neg_infinity<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double neg_infinity<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }

// 2^x and 1/x by the MUFU approximations (relative error about 2^-22; subnormal results flush
// to 0), for callers whose results are far coarser than that.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float fast_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// tanh by the MUFU approximation (sm_75+; relative error about 2^-11): the 16-bit attention
// kernels' softcap, whose scores are then rounded far coarser (FlashAttention does the same).
// With tanhf's accurate form a 4096-key causal prefill took 1.5-1.8x as long (session 16).
__device__ __forceinline__ float fast_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// NaN-propagating maximum (fmaxf drops NaN; SciPy's np.max keeps it).
template <typename A> __device__ __forceinline__ A nan_max(A a, A b) { return (a != a || a > b) ? a : b; }

template <typename A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
template <typename A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// 16 bytes of T: the unit of every vectorised global load and store.
template <typename T> struct alignas(16) Vec16 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
};

template <typename T> __device__ __forceinline__ Vec16<T> load_vec16(const T* p) {
    Vec16<T> r;
    *reinterpret_cast<uint4*>(&r) = __ldg(reinterpret_cast<const uint4*>(p));
    return r;
}
template <typename T> __device__ __forceinline__ void store_vec16(T* p, const Vec16<T>& r) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);
}

// Bytes [shift, shift + 16) of the 32 bytes lo:hi, shift in [0, 16): a 16-byte value off the
// vector boundary from the two aligned vectors around it. The word offset picks by selects (a
// runtime index into the eight words would put them in local memory).
__device__ __forceinline__ uint4 funnel_bytes16(const uint4& lo, const uint4& hi, int shift) {
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int words = shift >> 2, bits = (shift & 3) * 8;
    unsigned r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        unsigned a = w[i], b = w[i + 1];
#pragma unroll
        for (int s = 1; s < 4; ++s)
            if (words == s) a = w[i + s], b = w[i + s + 1];
        r[i] = __funnelshift_r(a, b, bits);
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}

// Split reductions: every block of a group calls this once, after writing its partial
// result to global memory; it returns true in the one block that arrives last, which then
// sees every other block's partial (the fences order the partials before the count).
// `threads` > 0: only the block's first `threads` threads (a multiple of 32) call it, and
// they meet on named barrier 1 (a warp-specialised block whose producer warp has left; a
// low id: the hardware reserves barriers up to the highest id used).
__device__ __forceinline__ void block_or_named_sync(int threads) {
    if (threads > 0) asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
    else __syncthreads();
}
__device__ __forceinline__ bool last_to_arrive(int* counter, int group_size, int threads = 0) {
    __shared__ bool last;
    __threadfence();
    block_or_named_sync(threads);
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == group_size - 1;
    block_or_named_sync(threads);
    if (last) __threadfence();
    return last;
}

// Programmatic dependent launch (cufuse/_core/launch.py). At a kernel's start: let the next
// grid of the stream, if launched with the attribute, start its blocks on SMs this one
// leaves free; then wait until the previous grid has completed and its writes are visible
// (it may still be running if this grid was launched with the attribute). Both are no-ops
// for a plain launch and before sm_90.
__device__ __forceinline__ void begin_dependent_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n"
                 "griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace cufuse
