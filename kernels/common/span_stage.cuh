// A block's contiguous span of elements staged through shared memory in whole 16-byte vectors,
// whatever the span's alignment: the global side moves aligned vectors only (cp.async in, 128-bit
// stores out), a scalar first and last vector at most. Used by the kernels of many short rows,
// where a row-by-row access would cost a masked head and tail per row (softmax_rows_span).
#pragma once

#include "common/mma.cuh"  // cp.async

namespace cufuse {

// Elements past the 16-byte boundary below p.
template <typename T> __device__ __forceinline__ int vector_offset(const T* p) {
    return static_cast<int>(reinterpret_cast<unsigned long long>(p) & 15) / static_cast<int>(sizeof(T));
}

// Elements [0, n) of src into tile, element e at tile[e + head] with head = vector_offset(src),
// so that src's aligned vectors land on aligned vectors of tile (16-byte aligned). Every
// thread of the block calls it; the copies are asynchronous: cp_async_wait<0>() and a block
// barrier before the tile is read. Returns head. The tile holds head + n elements rounded up
// to whole vectors.
template <typename T, int Threads> __device__ __forceinline__ int span_fill(T* tile, const T* __restrict__ src, int n) {
    constexpr int VS = Vec16<T>::size;
    const int head = vector_offset(src);
    const int vectors = (head + n + VS - 1) / VS;
    const T* aligned = src - head;
#pragma unroll 4
    for (int q = threadIdx.x; q < vectors; q += Threads) {
        const int e0 = q * VS - head;  // src's element at the vector's start
        if (e0 >= 0 && e0 + VS <= n) {
            cp_async_16(tile + q * VS, aligned + q * VS, true);
        } else {
#pragma unroll
            for (int j = 0; j < VS; ++j)
                if (e0 + j >= 0 && e0 + j < n) tile[q * VS + j] = src[e0 + j];
        }
    }
    cp_async_commit();
    return head;
}

// Elements [0, n) of the tile filled by span_fill (element e at tile[e + tile_head]) to dst,
// aligned 128-bit stores but for dst's partial first and last vectors. Where dst and the
// filled source sit equally far past a boundary a vector is one 128-bit shared load, else it
// is gathered element by element.
template <typename T, int Threads>
__device__ __forceinline__ void span_store(T* __restrict__ dst, const T* tile, int tile_head, int n) {
    constexpr int VS = Vec16<T>::size;
    const int head = vector_offset(dst);
    const int vectors = (head + n + VS - 1) / VS;
    const int shift = tile_head - head;  // tile index of dst's vector q: q * VS + shift
    T* aligned = dst - head;
#pragma unroll 4
    for (int q = threadIdx.x; q < vectors; q += Threads) {
        const int e0 = q * VS - head;
        if (e0 >= 0 && e0 + VS <= n) {
            Vec16<T> r;
            if (shift == 0) {
                r = *reinterpret_cast<const Vec16<T>*>(tile + q * VS);
            } else {
#pragma unroll
                for (int j = 0; j < VS; ++j) r.v[j] = tile[q * VS + shift + j];
            }
            store_vec16(aligned + q * VS, r);
        } else {
#pragma unroll
            for (int j = 0; j < VS; ++j)
                if (e0 + j >= 0 && e0 + j < n) dst[e0 + j] = tile[e0 + j + tile_head];
        }
    }
}

}  // namespace cufuse
