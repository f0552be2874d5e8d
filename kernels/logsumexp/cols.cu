// logsumexp_cols: one value per row where adjacent rows are adjacent in memory and the reduced
// axis is strided (axis=0 of a C-contiguous matrix, a middle axis, the last axis of a
// transposed view). Picked by cufuse/ops/logsumexp/select.py for that layout, whatever the
// reduced axis's length. A lane a row (32 adjacent rows a block, so every load of a warp is one
// run of memory), Slices warps taking interleaved runs of Unroll elements of the reduced axis
// (Unroll loads in flight a lane); `parts` blocks a strip of 32 rows where the strips alone do
// not fill the GPU, merged by the block that finishes last in a fixed order.
#include "logsumexp/statistics.cuh"

using namespace cufuse;
using namespace cufuse::lse_detail;

template <typename T, bool Weighted, int Slices, int Unroll>
__global__ void __launch_bounds__(32 * Slices)
    logsumexp_cols(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ value, T* __restrict__ sign, int64 rows,
                   int64 length, int64 inner, int64 so, int64 si, int64 sl, int64 bo, int64 bi, int64 bl, int parts,
                   int64 part_len, cufuse::accum_t<T>* __restrict__ partials, unsigned* __restrict__ counters) {
    using A = cufuse::accum_t<T>;
    __shared__ LseStats<A> slots[Slices][32];
    const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
    const int64 strip = blockIdx.x / parts;
    const int part = static_cast<int>(blockIdx.x - strip * parts);
    const int64 r = strip * 32 + lane;
    const bool active = r < rows;
    const int64 rr = active ? r : 0;
    const int64 o = inner == 1 ? rr : rr / inner, i = rr - o * inner;
    const T* row_a = a + o * so + i * si;
    const T* row_b = Weighted ? b + o * bo + i * bi : nullptr;
    const int64 lo = static_cast<int64>(part) * part_len;
    const int64 hi = active ? min(length, lo + part_len) : lo;

    LseStats<A> st;
    for (int64 l0 = lo + static_cast<int64>(slice) * Unroll; l0 < hi; l0 += static_cast<int64>(Slices) * Unroll) {
        // A whole run inside the part loads unconditionally, stepping a pointer, a and b under
        // one branch: a 64-bit bounds test and index product an element (~22 instructions an
        // element) left the loads predicated one by one, 7 of 16 in flight at the first use.
        A x[Unroll], w[Unroll];
        if (l0 + Unroll <= hi) {
            const T* pa = row_a + l0 * sl;
            const T* pb = Weighted ? row_b + l0 * bl : nullptr;
#pragma unroll
            for (int u = 0; u < Unroll; ++u) {
                x[u] = to_accum(pa[u * sl]);
                if constexpr (Weighted) w[u] = to_accum(pb[u * bl]);
            }
        } else {
#pragma unroll
            for (int u = 0; u < Unroll; ++u) {
                x[u] = l0 + u < hi ? to_accum(row_a[(l0 + u) * sl]) : neg_infinity<A>();
                if constexpr (Weighted) w[u] = l0 + u < hi ? to_accum(row_b[(l0 + u) * bl]) : A(0);
            }
        }
        if constexpr (Weighted) {
            st.add_weighted(x, w);
        } else {
            st.add(x);
        }
    }
    slots[slice][lane] = st;
    __syncthreads();
    if (slice == 0) {
        for (int w = 1; w < Slices; ++w) st.merge(slots[w][lane]);
        if (parts == 1) {
            if (active) store_result<Weighted>(st, value, sign, r);
            return;
        }
        A* mine = partials + 3 * (r * parts + part);
        mine[0] = st.m, mine[1] = st.s, mine[2] = st.dropped ? A(1) : A(0);
    }
    if (parts == 1) return;
    // A split strip: the last block to arrive merges the parts of its 32 rows, the warps taking
    // interleaved parts and then merging in order.
    if (!last_to_arrive(reinterpret_cast<int*>(counters + strip), parts)) return;
    LseStats<A> v;
    if (active) {
        for (int p = slice; p < parts; p += Slices) {
            const volatile A* q = partials + 3 * (r * parts + p);
            LseStats<A> q_st;
            q_st.m = q[0], q_st.s = q[1], q_st.dropped = q[2] != A(0);
            v.merge(q_st);
        }
    }
    slots[slice][lane] = v;
    __syncthreads();
    if (slice == 0) {
        for (int w = 1; w < Slices; ++w) v.merge(slots[w][lane]);
        if (active) store_result<Weighted>(v, value, sign, r);
        if (lane == 0) counters[strip] = 0;
    }
}
