// A row held in registers by a group of threads (kernels/softmax/rows*.cu, kernels/logsumexp/): its view
// (RowView, make_row), the register tile of 16-byte vectors (Chunk: loads, the stash to shared
// memory, max, sum of exps, stores), the reductions over the group (group_reduce, chunk_stats,
// finish_row) and the online statistics of tiles merged one after another (OnlineStats).
#pragma once

#include "common/statistics.cuh"

namespace cufuse {
namespace softmax_detail {

template <typename T> struct RowView {
    const T* in;
    T* out;
    int64 in_stride, out_stride;
    bool in_vec, out_vec;  // 16-byte vector access allowed (unit stride, aligned base)
    // The row's first element (< VS) where align_row_origin moved its origin back to a vector
    // boundary; the elements before it are another row's (masked on load, never stored).
    int64 lo;
};

template <typename T>
__device__ __forceinline__ RowView<T> make_row(const T* x, T* y, int64 r, int64 length, int64 inner, int64 so, int64 si, int64 sl) {
    // (inner == 1, the last-axis case, skips the 64-bit division: ~30 instructions a row)
    const int64 o = inner == 1 ? r : r / inner, i = r - o * inner;
    RowView<T> row;
    row.in = x + o * so + i * si;
    row.out = y + o * length * inner + i;
    row.in_stride = sl;
    row.out_stride = inner;
    row.in_vec = sl == 1 && aligned16(row.in);
    row.out_vec = inner == 1 && aligned16(row.out);
    row.lo = 0;
    return row;
}

// A unit-stride row whose input and output start equally far (lo elements) past a 16-byte
// boundary gets its origin moved back to that boundary: every slot is then an aligned vector,
// only the first and last masked -- a scalar head and tail instead of scalar slots for the
// whole row (671088 x 100 float16, every other row misaligned, ran at 0.24 of the copy).
// Returns the row's end in the new origin (length + lo). A row it cannot align (strided,
// input and output misaligned differently, or lo + length over the `capacity` that holds it)
// keeps its origin. Whoever calls it holds the whole row (begin 0).
template <typename T> __device__ __forceinline__ int64 align_row_origin(RowView<T>& row, int64 length, int64 capacity) {
    const unsigned in_offset = reinterpret_cast<unsigned long long>(row.in) & 15;
    const unsigned out_offset = reinterpret_cast<unsigned long long>(row.out) & 15;
    const int64 lo = in_offset / sizeof(T);
    if (row.in_stride != 1 || row.out_stride != 1 || in_offset != out_offset || lo == 0 || lo + length > capacity) return length;
    row.in -= lo;
    row.out -= lo;
    row.in_vec = row.out_vec = true;
    row.lo = lo;
    return lo + length;
}

// Group == WholeBlock: the group is the whole block, blockDim.x lanes fixed at launch (any
// multiple of 32 up to the kernel's launch bound), so that one instantiation serves every block
// width the selection sizes to a row (the row fills its rung: docs/softmax.md, "Rows").
constexpr int WholeBlock = 0;
template <int Group> __device__ __forceinline__ int group_width() { return Group == WholeBlock ? static_cast<int>(blockDim.x) : Group; }

// Elements [begin, end) of a row spread over Group threads, Vecs 16-byte vectors each:
// thread `lane` holds elements begin + (k*Group + lane)*VS + j. begin is a multiple of VS.
// Padding is -inf: it changes neither the max nor the sum. MaskedEdges: an aligned row's partial
// first and last slots take masked vector accesses and rows may carry lo (align_row_origin);
// without, they take the scalar path (the split kernel: the masked paths made float32 spill).
template <typename T, int Group, int Vecs, bool MaskedEdges = true> struct Chunk {
    using A = accum_t<T>;
    static constexpr int VS = Vec16<T>::size;
    // Elements the chunk holds: `capacity` for a compile-time group (0 for WholeBlock),
    // capacity_now() for either. (Compile-time groups keep the constant: through the function,
    // ptxas spilled the float32 split kernel, 123 -> 128 registers and 188 bytes.)
    static constexpr int capacity = Group * Vecs * VS;
    __device__ __forceinline__ static int capacity_now() {
        if constexpr (Group == WholeBlock) return static_cast<int>(blockDim.x) * Vecs * VS;
        else return capacity;
    }
    Vec16<T> v[Vecs];

    __device__ __forceinline__ static int64 slot_begin(int64 begin, int k, int lane) {
        return begin + (static_cast<int64>(k) * group_width<Group>() + lane) * VS;
    }
    __device__ __forceinline__ static bool full_vector(const RowView<T>& row, int64 e0, int64 end) {
        return row.in_vec && (!MaskedEdges || e0 >= row.lo) && e0 + VS <= end;
    }
    // Every slot of [begin, end) is a full vector: one test a tile, not a 64-bit bounds test
    // a slot (the ragged and strided cases keep the per-slot tests).
    __device__ __forceinline__ static bool full_tile(bool vec, const RowView<T>& row, int64 begin, int64 end) {
        const bool holds = Group == WholeBlock ? end - begin >= capacity_now() : end - begin >= capacity;
        return vec && (!MaskedEdges || begin >= row.lo) && holds;
    }
    // Slot k as one 128-bit value: whole-slot copies and selects stay 4 registers (written
    // element by element, 16-bit slots were merged with a PRMT an element).
    __device__ __forceinline__ uint4& bits(int k) { return *reinterpret_cast<uint4*>(&v[k]); }
    __device__ __forceinline__ static uint4 bits_of(const Vec16<T>& r) { return *reinterpret_cast<const uint4*>(&r); }
    // Elements j of the slot from e0 that lie in [lo, end): from <= j < count.
    __device__ __forceinline__ static void slot_window(const RowView<T>& row, int64 e0, int64 end, int& from, int& count) {
        from = e0 < row.lo ? static_cast<int>(row.lo - e0) : 0;  // (max() here is the member)
        count = end - e0 < VS ? static_cast<int>(end - e0) : VS;
    }
    // Slot k of elements from e0 that is not a full aligned vector: a padding slot of a
    // short row; an aligned row's head or tail, one vector load with the elements outside
    // [lo, end) masked (the aligned 16 bytes around a row element never leave its page); or
    // the slow path of a strided or misaligned row.
    __device__ __forceinline__ void load_partial_slot(int k, const RowView<T>& row, int64 e0, int64 end) {
        if (e0 >= end) {
            Vec16<T> padding;
#pragma unroll
            for (int j = 0; j < VS; ++j) padding.v[j] = neg_inf_value<T>();
            bits(k) = bits_of(padding);
        } else if (MaskedEdges && row.in_vec) {
            Vec16<T> r = load_vec16(row.in + e0);
            int from, count;
            slot_window(row, e0, end, from, count);
#pragma unroll
            for (int j = 0; j < VS; ++j)
                if (j < from || j >= count) r.v[j] = neg_inf_value<T>();
            bits(k) = bits_of(r);
        } else {
            bits(k) = bits_of(load_scalars(row.in + e0 * row.in_stride, row.in_stride, end - e0));
        }
    }
    __device__ __forceinline__ void load(const RowView<T>& row, int64 begin, int64 end, int lane) {
        // The last slot full, so is every slot (the first starting at lo or later)
        const bool full = full_vector(row, slot_begin(begin, Vecs - 1, lane), end) && (!MaskedEdges || slot_begin(begin, 0, lane) >= row.lo);
        // float64: all slots under one branch (tested slot by slot, its cluster rows copied
        // each load to the slot's registers right after it: one load in flight a thread). The
        // 2- and 4-byte types kept their loads in flight; the branch spilled float32's split rows.
        if constexpr (sizeof(T) == 8) {
            if (full) {
#pragma unroll
                for (int k = 0; k < Vecs; ++k) bits(k) = bits_of(load_vec16(row.in + slot_begin(begin, k, lane)));
                return;
            }
        }
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
            const int64 e0 = slot_begin(begin, k, lane);
            if (full || full_vector(row, e0, end)) bits(k) = bits_of(load_vec16(row.in + e0));
            else load_partial_slot(k, row, e0, end);
        }
    }
    // Asynchronous copy of the full vectors into tile (layout [Vecs][Group]); the other
    // slots are filled by load_from_stash.
    __device__ __forceinline__ static void stash_async(Vec16<T>* tile, const RowView<T>& row, int64 begin, int64 end, int lane) {
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
            const int64 e0 = slot_begin(begin, k, lane);
            if (full_vector(row, e0, end)) cp_async_16(tile + k * group_width<Group>() + lane, row.in + e0, true);
        }
    }
    __device__ __forceinline__ void stash(Vec16<T>* tile, int lane) const {
#pragma unroll
        for (int k = 0; k < Vecs; ++k) tile[k * group_width<Group>() + lane] = v[k];
    }
    // From a tile written by stash (all slots) or stash_async (full vectors only).
    __device__ __forceinline__ void load_from_stash(const Vec16<T>* tile, bool all_slots, const RowView<T>& row, int64 begin,
                                                    int64 end, int lane) {
        all_slots = all_slots || full_tile(row.in_vec, row, begin, end);
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
            const int64 e0 = slot_begin(begin, k, lane);
            if (all_slots || full_vector(row, e0, end)) bits(k) = bits_of(tile[k * group_width<Group>() + lane]);
            else load_partial_slot(k, row, e0, end);
        }
    }
    // One max chain a slot, combined at the end: independent chains hide the latency.
    __device__ __forceinline__ A max() const {
        if constexpr (sizeof(T) == 2) {
            // Packed max on pairs: half the instructions, and no float copies of the
            // elements kept alive until sum_exp (they cost registers, bfloat16 spilled).
            using T2 = typename Packed2<T>::type;
            T2 m2[Vecs];
#pragma unroll
            for (int k = 0; k < Vecs; ++k) {
                const T2* pairs = reinterpret_cast<const T2*>(v[k].v);
                m2[k] = pairs[0];
#pragma unroll
                for (int j = 1; j < VS / 2; ++j) m2[k] = __hmax2_nan(m2[k], pairs[j]);
            }
#pragma unroll
            for (int k = 1; k < Vecs; ++k) m2[0] = __hmax2_nan(m2[0], m2[k]);
            return max_nan(to_accum(m2[0].x), to_accum(m2[0].y));
        } else {
            A mk[Vecs];
#pragma unroll
            for (int k = 0; k < Vecs; ++k) {
                mk[k] = to_accum(v[k].v[0]);
#pragma unroll
                for (int j = 1; j < VS; ++j) mk[k] = max_nan(mk[k], to_accum(v[k].v[j]));
            }
#pragma unroll
            for (int k = 1; k < Vecs; ++k) mk[0] = max_nan(mk[0], mk[k]);
            return mk[0];
        }
    }
    // The sum of exp(x - m) (flushed terms), keeping every exp in e for store_scaled when
    // Keep (16-bit types: the flushed ones; float keeps subnormal outputs). One chain: a
    // chain a slot let ptxas hold more exps at once (cluster 256 x 8: 72 -> 128 registers).
    template <bool Keep>
    __device__ __forceinline__ A sum_exp_impl(A m, A (&e)[Keep ? Vecs : 1][VS]) const {
        A s = 0;
#pragma unroll
        for (int k = 0; k < Vecs; ++k)
#pragma unroll
            for (int j = 0; j < VS; ++j) {
                const A a = to_accum(v[k].v[j]) - m;
                const A term = Keep && sizeof(T) != 2 ? exp_accum(a) : exp_accum_ftz(a);
                if constexpr (Keep) e[k][j] = term;
                s += term;
            }
        return s;
    }
    __device__ __forceinline__ A sum_exp(A m) const {
        A unused[1][VS];
        return sum_exp_impl<false>(m, unused);
    }
    // The sum of exp(x - m) keeping every exp for store_scaled: one exp an element instead of
    // two (for 16-bit types the multi-function unit, not memory, limits the two-exp kernel).
    __device__ __forceinline__ A sum_exp_kept(A m, A (&e)[Vecs][VS]) const { return sum_exp_impl<true>(m, e); }
    // full: the caller knows the slot is a full vector (no bounds test). An aligned row's head
    // or tail stores the elements of [lo, end) at constant offsets from one address.
    __device__ __forceinline__ static void store_vector(const RowView<T>& row, int64 e0, int64 end, Vec16<T> r, bool full = false) {
        if (full || (row.out_vec && (!MaskedEdges || e0 >= row.lo) && e0 + VS <= end)) {
            store_vec16(row.out + e0, r);
        } else if (e0 < end) {
            if (MaskedEdges && row.out_vec) {
                int from, count;
                slot_window(row, e0, end, from, count);
#pragma unroll
                for (int j = 0; j < VS; ++j)
                    if (j >= from && j < count) row.out[e0 + j] = r.v[j];
            } else {
                store_scalars(row.out + e0 * row.out_stride, row.out_stride, end - e0, r);
            }
        }
    }
    // Vector by vector, 16-bit types converted in pairs (converting all before the first
    // store, as store_scaled does, raised the prefetching rows 256 x 8, since removed, from 96
    // to 127 registers), with a bounds test a slot (a full-tile flag live across the non-inlined
    // scalar stores made NVRTC spill their float16 log_softmax 128 x 4).
    template <bool Log>
    __device__ __forceinline__ void store(const RowView<T>& row, int64 begin, int64 end, int lane, const Normalizer<A, Log>& f) const {
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
            A a[VS];
#pragma unroll
            for (int j = 0; j < VS; ++j) a[j] = f.template to<T>(to_accum(v[k].v[j]));
            store_vector(row, slot_begin(begin, k, lane), end, vector_from_accum<T>(a));
        }
    }
    // softmax from the exps of sum_exp_kept: e * scale. Every vector is converted before the
    // first store, so that no float stays live across the (non-inlined) scalar stores.
    __device__ __forceinline__ void store_scaled(const RowView<T>& row, int64 begin, int64 end, int lane, A (&e)[Vecs][VS], A scale) const {
        Vec16<T> r[Vecs];
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
#pragma unroll
            for (int j = 0; j < VS; ++j) e[k][j] *= scale;
            r[k] = vector_from_accum<T>(e[k]);
        }
        const bool full = full_tile(row.out_vec, row, begin, end);
