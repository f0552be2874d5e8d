// logsumexp_rows: one value per row, a read-only stream. Picked (cufuse/ops/logsumexp/select.py)
// wherever the row index's own stride is not 1 (the reduced axis contiguous: the last axis,
// axis=None of a contiguous array; or both it and the rows strided, e.g. a strided view):
//   - rows of up to 128 16-byte vectors: a sub-warp group a row (Group lanes, Vecs vectors a
//     lane, several rows a warp), Threads = 256;
//   - longer rows: a warp a row where rows fill the GPU, else a block a part of a row, `parts`
//     parts a row, merged by the block that finishes last (a fixed tree: the same bits every
//     call).
// A contiguous row is read as aligned 16-byte vectors whatever its alignment: the vectors that
// straddle its ends (or its part's) are masked, so rows of any length and offset stream at the
// rate of aligned ones. Strided rows take one load an element. Weighted rows read b beside a,
// as vectors where b's row is contiguous with a's alignment, else element by element.
#include "logsumexp/statistics.cuh"

using namespace cufuse;
using namespace cufuse::lse_detail;

template <typename T, bool Weighted, int Threads, int Group, int Vecs>
// At most 64 registers where that does not spill (the plain 2- and 4-byte rows): 1024 threads an SM.
__global__ void __launch_bounds__(Threads, Weighted || sizeof(T) == 8 ? 1 : 1024 / Threads)
    logsumexp_rows(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ value, T* __restrict__ sign, int64 rows,
                   int64 length, int64 inner, int64 so, int64 si, int64 sl, int64 bo, int64 bi, int64 bl, int parts,
                   int64 part_len, cufuse::accum_t<T>* __restrict__ partials, unsigned* __restrict__ counters) {
    using A = cufuse::accum_t<T>;
    constexpr int VS = Vec16<T>::size;
    constexpr int Capacity = Group * Vecs * VS;
    __shared__ LseStats<A> slots[Threads / 32 > 0 ? Threads / 32 : 1];
    const int lane = threadIdx.x % Group;
    const int64 g = static_cast<int64>(blockIdx.x) * (Threads / Group) + threadIdx.x / Group;
    const int64 r = g / parts;
    const int part = static_cast<int>(g - r * parts);
    const bool active = r < rows;  // inactive groups still join the shuffles, with an empty range
    const int64 rr = active ? r : 0;
    const int64 o = inner == 1 ? rr : rr / inner, i = rr - o * inner;
    const T* row_a = a + o * so + i * si;
    const bool vec_a = sl == 1;
    const int64 head = vec_a ? (reinterpret_cast<unsigned long long>(row_a) & 15) / sizeof(T) : 0;
    const T* base_a = row_a - head;  // coordinate p is element p - head
    const int64 lo = max(head, static_cast<int64>(part) * part_len);
    const int64 hi = active ? min(head + length, static_cast<int64>(part + 1) * part_len) : lo;
    const int64 start = lo / VS * VS;

    LseStats<A> st;
    if constexpr (Weighted) {
        const T* row_b = b + o * bo + i * bi;
        const bool vec_b = bl == 1 && aligned16(row_b - head);
        const T* base_b = row_b - head * bl;
        for (int64 begin = start; begin < hi; begin += Capacity) {
            const bool full = vec_a && begin >= lo && begin + Capacity <= hi;
            Chunk<T, Group, Vecs> ca, cb;
            if (full && vec_b) {
#pragma unroll
                for (int k = 0; k < Vecs; ++k) {
                    const int64 p = begin + (static_cast<int64>(k) * Group + lane) * VS;
                    ca.bits(k) = ca.bits_of(load_vec16(base_a + p));
                    cb.bits(k) = cb.bits_of(load_vec16(base_b + p));
                }
            } else {
#pragma unroll
                for (int k = 0; k < Vecs; ++k) {
                    const int64 p = begin + (static_cast<int64>(k) * Group + lane) * VS;
                    ca.bits(k) = ca.bits_of(full ? load_vec16(base_a + p) : load_slot(base_a, sl, vec_a, p, lo, hi, neg_inf_value<T>()));
                    cb.bits(k) = cb.bits_of(load_slot(base_b, bl, vec_b, p, lo, hi, T(0)));
                }
            }
#pragma unroll
            for (int k = 0; k < Vecs; ++k) {
                A x[VS], w[VS];
#pragma unroll
                for (int j = 0; j < VS; ++j) x[j] = to_accum(ca.v[k].v[j]), w[j] = to_accum(cb.v[k].v[j]);
                st.add_weighted(x, w);
            }
        }
    } else {
        OnlineStats<A> online;  // softmax's tile rule: the tile's max, one rescale, one exp an element
        for (int64 begin = start; begin < hi; begin += Capacity) {
            const bool full = vec_a && begin >= lo && begin + Capacity <= hi;
            Chunk<T, Group, Vecs> c;
            // Whole 128-bit slots under one branch a tile: 16-bit slots merged element by element
            // were unpacked right after each load, which then waited (one load in flight a lane).
            if (full) {
#pragma unroll
                for (int k = 0; k < Vecs; ++k)
                    c.bits(k) = c.bits_of(load_vec16(base_a + begin + (static_cast<int64>(k) * Group + lane) * VS));
            } else {
#pragma unroll
                for (int k = 0; k < Vecs; ++k) {
                    const int64 p = begin + (static_cast<int64>(k) * Group + lane) * VS;
                    c.bits(k) = c.bits_of(load_slot(base_a, sl, vec_a, p, lo, hi, neg_inf_value<T>()));
                }
            }
            online.merge(c);
        }
        st.m = online.m, st.s = online.s;
    }
    st = group_merge<Group, Threads>(st, slots);
    if (parts == 1) {
        if (lane == 0 && active) store_result<Weighted>(st, value, sign, r);
    } else if (merge_parts<Threads>(st, slots, partials, counters, r, parts, part) && threadIdx.x == 0) {
        store_result<Weighted>(st, value, sign, r);
    }
}
