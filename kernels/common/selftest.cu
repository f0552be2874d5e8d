// A minimal templated kernel: the loader's own GPU test compiles and launches it with
// two different tile sizes (and CI compiles it like every other kernel).
#include "common/common.cuh"

template <typename T, int BlockSize, int ItemsPerThread>
__global__ void __launch_bounds__(BlockSize) scaled_copy(const T* __restrict__ x, T* __restrict__ y, long long n, float factor) {
    const long long base = (static_cast<long long>(blockIdx.x) * BlockSize * ItemsPerThread) + threadIdx.x;
#pragma unroll
    for (int i = 0; i < ItemsPerThread; ++i) {
        const long long index = base + static_cast<long long>(i) * BlockSize;
        if (index < n) y[index] = cufuse::from_accum<T>(cufuse::to_accum(x[index]) * factor);
    }
}