#pragma unroll
        for (int k = 0; k < Vecs; ++k) store_vector(row, slot_begin(begin, k, lane), end, r[k], full);
    }
};

template <bool IsMax, typename A> __device__ __forceinline__ A combine(A a, A b) { return IsMax ? max_nan(a, b) : a + b; }

// Reduction over the Group threads of a row: shuffles inside a warp, shared memory across
// warps (Group == Threads > 32, or WholeBlock: blockDim.x <= Threads lanes; `slots` holds
// Threads/32 values and is reusable on return).
template <bool IsMax, int Group, int Threads, typename A> __device__ __forceinline__ A group_reduce(A v, A* slots) {
    constexpr bool Block = Group == WholeBlock || Group > 32;
    static_assert(Group <= 32 || Group == Threads, "a group wider than a warp is the whole block");
    constexpr int WarpWidth = Block ? 32 : Group;
#pragma unroll
    for (int offset = WarpWidth / 2; offset > 0; offset >>= 1) v = combine<IsMax>(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if constexpr (Block) {
        if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
        __syncthreads();
        v = slots[0];
        if constexpr (Group == WholeBlock) {
            for (int w = 1; w < static_cast<int>(blockDim.x) / 32; ++w) v = combine<IsMax>(v, slots[w]);
        } else {
#pragma unroll
            for (int w = 1; w < Threads / 32; ++w) v = combine<IsMax>(v, slots[w]);
        }
        __syncthreads();
    }
    return v;
}

template <typename A, int Threads> struct BlockSlots {
    A max[Threads / 32 > 0 ? Threads / 32 : 1];
    A sum[Threads / 32 > 0 ? Threads / 32 : 1];
};

// Exact (max, sum of exp(x - max)) of a chunk held by a group.
template <int Group, int Threads, typename T, int Vecs, bool MaskedEdges, typename A = accum_t<T>>
__device__ __forceinline__ void chunk_stats(const Chunk<T, Group, Vecs, MaskedEdges>& c, BlockSlots<A, Threads>& slots, A& m, A& s) {
    m = group_reduce<true, Group, Threads>(c.max(), slots.max);
    s = group_reduce<false, Group, Threads>(c.sum_exp(m), slots.sum);
}

// The row held by a group (c: the whole row) normalised and stored. ExpOnce (softmax only):
// the exps of the sum stay in registers and are scaled at the store.
template <bool Log, int Group, int Threads, bool ExpOnce, typename T, int Vecs, typename A = accum_t<T>>
__device__ __forceinline__ void finish_row(const Chunk<T, Group, Vecs>& c, BlockSlots<A, Threads>& slots, const RowView<T>& row,
                                           int64 begin, int64 end, int lane) {
    static_assert(!(ExpOnce && Log), "log_softmax stores x - m - log(s): no exp to keep");
    if constexpr (ExpOnce) {
        A e[Vecs][Chunk<T, Group, Vecs>::VS];
        const A m = group_reduce<true, Group, Threads>(c.max(), slots.max);
        const A s = group_reduce<false, Group, Threads>(c.sum_exp_kept(m, e), slots.sum);
        c.store_scaled(row, begin, end, lane, e, Normalizer<A, false>(m, s).k);
    } else {
        A m, s;
        chunk_stats<Group, Threads>(c, slots, m, s);
        c.store(row, begin, end, lane, Normalizer<A, Log>(m, s));
    }
}

// Running (max, sum of exp(x - max)) of the tiles merged so far (the online rule: the sum is
// rescaled whenever the max grows).
template <typename A> struct OnlineStats {
    A m = neg_infinity<A>(), s = 0;
    template <typename ChunkT> __device__ __forceinline__ void merge(const ChunkT& tile) {
        const A new_m = max_nan(m, tile.max());
        // While all is -inf the shift is 0: exp(-inf - 0) = 0 where -inf - -inf is NaN.
        const A shift = new_m == neg_infinity<A>() ? A(0) : new_m;
        s = s * exp_accum_ftz(m - shift) + tile.sum_exp(shift);
        m = new_m;
    }
};

}  // namespace softmax_detail
}  // namespace cufuse
