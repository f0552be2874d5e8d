// softmax / log_softmax over one reduced axis of a (outer, length, inner) view.
//
// A "row" is the `length` elements of one (o, i) pair: input element l of row r sits at
// x[o*so + i*si + l*sl] (any strides, 64-bit), output element at y[(o*length + l)*inner + i]
// (out is C-contiguous). Every kernel reads each row once and writes it once while it fits
// on chip; the row is held in registers as 16-byte vectors of T (scalar loads where the
// row is strided or not 16-byte aligned, and for the ragged tail).
//
//   softmax_rows          a group of Group threads per row (Group <= 32: several rows per
//                         warp; Group == Threads: one block per row)
//   softmax_rows_stashed  one block per row: a register tile and shared-memory tiles
//                         (cp.async, merged as they land); _cluster: a cluster of them a row
//   softmax_rows_cluster  one thread-block cluster per row (persistent clusters)
//   softmax_rows_split    a persistent grid of co-resident blocks, blocks_per_row blocks per
//                         row, each holding its chunk in registers and shared memory;
//                         partials meet in a global scratch with a per-row arrival counter.
//                         A chunk beyond registers + shared memory is streamed with the
//                         online rule and its middle tiles are read a second time
//   softmax_cols          reduced axis strided, inner axis contiguous: 32 columns per block,
//                         coalesced across columns; online rule, second read of the column
//   softmax_cols_cluster  the same with the column split over a cluster (sm_90): the second
//                         read of each block's small part comes from L2
//   softmax_cols_vec[_cluster]  the same with 16-byte vectors across adjacent columns
//   softmax_cols_strip[_cluster]  one read: a strip of adjacent columns held on chip by a
//                         cluster (registers + shared memory), statistics merged through
//                         distributed shared memory, then written once
//   softmax_cols_split    the same strips without clusters: a persistent grid of co-resident
//                         blocks, blocks_per_strip a strip, the column statistics exchanged
//                         through global memory as in softmax_rows_split
//
// Statistics are exact two-step (max, then sum of exp(x - max)) inside a block, except in
// the split and stashed kernels, whose threads keep an online (max, sum) over their tiles;
// between threads and blocks (max, sum) pairs are merged with the rescaling rule. The blocks
// of a cluster push their pairs into each other's shared memory (push_pair, one cluster
// barrier); those of a persistent grid meet in global memory. Non-finite rows follow SciPy:
// see Normalizer.
#include "common.cuh"
#include "mma.cuh"  // cp.async
#include <cooperative_groups.h>

namespace cufuse {
namespace softmax_detail {

template <typename T> __device__ __forceinline__ T neg_inf_value() { return from_accum<T>(neg_infinity<accum_t<T>>()); }

// exp for the accumulator: MUFU ex2 for float (softmax is memory-bound only if exp is
// cheap; relative error ~2 ulp), the precise exp for double.
__device__ __forceinline__ float exp_accum(float a) {
    float r;
    asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(a * 1.4426950408889634f));
    return r;
}
__device__ __forceinline__ double exp_accum(double a) { return exp(a); }
// The same with subnormal results flushed to zero: a single MUFU.EX2 without the subnormal
// fix-up instructions (3 more an element). For every term of a sum of exps (the sum is >= 1,
// its max term being 1: a flushed term is far below its rounding) and for 16-bit outputs,
// whose smallest values (float16: 6e-8; bfloat16 keeps float's normal range) are far above
// float's subnormals.
__device__ __forceinline__ float exp_accum_ftz(float a) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a * 1.4426950408889634f));
    return r;
}
__device__ __forceinline__ double exp_accum_ftz(double a) { return exp(a); }

// NaN-propagating maximum (SciPy's np.max keeps NaN): one FMNMX.NAN for float on sm_80+
// instead of cufuse::nan_max's compare, NaN test and select.
template <typename A> __device__ __forceinline__ A max_nan(A a, A b) { return nan_max(a, b); }
template <> __device__ __forceinline__ float max_nan<float>(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return nan_max(a, b);
#endif
}

template <typename A> __device__ __forceinline__ A nan_value();
template <> __device__ __forceinline__ float nan_value<float>() { return __int_as_float(0x7fffffff); }
template <> __device__ __forceinline__ double nan_value<double>() { return __longlong_as_double(0x7ff8000000000000LL); }

// s, a sum of exp(x - m), re-expressed relative to a larger maximum big_m. A part whose max
// is -inf holds only -inf (its s may be NaN from -inf - -inf) and contributes 0; when m is
// NaN or +inf so is big_m, and the sum no longer matters.
template <typename A> __device__ __forceinline__ A rescale(A s, A m, A big_m) {
    return m == neg_infinity<A>() ? A(0) : s * exp_accum_ftz(m - big_m);
}

// Turns the row statistics into the per-element map, SciPy's non-finite rules included.
// softmax:     exp(x - m) / s; a row whose max is NaN, +inf or -inf (all -inf) is all NaN
//              (scale = NaN makes every product NaN, also exp(-inf) = 0 ones).
// log_softmax: (x - m) - log(s); max +inf: x - inf (NaN at +inf, -inf elsewhere);
//              max -inf or NaN: NaN ((-inf) - (-inf) and NaN propagate by themselves).
template <typename A, bool Log> struct Normalizer {
    A m, k;
    Normalizer() = default;
    __device__ __forceinline__ Normalizer(A row_max, A row_sum) : m(row_max) {
        const bool finite = isfinite(row_max);
        if (Log) k = finite ? log(row_sum) : A(0);
        else k = finite ? A(1) / row_sum : nan_value<A>();
    }
    __device__ __forceinline__ A operator()(A a) const { return Log ? (a - m) - k : exp_accum(a - m) * k; }
    // The map for an output of type T: 16-bit outputs take the flushed exp.
    template <typename T> __device__ __forceinline__ A to(A a) const {
        if constexpr (sizeof(T) == 2 && !Log) return exp_accum_ftz(a - m) * k;
        else return (*this)(a);
    }
};

template <typename T> struct RowView {
    const T* in;
    T* out;
    int64 in_stride, out_stride;
    bool in_vec, out_vec;  // 16-byte vector access allowed (unit stride, aligned base)
};

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15) == 0; }

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
    return row;
}

// The slow path of a vector slot (strided or unaligned row, ragged tail): `count` (> 0,
// may be > VS) elements at `stride`, -inf beyond.
template <typename T> __device__ __forceinline__ Vec16<T> load_scalars_inline(const T* p, int64 stride, int64 count) {
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) r.v[j] = j < count ? p[j * stride] : neg_inf_value<T>();
    return r;
}
template <typename T> __device__ __forceinline__ void store_scalars_inline(T* p, int64 stride, int64 count, Vec16<T> r) {
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j)
        if (j < count) p[j * stride] = r.v[j];
}
// For 16-bit types (8 scalars a slot) a call: inlined, ptxas keeps 64-bit addresses of every
// scalar of every slot live and the split kernel spills. For wider types inlining is
// cheaper (the call's saved registers made float spill).
template <typename T> __device__ __noinline__ Vec16<T> load_scalars_call(const T* p, int64 stride, int64 count) {
    return load_scalars_inline(p, stride, count);
}
template <typename T> __device__ __noinline__ void store_scalars_call(T* p, int64 stride, int64 count, Vec16<T> r) {
    store_scalars_inline(p, stride, count, r);
}
template <typename T> __device__ __forceinline__ Vec16<T> load_scalars(const T* p, int64 stride, int64 count) {
    if constexpr (sizeof(T) == 2) return load_scalars_call(p, stride, count);
    else return load_scalars_inline(p, stride, count);
}
template <typename T> __device__ __forceinline__ void store_scalars(T* p, int64 stride, int64 count, Vec16<T> r) {
    if constexpr (sizeof(T) == 2) store_scalars_call(p, stride, count, r);
    else store_scalars_inline(p, stride, count, r);
}

template <typename T> struct Packed2;
template <> struct Packed2<__half> {
    using type = __half2;
    __device__ __forceinline__ static type from_floats(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Packed2<__nv_bfloat16> {
    using type = __nv_bfloat162;
    __device__ __forceinline__ static type from_floats(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// Accumulator values to one vector of T; 16-bit types convert in pairs (one F2FP a pair).
template <typename T, typename A = accum_t<T>> __device__ __forceinline__ Vec16<T> vector_from_accum(const A (&a)[Vec16<T>::size]) {
    Vec16<T> r;
    if constexpr (sizeof(T) == 2) {
        using P = Packed2<T>;
#pragma unroll
        for (int j = 0; j < Vec16<T>::size / 2; ++j) reinterpret_cast<typename P::type*>(r.v)[j] = P::from_floats(a[2 * j], a[2 * j + 1]);
    } else {
#pragma unroll
        for (int j = 0; j < Vec16<T>::size; ++j) r.v[j] = from_accum<T>(a[j]);
    }
    return r;
}

// Elements [begin, end) of a row spread over Group threads, Vecs 16-byte vectors each:
// thread `lane` holds elements begin + (k*Group + lane)*VS + j. begin is a multiple of VS.
// Padding is -inf: it changes neither the max nor the sum.
template <typename T, int Group, int Vecs> struct Chunk {
    using A = accum_t<T>;
    static constexpr int VS = Vec16<T>::size;
    static constexpr int capacity = Group * Vecs * VS;
    Vec16<T> v[Vecs];

    __device__ __forceinline__ static int64 slot_begin(int64 begin, int k, int lane) {
        return begin + (static_cast<int64>(k) * Group + lane) * VS;
    }
    __device__ __forceinline__ static bool full_vector(const RowView<T>& row, int64 e0, int64 end) {
        return row.in_vec && e0 + VS <= end;
    }
    // Every slot of [begin, end) is a full vector: one test a tile, not a 64-bit bounds test
    // a slot (the ragged and strided cases keep the per-slot tests).
    __device__ __forceinline__ static bool full_tile(bool vec, int64 begin, int64 end) { return vec && end - begin >= capacity; }
    // Slot k as one 128-bit value: whole-slot copies and selects stay 4 registers (written
    // element by element, 16-bit slots were merged with a PRMT an element).
    __device__ __forceinline__ uint4& bits(int k) { return *reinterpret_cast<uint4*>(&v[k]); }
    __device__ __forceinline__ static uint4 bits_of(const Vec16<T>& r) { return *reinterpret_cast<const uint4*>(&r); }
    // Slot k of elements from e0 that is not a full aligned vector: a padding slot of a
    // short row, or the slow path.
    __device__ __forceinline__ void load_partial_slot(int k, const RowView<T>& row, int64 e0, int64 end) {
        if (e0 >= end) {
            Vec16<T> padding;
#pragma unroll
            for (int j = 0; j < VS; ++j) padding.v[j] = neg_inf_value<T>();
            bits(k) = bits_of(padding);
        } else {
            bits(k) = bits_of(load_scalars(row.in + e0 * row.in_stride, row.in_stride, end - e0));
        }
    }
    __device__ __forceinline__ void load(const RowView<T>& row, int64 begin, int64 end, int lane) {
        const bool full = full_vector(row, slot_begin(begin, Vecs - 1, lane), end);  // so is every slot
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
            if (full_vector(row, e0, end)) cp_async_16(tile + k * Group + lane, row.in + e0, true);
        }
    }
    __device__ __forceinline__ void stash(Vec16<T>* tile, int lane) const {
#pragma unroll
        for (int k = 0; k < Vecs; ++k) tile[k * Group + lane] = v[k];
    }
    // From a tile written by stash (all slots) or stash_async (full vectors only).
    __device__ __forceinline__ void load_from_stash(const Vec16<T>* tile, bool all_slots, const RowView<T>& row, int64 begin,
                                                    int64 end, int lane) {
        all_slots = all_slots || full_tile(row.in_vec, begin, end);
#pragma unroll
        for (int k = 0; k < Vecs; ++k) {
            const int64 e0 = slot_begin(begin, k, lane);
            if (all_slots || full_vector(row, e0, end)) bits(k) = bits_of(tile[k * Group + lane]);
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
    // full: the caller knows the slot is a full vector (no bounds test).
    __device__ __forceinline__ static void store_vector(const RowView<T>& row, int64 e0, int64 end, Vec16<T> r, bool full = false) {
        if (full || (row.out_vec && e0 + VS <= end)) {
            store_vec16(row.out + e0, r);
        } else if (e0 < end) {
            store_scalars(row.out + e0 * row.out_stride, row.out_stride, end - e0, r);
        }
    }
    // Vector by vector, 16-bit types converted in pairs (converting all before the first
    // store, as store_scaled does, raised the v5 prefetching rows 256 x 8, since removed, from 96
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
        const bool full = full_tile(row.out_vec, begin, end);
#pragma unroll
        for (int k = 0; k < Vecs; ++k) store_vector(row, slot_begin(begin, k, lane), end, r[k], full);
    }
};

template <bool IsMax, typename A> __device__ __forceinline__ A combine(A a, A b) { return IsMax ? max_nan(a, b) : a + b; }

// Reduction over the Group threads of a row: shuffles inside a warp, shared memory across
// warps (Group == Threads > 32; `slots` holds Threads/32 values and is reusable on return).
template <bool IsMax, int Group, int Threads, typename A> __device__ __forceinline__ A group_reduce(A v, A* slots) {
    constexpr int WarpWidth = Group < 32 ? Group : 32;
#pragma unroll
    for (int offset = WarpWidth / 2; offset > 0; offset >>= 1) v = combine<IsMax>(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (Group > 32) {
        static_assert(Group <= 32 || Group == Threads, "a group wider than a warp is the whole block");
        if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
        __syncthreads();
        v = slots[0];
#pragma unroll
        for (int w = 1; w < Threads / 32; ++w) v = combine<IsMax>(v, slots[w]);
        __syncthreads();
    }
    return v;
}

template <typename A, int Threads> struct BlockSlots {
    A max[Threads / 32 > 0 ? Threads / 32 : 1];
    A sum[Threads / 32 > 0 ? Threads / 32 : 1];
};

// Exact (max, sum of exp(x - max)) of a chunk held by a group.
template <int Group, int Threads, typename T, int Vecs, typename A = accum_t<T>>
__device__ __forceinline__ void chunk_stats(const Chunk<T, Group, Vecs>& c, BlockSlots<A, Threads>& slots, A& m, A& s) {
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

#if __CUDA_ARCH__ >= 900
// Cluster statistics move by push: a block stores its (max, sum) pair of an item into its own
// slot (`rank`) of the same item's inbox in every block of the cluster (distributed shared
// memory), one cluster barrier (release / acquire) publishes them, and each block then merges
// its own inbox. No block reads a peer's memory, so none has to wait for its peers a second
// time before it moves on or leaves: bench/probe_cluster_cost.py (run S6-3) measured a staged
// copy in 16-block clusters at 0.86 of the copy with push, 0.69-0.75 with pull and its second
// barrier. The kernel's first barrier phase (an arrive at its start, the wait before its first
// push) makes sure every peer is running before any store into its shared memory.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

// Pair (m, s) into slot `rank` of block `peer`'s inbox; `slot` is this item's slot `rank` here.
template <typename A>
__device__ __forceinline__ void push_pair(cooperative_groups::cluster_group& cluster, A* slot, unsigned peer, A m, A s) {
    A* remote = cluster.map_shared_rank(slot, peer);
    remote[0] = m;
    remote[1] = s;
}

// Merged (max, sum) of an item's Cluster pairs in this block's inbox, Stride accumulators apart.
template <int Cluster, int Stride, typename A> __device__ __forceinline__ void merge_inbox(const A* inbox, A& m, A& s) {
    m = neg_infinity<A>();
#pragma unroll
    for (int q = 0; q < Cluster; ++q) m = max_nan(m, inbox[q * Stride]);
    s = 0;
#pragma unroll 1  // (unrolled, float64 row clusters spill under their 64-register bound)
    for (int q = 0; q < Cluster; ++q) s += rescale(inbox[q * Stride + 1], inbox[q * Stride], m);
}
#endif

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

// Compiler barrier: mma.cuh's cp.async wrappers carry no "memory" clobber, so without it the
// compiler could move a shared-memory read of a tile across the wait for it (or across the
// cp.async that refills it) where no __syncthreads separates them.
__device__ __forceinline__ void compiler_barrier() { asm volatile("" ::: "memory"); }

// Spins (thread 0) until *counter reaches target. A block of the persistent grid that is not
// resident would make this wait forever; the host sizes the grid so that cannot happen, and a
// few seconds of waiting trap instead.
__device__ __forceinline__ void wait_for_arrivals(const unsigned* counter, unsigned target) {
    for (unsigned spins = 0; *reinterpret_cast<const volatile unsigned*>(counter) < target; ++spins) {
        if (spins == (1u << 24)) __trap();
        __nanosleep(256);
    }
}

// cp.async.wait_group with a run-time count (the immediate of the instruction), for up to 7
// groups pending; more waits for all.
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
    switch (pending) {
        case 7: cp_async_wait<7>(); break;
        case 6: cp_async_wait<6>(); break;
        case 5: cp_async_wait<5>(); break;
        case 4: cp_async_wait<4>(); break;
        case 3: cp_async_wait<3>(); break;
        case 2: cp_async_wait<2>(); break;
        case 1: cp_async_wait<1>(); break;
        default: cp_async_wait<0>();
    }
    compiler_barrier();
}

}  // namespace softmax_detail
}  // namespace cufuse

using cufuse::int64;
using namespace cufuse::softmax_detail;

// Group threads per row, Threads/Group rows per block; rows of length <= Group*Vecs*VS.
// ExpOnce (softmax only): the exps of the sum are kept in registers and scaled at the store.
template <typename T, bool Log, int Threads, int Group, int Vecs, bool ExpOnce>
__global__ void __launch_bounds__(Threads) softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length,
                                                        int64 inner, int64 so, int64 si, int64 sl) {
    using A = cufuse::accum_t<T>;
    __shared__ BlockSlots<A, Threads> slots;
    constexpr int RowsPerBlock = Threads / Group;
    const int lane = threadIdx.x % Group;
    const int64 r = static_cast<int64>(blockIdx.x) * RowsPerBlock + threadIdx.x / Group;
    const bool active = r < rows;  // inactive groups still join the shuffles, with an empty row
    const RowView<T> row = make_row(x, y, active ? r : 0, length, inner, so, si, sl);
    const int64 end = active ? length : 0;
    using ChunkT = Chunk<T, Group, Vecs>;
    ChunkT c;
    c.load(row, 0, end, lane);
    finish_row<Log, Group, Threads, ExpOnce>(c, slots, row, 0, end, lane);
}

// One block a row of up to (StashTiles + 1) tiles of Threads x Vecs vectors: the last tile in
// registers, the others in dynamic shared memory ([StashTiles][Vecs][Threads], cp.async, one
// group a tile, merged as it lands). A 128 KB row then keeps two blocks an SM, so one block's
// loads overlap the other's reductions and stores (a 1024-thread block holding it all in
// registers is alone on its SM: H200, 1024 x 65536 float16, 0.81x copy against 0.91). Each
// thread reads back only the slots it copied itself: no block barrier between a tile's
// arrival and its use. With Cluster > 1 a cluster of such blocks shares a row, block `rank`
// holding elements [rank * chunk_len, ...), their statistics pushed through distributed
// shared memory (pulled with a second barrier, this measured 0.25-0.78x: bench/NOTES.md,
// softmax v9 and v10).
template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int Cluster>
__device__ __forceinline__ void softmax_rows_stashed_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                          int64 so, int64 si, int64 sl, int64 chunk_len, int64 r, int rank) {
    using A = cufuse::accum_t<T>;
    using ChunkT = Chunk<T, Threads, Vecs>;
    __shared__ BlockSlots<A, Threads> slots;
    extern __shared__ uint4 stash_bytes[];
    cufuse::Vec16<T>* stash = reinterpret_cast<cufuse::Vec16<T>*>(stash_bytes);
    const RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
    // (One block: the whole row, chunk_len unread -- kept as a run-time bound, the extra
    // registers made the 2-byte kernels spill.)
    const int64 begin = Cluster == 1 ? 0 : min(length, rank * chunk_len), end = Cluster == 1 ? length : min(length, begin + chunk_len);
    auto tile_begin = [&](int t) { return min(end, begin + static_cast<int64>(t) * ChunkT::capacity); };
    auto tile_end = [&](int t) { return min(end, tile_begin(t) + ChunkT::capacity); };
    auto stash_tile = [&](int t) { return stash + t * Vecs * Threads; };
    if (row.in_vec) {
#pragma unroll
        for (int t = 0; t < StashTiles; ++t) {
            ChunkT::stash_async(stash_tile(t), row, tile_begin(t), tile_end(t), threadIdx.x);
            cufuse::cp_async_commit();
        }
    }
    ChunkT last, c;
    last.load(row, tile_begin(StashTiles), tile_end(StashTiles), threadIdx.x);
    OnlineStats<A> stats;
#pragma unroll 1
    for (int t = 0; t < StashTiles; ++t) {
        if (row.in_vec) {
            cp_async_wait_pending(StashTiles - 1 - t);  // tile t's group has landed
            c.load_from_stash(stash_tile(t), false, row, tile_begin(t), tile_end(t), threadIdx.x);
        } else {
            c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            c.stash(stash_tile(t), threadIdx.x);
        }
        stats.merge(c);
    }
    stats.merge(last);
    A row_max = group_reduce<true, Threads, Threads>(stats.m, slots.max);
    A row_sum = group_reduce<false, Threads, Threads>(rescale(stats.s, stats.m, row_max), slots.sum);
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        static_assert(Cluster <= Threads, "thread q pushes the block's pair to block q");
        __shared__ A inbox[Cluster][2];  // every block's (max, sum) of the row
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (threadIdx.x < Cluster) push_pair(cluster, inbox[rank], threadIdx.x, row_max, row_sum);
        cluster.sync();
        merge_inbox<Cluster, 2>(&inbox[0][0], row_max, row_sum);
    }
#endif
    const Normalizer<A, Log> f(row_max, row_sum);
    last.store(row, tile_begin(StashTiles), tile_end(StashTiles), threadIdx.x, f);
#pragma unroll 1
    for (int t = StashTiles - 1; t >= 0; --t) {
        c.load_from_stash(stash_tile(t), !row.in_vec, row, tile_begin(t), tile_end(t), threadIdx.x);
        c.store(row, tile_begin(t), tile_end(t), threadIdx.x, f);
    }
}

template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si, int64 sl,
                         int64 chunk_len) {
    softmax_rows_stashed_body<T, Log, Threads, Vecs, StashTiles, 1>(x, y, length, inner, so, si, sl, chunk_len, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int Vecs, int StashTiles, int BlocksPerSM, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_stashed_cluster(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner, int64 so, int64 si,
                                 int64 sl, int64 chunk_len) {
    cluster_arrive_relaxed();
    softmax_rows_stashed_body<T, Log, Threads, Vecs, StashTiles, Cluster>(
        x, y, length, inner, so, si, sl, chunk_len, blockIdx.x / Cluster, static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif

#if __CUDA_ARCH__ >= 900  // __cluster_dims__ does not compile for earlier targets
// One cluster of Cluster blocks per row; block `rank` holds elements [rank*chunk_len, ...).
// Up to 4 vectors a thread, two blocks share an SM (the ladder relies on it); 8 vectors,
// three (the occupancy of its 72 registers before v7, whose flushed exps let ptxas keep more
// in flight: 96 registers unbounded, 80 under the bound, no spills). A grid of fewer
// clusters than rows loops: cluster q serves rows q, q + clusters, ... (persistent clusters:
// no cluster launch per row, whose placement needs Cluster free slots in one GPC at once).
template <typename T, bool Log, int Threads, int Vecs, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, Vecs <= 4 ? 2 : 3)
    softmax_rows_cluster(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length, int64 inner, int64 so, int64 si,
                         int64 sl, int64 chunk_len) {
    using A = cufuse::accum_t<T>;
    namespace cg = cooperative_groups;
    __shared__ BlockSlots<A, Threads> slots;
    // [row parity][rank][max, sum]: the row's pairs of every block, pushed by each. A block
    // pushes into row r + 2 clusters' slots only after passing row r + clusters' barrier,
    // which no block reaches before it has merged row r.
    __shared__ A inbox[2][Cluster][2];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const int64 clusters = gridDim.x / Cluster;
    const int64 begin = rank * chunk_len, end = min(length, begin + chunk_len);
    cluster_arrive_relaxed();
    bool peers_running = false;  // (every block of a cluster serves the same rows)
    int parity = 0;
    for (int64 r = static_cast<int64>(blockIdx.x) / Cluster; r < rows; r += clusters, parity ^= 1) {
        const RowView<T> row = make_row(x, y, r, length, inner, so, si, sl);
        Chunk<T, Threads, Vecs> c;
        c.load(row, begin, end, threadIdx.x);
        A m, s, row_max, row_sum;
        chunk_stats<Threads, Threads>(c, slots, m, s);
        if (!peers_running) cluster_wait(), peers_running = true;
        if (threadIdx.x < Cluster) push_pair(cluster, inbox[parity][rank], threadIdx.x, m, s);
        cluster.sync();
        merge_inbox<Cluster, 2>(&inbox[parity][0][0], row_max, row_sum);
        c.store(row, begin, end, threadIdx.x, Normalizer<A, Log>(row_max, row_sum));
    }
    if (!peers_running) cluster_wait();  // no push after the last barrier: nothing to wait for at exit
}
#endif

// Persistent grid: gridDim.x = blocks_per_row * rows_per_wave blocks, all co-resident (the
// host sizes it from the occupancy guaranteed by __launch_bounds__(Threads, BlocksPerSM) and
// the shared memory per block). Block b serves chunk b % blocks_per_row of rows
// b / blocks_per_row, + rows_per_wave, ...: the blocks of one row advance together, so the
// arrival wait cannot deadlock. A chunk is cut into tiles of one register Chunk: the last
// tile stays in registers, the first smem_tiles tiles are kept in dynamic shared memory,
// any tiles in between are streamed (read again in the output pass, most recent first).
// partials: 2 * rows * blocks_per_row accumulators; arrivals: rows counters, zero at entry
// and left zero at exit (each block of a row adds 1 on arrival and 1 on leaving).
// Pipelined: each shared-memory tile is its own cp.async group, merged as soon as it lands
// (the statistics of the first tiles overlap the loads of the later ones), the register
// tile's loads are issued before any wait, and the output pass requests the block's next
// row tile by tile as it frees each shared-memory tile (a thread refills only the slots it
// reads itself: no barrier), so with several rows per block the loads of the next row
// overlap the arrival wait and the stores of this one. Tiles are requested and merged last
// first. Otherwise one group, requested at the start of the row and waited for as a whole,
// and the register tile loaded last.
template <typename T, bool Log, int Threads, int Vecs, int BlocksPerSM, bool Pipelined>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_rows_split(const T* __restrict__ x, T* __restrict__ y, int64 rows, int64 length, int64 inner, int64 so, int64 si,
                       int64 sl, int64 chunk_len, int blocks_per_row, int smem_tiles, cufuse::accum_t<T>* partials,
                       unsigned* arrivals) {
    using A = cufuse::accum_t<T>;
    using ChunkT = Chunk<T, Threads, Vecs>;
    using cufuse::Vec16;
    __shared__ BlockSlots<A, Threads> slots;
    extern __shared__ uint4 stash_bytes[];
    Vec16<T>* stash = reinterpret_cast<Vec16<T>*>(stash_bytes);  // [smem_tiles][Vecs][Threads], conflict-free
    const int part = blockIdx.x % blocks_per_row;
    const int64 rows_per_wave = gridDim.x / blocks_per_row;
    // The block's chunk, the same in every row.
    const int64 begin = min(length, part * chunk_len), end = min(length, begin + chunk_len);
    const int64 tiles = max(int64(1), (end - begin + ChunkT::capacity - 1) / ChunkT::capacity);
    // Tiles [0, stashed) live in shared memory, [stashed, tiles - 1) are streamed, the
    // last one stays in registers.
    const int stashed = static_cast<int>(min(static_cast<int64>(smem_tiles), tiles - 1));
    auto tile_begin = [&](int64 t) { return begin + t * ChunkT::capacity; };
    auto tile_end = [&](int64 t) { return min(end, tile_begin(t) + ChunkT::capacity); };
    auto stash_tile = [&](int64 t) { return stash + t * Vecs * Threads; };
    auto row_at = [&](int64 r) { return make_row(x, y, r, length, inner, so, si, sl); };
    auto request = [&](const RowView<T>& row, int t) {  // tile t of an aligned row into shared memory
        ChunkT::stash_async(stash_tile(t), row, tile_begin(t), tile_end(t), threadIdx.x);
        if (Pipelined) cufuse::cp_async_commit();
    };
    const int64 first = blockIdx.x / blocks_per_row;
    if (Pipelined && first < rows) {
        const RowView<T> row = row_at(first);
        if (row.in_vec)
            for (int t = stashed - 1; t >= 0; --t) request(row, t);
    }
    for (int64 r = first; r < rows; r += rows_per_wave) {
        const RowView<T> row = row_at(r);
        ChunkT c, last;  // c: the tile being merged or stored; last: the register tile
        // This thread's online (max, sum) over its slots of the chunk; the block reduces them
        // once a row (a block reduction a tile cost ~3 instructions an element and 4 barriers).
        OnlineStats<A> stats;
        // Pass 1. Aligned rows: every shared-memory tile is in flight with cp.async (up to
        // smem_tiles x 16 KB per block; pipelined: requested before this row), the other
        // tiles load meanwhile.
        if (!Pipelined && row.in_vec) {
            for (int t = 0; t < stashed; ++t) request(row, t);
            cufuse::cp_async_commit();
        }
        if (Pipelined) last.load(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x);
        for (int64 t = stashed; t < tiles - 1; ++t) {
            c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            stats.merge(c);
        }
        for (int i = 0; i < stashed; ++i) {
            const int t = Pipelined ? stashed - 1 - i : i;  // pipelined: in the order requested
            if (row.in_vec) {
                cp_async_wait_pending(Pipelined ? t : 0);  // tile t's group has landed
                c.load_from_stash(stash_tile(t), false, row, tile_begin(t), tile_end(t), threadIdx.x);
            } else {
                c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
                c.stash(stash_tile(t), threadIdx.x);
            }
            stats.merge(c);
        }
        if (!Pipelined) last.load(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x);
        stats.merge(last);
        const A m = group_reduce<true, Threads, Threads>(stats.m, slots.max);
        const A s = group_reduce<false, Threads, Threads>(rescale(stats.s, stats.m, m), slots.sum);
        A* row_partials = partials + 2 * r * blocks_per_row;
        if (threadIdx.x == 0) {
            row_partials[2 * part] = m;
            row_partials[2 * part + 1] = s;
            __threadfence();
            atomicAdd(arrivals + r, 1u);
            wait_for_arrivals(arrivals + r, blocks_per_row);
            __threadfence();
        }
        __syncthreads();
        A row_max = cufuse::neg_infinity<A>();
        for (int q = threadIdx.x; q < blocks_per_row; q += Threads) row_max = max_nan(row_max, __ldcg(row_partials + 2 * q));
        row_max = group_reduce<true, Threads, Threads>(row_max, slots.max);
        A row_sum = 0;
        for (int q = threadIdx.x; q < blocks_per_row; q += Threads)
            row_sum += rescale(__ldcg(row_partials + 2 * q + 1), __ldcg(row_partials + 2 * q), row_max);
        row_sum = group_reduce<false, Threads, Threads>(row_sum, slots.sum);
        // Every thread has read the partials (group_reduce ends with a barrier): leave the
        // row. The last of its blocks to leave re-arms the counter for the next call, so the
        // scratch is reused without a memset (the others have all passed their wait).
        if (threadIdx.x == 0 && atomicAdd(arrivals + r, 1u) == 2u * blocks_per_row - 1u) atomicExch(arrivals + r, 0u);
        const Normalizer<A, Log> f(row_max, row_sum);
        // (The next row's view is rebuilt at each refill: kept live, it made 16-bit types spill.)
        const bool refill = Pipelined && r + rows_per_wave < rows && row_at(r + rows_per_wave).in_vec;
        // Pass 2, last tile first (in registers), then the streamed tiles read most recently
        // (the likeliest to be in L2), then the shared-memory tiles.
        last.store(row, tile_begin(tiles - 1), tile_end(tiles - 1), threadIdx.x, f);
        for (int64 t = tiles - 2; t >= 0; --t) {
            if (t < stashed) {
                c.load_from_stash(stash_tile(t), !row.in_vec, row, tile_begin(t), tile_end(t), threadIdx.x);
                if (refill) {
                    compiler_barrier();  // the reads above stay before the refill
                    request(row_at(r + rows_per_wave), static_cast<int>(t));
                }
            } else {
                c.load(row, tile_begin(t), tile_end(t), threadIdx.x);
            }
            c.store(row, tile_begin(t), tile_end(t), threadIdx.x, f);
        }
    }
}

// Reduced axis strided (sl != 1), inner axis contiguous: block = 32 columns x Slices slices of
// the reduced axis, so every warp access is 32 consecutive elements. Online statistics over
// the slice (Unroll loads in flight per thread), merged across slices in shared memory; the
// output pass reads the column again. With Cluster > 1 the blocks of a cluster split the
// reduced axis and merge their column statistics through distributed shared memory: a
// block's part is small (1/Cluster of the column tile), so its second read comes from L2.
template <typename T, bool Log, int Slices, int Unroll, int Cluster>
__device__ __forceinline__ void softmax_cols_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                  int64 so, int64 si, int64 sl, int64 column_block, int rank) {
    using A = cufuse::accum_t<T>;
    __shared__ A slice_max[Slices][32], slice_sum[Slices][32];
    const int64 column_tiles = (inner + 31) / 32;
    const int64 o = column_block / column_tiles;
    const int col = threadIdx.x % 32, slice = threadIdx.x / 32;
    const int64 i = (column_block - o * column_tiles) * 32 + col;
    const bool active = i < inner;
    const T* in = x + o * so + (active ? i : 0) * si;
    T* out = y + o * length * inner + i;
    const int64 part = (length + Cluster - 1) / Cluster;
    const int64 begin = min(length, rank * part), end = min(length, begin + part);
    A m = cufuse::neg_infinity<A>(), s = 0;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        A a[Unroll];
        A tile_m = cufuse::neg_infinity<A>();
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const int64 l = l0 + static_cast<int64>(u) * Slices;
            a[u] = active && l < end ? cufuse::to_accum(in[l * sl]) : cufuse::neg_infinity<A>();
            tile_m = max_nan(tile_m, a[u]);
        }
        const A new_m = max_nan(m, tile_m);
        s = rescale(s, m, new_m);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) s += exp_accum_ftz(a[u] - new_m);
        m = new_m;
    }
    slice_max[slice][col] = m;
    __syncthreads();
    A col_max = cufuse::neg_infinity<A>();
#pragma unroll
    for (int q = 0; q < Slices; ++q) col_max = max_nan(col_max, slice_max[q][col]);
    slice_sum[slice][col] = rescale(s, m, col_max);
    __syncthreads();
    A col_sum = 0;
#pragma unroll
    for (int q = 0; q < Slices; ++q) col_sum += slice_sum[q][col];
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        static_assert(Cluster <= Slices, "warp q pushes the block's column pairs to block q");
        __shared__ A inbox[Cluster][32][2];  // (max, sum) of each column from every block of the cluster
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (slice < Cluster) push_pair(cluster, inbox[rank][col], slice, col_max, col_sum);
        cluster.sync();
        merge_inbox<Cluster, 64>(&inbox[0][col][0], col_max, col_sum);
    }
#endif
    if (!active) return;
    const Normalizer<A, Log> f(col_max, col_sum);
    for (int64 l = begin + slice; l < end; l += Slices) out[l * inner] = cufuse::from_accum<T>(f.template to<T>(cufuse::to_accum(in[l * sl])));
}

template <typename T, bool Log, int Slices, int Unroll>
__global__ void __launch_bounds__(32 * Slices, 2) softmax_cols(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                            int64 inner, int64 so, int64 si, int64 sl) {
    softmax_cols_body<T, Log, Slices, Unroll, 1>(x, y, length, inner, so, si, sl, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Slices, int Unroll, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(32 * Slices, 2)
    softmax_cols_cluster(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so, int64 si,
                         int64 sl) {
    cluster_arrive_relaxed();
    softmax_cols_body<T, Log, Slices, Unroll, Cluster>(x, y, length, inner, so, si, sl, blockIdx.x / Cluster,
                                                       static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif

namespace cufuse {
namespace softmax_detail {

// The column kernels with 16-byte vectors: a thread holds VS adjacent columns of a reduced index.
template <typename T> __device__ __forceinline__ Vec16<T> neg_inf_vector() {
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) r.v[j] = neg_inf_value<T>();
    return r;
}
// One vector of columns; a base that is not 16-byte aligned takes unit-stride scalars, inline
// (a call's saved registers spilled the vector column kernel's log_softmax).
template <typename T> __device__ __forceinline__ Vec16<T> load_columns(const T* p, bool vec) {
    return vec ? load_vec16(p) : load_scalars_inline(p, int64(1), int64(Vec16<T>::size));
}
template <typename T> __device__ __forceinline__ void store_columns(T* p, bool vec, const Vec16<T>& r) {
    if (vec) store_vec16(p, r);
    else store_scalars_inline(p, int64(1), int64(Vec16<T>::size), r);
}

// The online (max, sum) of each of the VS columns, merged with Count more vectors (padding
// -inf). While a column has seen only -inf its sum is meaningless (exp(-inf - -inf)): rescale
// drops it once a larger maximum comes, and an all -inf column is NaN anyway.
// 16-bit types take the maxima in pairs: no float copies of the elements live until the sum.
template <typename T, int Count, typename A = accum_t<T>>
__device__ __forceinline__ void merge_columns(const Vec16<T> (&v)[Count], A (&m)[Vec16<T>::size], A (&s)[Vec16<T>::size]) {
    constexpr int VS = Vec16<T>::size;
    A tile_m[VS];
    if constexpr (sizeof(T) == 2) {
        using T2 = typename Packed2<T>::type;
#pragma unroll
        for (int p = 0; p < VS / 2; ++p) {
            T2 pair_m = reinterpret_cast<const T2*>(v[0].v)[p];
#pragma unroll
            for (int u = 1; u < Count; ++u) pair_m = __hmax2_nan(pair_m, reinterpret_cast<const T2*>(v[u].v)[p]);
            tile_m[2 * p] = to_accum(pair_m.x), tile_m[2 * p + 1] = to_accum(pair_m.y);
        }
    } else {
#pragma unroll
        for (int j = 0; j < VS; ++j) {
            tile_m[j] = to_accum(v[0].v[j]);
#pragma unroll
            for (int u = 1; u < Count; ++u) tile_m[j] = max_nan(tile_m[j], to_accum(v[u].v[j]));
        }
    }
#pragma unroll
    for (int j = 0; j < VS; ++j) {
        const A new_m = max_nan(m[j], tile_m[j]);
        s[j] = rescale(s[j], m[j], new_m);
#pragma unroll
        for (int u = 0; u < Count; ++u) s[j] += exp_accum_ftz(to_accum(v[u].v[j]) - new_m);
        m[j] = new_m;
    }
}

// Two (max, sum) pairs of one column merged into (m, s).
template <typename A> __device__ __forceinline__ void merge_stats(A& m, A& s, A other_m, A other_s) {
    const A new_m = max_nan(m, other_m);
    s = rescale(s, m, new_m) + rescale(other_s, other_m, new_m);
    m = new_m;
}

template <typename T, bool Log, typename A = accum_t<T>>
__device__ __forceinline__ Vec16<T> normalize_columns(const Normalizer<A, Log> (&f)[Vec16<T>::size], const Vec16<T>& v) {
    A a[Vec16<T>::size];
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) a[j] = f[j].template to<T>(to_accum(v.v[j]));
    return vector_from_accum<T>(a);
}

// A thread's vector of columns in the 16-byte column kernels: block `column_block` covers Cols =
// ColLanes*VS adjacent columns of one outer index, lane `lane` VS of them, slice `slice` the
// reduced indices it walks. inner is a multiple of VS: a vector is all in or all out.
template <typename T, int ColLanes> struct ColumnVector {
    static constexpr int VS = Vec16<T>::size, Cols = ColLanes * VS;
    int lane, slice;
    bool active, in_vec, out_vec;  // in_vec / out_vec: 16-byte aligned base
    const T* in;
    T* out;
    __device__ __forceinline__ ColumnVector(const T* x, T* y, int64 length, int64 inner, int64 so, int64 column_block) {
        const int64 column_tiles = (inner + Cols - 1) / Cols;
        const int64 o = column_block / column_tiles;
        lane = threadIdx.x % ColLanes;
        slice = threadIdx.x / ColLanes;
        const int64 i0 = (column_block - o * column_tiles) * Cols + lane * VS;
        active = i0 < inner;
        in = x + o * so + (active ? i0 : 0);
        out = y + o * length * inner + i0;
        in_vec = aligned16(x);
        out_vec = aligned16(y);
    }
};

// The normalisers of the VS columns from lane*VS: block_stats holds the block's (max, sum) of
// each of its Cols columns (written by threads c < Cols, no barrier since); with Cluster > 1
// they are merged over the cluster's blocks by push (the kernel opened a cluster barrier phase).
template <int Cluster, int Cols, int VS, typename A, bool Log>
__device__ __forceinline__ void column_normalizers(A (&block_stats)[Cols][2], int lane, Normalizer<A, Log> (&f)[VS]) {
    const A(*stats)[2] = block_stats;
#if __CUDA_ARCH__ >= 900
    if constexpr (Cluster > 1) {
        __shared__ A inbox[Cluster][Cols][2];  // (max, sum) of each column from every block
        __shared__ A cluster_stats[Cols][2];
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        const int c = threadIdx.x;
        cluster_wait();  // the kernel's opening arrive: every peer is running
        if (c < Cols)
#pragma unroll
            for (unsigned q = 0; q < Cluster; ++q)
                push_pair(cluster, inbox[cluster.block_rank()][c], q, block_stats[c][0], block_stats[c][1]);
        cluster.sync();
        if (c < Cols) merge_inbox<Cluster, 2 * Cols>(&inbox[0][c][0], cluster_stats[c][0], cluster_stats[c][1]);
        __syncthreads();
        stats = cluster_stats;
    } else
#endif
    {
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < VS; ++j) f[j] = Normalizer<A, Log>(stats[lane * VS + j][0], stats[lane * VS + j][1]);
}

// One block's part of a column strip: rows [begin, end) of the reduced axis, cut into tiles of
// TileRows = Slices*Vecs rows (thread: column vector `lane`, row `slice` of each Slices-row
// band). Tiles [0, stashed) live in dynamic shared memory ([tile][Vecs][Threads]: conflict-free),
// the last one in registers where RegisterTile; a thread reads back only the slots it wrote.
template <typename T, int Threads, int ColLanes, int Vecs, bool RegisterTile> struct StripPart {
    using V = Vec16<T>;
    static constexpr int VS = V::size, Slices = Threads / ColLanes, Cols = ColLanes * VS, TileRows = Slices * Vecs, Warps = Threads / 32;
    static_assert(32 % ColLanes == 0 && Threads % 32 == 0 && Cols <= Threads,
                  "a warp holds whole rows of the strip; a thread per column merges the warps");
    V* stash;
    int64 begin, end;
    int stashed;  // tiles in shared memory; the register tile, if any, is tile `stashed`
    __device__ __forceinline__ StripPart(V* stash_, int64 length, int64 part, int64 index) : stash(stash_) {
        begin = min(length, index * part);
        end = min(length, begin + part);
        const int tiles = static_cast<int>(max(int64(1), (end - begin + TileRows - 1) / TileRows));
        stashed = RegisterTile ? tiles - 1 : tiles;
    }
    __device__ __forceinline__ int64 row(int t, int v, int slice) const { return begin + static_cast<int64>(t) * TileRows + v * Slices + slice; }
    __device__ __forceinline__ V* slot(int t, int v) const { return stash + (t * Vecs + v) * Threads + threadIdx.x; }
    __device__ __forceinline__ bool present(const ColumnVector<T, ColLanes>& cv, int64 l) const { return cv.active && l < end; }
};

// Slot (t, v) of the part of strip cv requested into shared memory: cp.async, or a synchronous
// load where x is not 16-byte aligned. The caller commits the group.
template <typename Part, typename T, int ColLanes>
__device__ __forceinline__ void request_strip_slot(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl, int t, int v) {
    const int64 l = p.row(t, v, cv.slice);
    if (!p.present(cv, l)) return;
    if (cv.in_vec) cp_async_16(p.slot(t, v), cv.in + l * sl, true);
    else *p.slot(t, v) = load_columns(cv.in + l * sl, false);
}

// Every shared-memory tile of the part requested, one cp.async group a tile.
template <int Vecs, typename Part, typename T, int ColLanes>
__device__ __forceinline__ void request_strip_tiles(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl) {
    for (int t = 0; t < p.stashed; ++t) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) request_strip_slot(p, cv, sl, t, v);
        cp_async_commit();
    }
}

// The thread's online (max, sum) of its VS columns over the part: the register tile loaded
// (its loads in flight with the tiles') and merged first, then each shared-memory tile as its
// group lands (tile t: the t-th of the thread's `stashed` pending groups).
template <int Vecs, bool RegisterTile, typename Part, typename T, int ColLanes, typename A = accum_t<T>>
__device__ __forceinline__ void merge_strip_part(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 sl,
                                                 Vec16<T> (&last)[RegisterTile ? Vecs : 1], A (&m)[Vec16<T>::size],
                                                 A (&s)[Vec16<T>::size]) {
#pragma unroll
    for (int j = 0; j < Vec16<T>::size; ++j) m[j] = neg_infinity<A>(), s[j] = 0;
    if constexpr (RegisterTile) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(p.stashed, v, cv.slice);
            last[v] = p.present(cv, l) ? load_columns(cv.in + l * sl, cv.in_vec) : neg_inf_vector<T>();
        }
        merge_columns<T, Vecs>(last, m, s);
    }
    for (int t = 0; t < p.stashed; ++t) {
        cp_async_wait_pending(p.stashed - 1 - t);  // tile t's group has landed
        Vec16<T> c[Vecs];
#pragma unroll
        for (int v = 0; v < Vecs; ++v) c[v] = p.present(cv, p.row(t, v, cv.slice)) ? *p.slot(t, v) : neg_inf_vector<T>();
        merge_columns<T, Vecs>(c, m, s);
    }
}

// The block's (max, sum) of each of its Cols columns from the threads' online pairs: across a
// warp's slices by shuffles (the slices of one column vector are lanes ColLanes, 2*ColLanes,
// ... apart), across warps in shared memory; thread c < Cols writes column c's pair to
// block_stats (no barrier after).
template <int Threads, int ColLanes, int VS, typename A>
__device__ __forceinline__ void block_column_stats(A (&m)[VS], A (&s)[VS], A (&warp_stats)[Threads / 32][ColLanes * VS][2],
                                                   A (&block_stats)[ColLanes * VS][2], int lane) {
    constexpr int Warps = Threads / 32, Cols = ColLanes * VS;
#pragma unroll
    for (int offset = ColLanes; offset < 32; offset *= 2)
#pragma unroll
        for (int j = 0; j < VS; ++j) {
            const A other_m = __shfl_xor_sync(0xffffffffu, m[j], offset), other_s = __shfl_xor_sync(0xffffffffu, s[j], offset);
            merge_stats(m[j], s[j], other_m, other_s);
        }
    const int warp = threadIdx.x / 32, c = threadIdx.x;
    if (threadIdx.x % 32 < ColLanes) {
#pragma unroll
        for (int j = 0; j < VS; ++j) warp_stats[warp][lane * VS + j][0] = m[j], warp_stats[warp][lane * VS + j][1] = s[j];
    }
    __syncthreads();
    if (c < Cols) {
        A col_max = neg_infinity<A>(), col_sum = 0;
        for (int w = 0; w < Warps; ++w) merge_stats(col_max, col_sum, warp_stats[w][c][0], warp_stats[w][c][1]);
        block_stats[c][0] = col_max;
        block_stats[c][1] = col_sum;
    }
}

// Output pass of the part: the register tile, then the shared-memory tiles. after_read(t, v)
// runs once the thread has read slot (t, v) (the split kernel refills it there).
template <bool Log, int Vecs, bool RegisterTile, typename Part, typename T, int ColLanes, typename A, typename AfterRead>
__device__ __forceinline__ void store_strip_part(const Part& p, const ColumnVector<T, ColLanes>& cv, int64 inner,
                                                 const Normalizer<A, Log> (&f)[Vec16<T>::size],
                                                 const Vec16<T> (&last)[RegisterTile ? Vecs : 1], AfterRead after_read) {
    if constexpr (RegisterTile) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(p.stashed, v, cv.slice);
            if (p.present(cv, l)) store_columns(cv.out + l * inner, cv.out_vec, normalize_columns<T, Log>(f, last[v]));
        }
    }
    for (int t = 0; t < p.stashed; ++t) {
#pragma unroll
        for (int v = 0; v < Vecs; ++v) {
            const int64 l = p.row(t, v, cv.slice);
            if (p.present(cv, l)) store_columns(cv.out + l * inner, cv.out_vec, normalize_columns<T, Log>(f, *p.slot(t, v)));
            after_read(t, v);
        }
    }
}

template <typename A> struct StatsPair;
template <> struct StatsPair<float> { using type = float2; };
template <> struct StatsPair<double> { using type = double2; };

// The column statistics of a strip split over `parts` blocks of a persistent grid, through
// global memory: thread c < Cols publishes block_stats[c] to strip_partials[part][c], the block
// arrives at `counter` and waits for `target` arrivals, then Threads / Cols threads a column
// merge the parts' pairs (independent loads, several a thread), and thread c < Cols merges
// those into block_stats[c] (no barrier after). group_stats: scratch, free on entry.
template <int Threads, int Cols, typename A>
__device__ __forceinline__ void exchange_column_stats(A (&block_stats)[Cols][2], A (&group_stats)[Threads / Cols][Cols][2],
                                                      A* strip_partials, int part, int parts, unsigned* counter, unsigned target) {
    using Pair = typename StatsPair<A>::type;
    constexpr int Groups = Threads / Cols;
    Pair* pairs = reinterpret_cast<Pair*>(strip_partials);
    const int c = threadIdx.x % Cols, group = threadIdx.x / Cols;
    if (threadIdx.x < Cols) pairs[part * Cols + c] = Pair{block_stats[c][0], block_stats[c][1]};
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // cumulative: the block's writes, ordered before it by the barrier (as in a grid sync)
        atomicAdd(counter, 1u);
        wait_for_arrivals(counter, target);
        __threadfence();
    }
    __syncthreads();
    A m = neg_infinity<A>(), s = 0;
#pragma unroll 4
    for (int q = group; q < parts; q += Groups) {
        const Pair other = __ldcg(pairs + q * Cols + c);
        merge_stats(m, s, other.x, other.y);
    }
    group_stats[group][c][0] = m;
    group_stats[group][c][1] = s;
    __syncthreads();
    if (threadIdx.x < Cols) {
        m = neg_infinity<A>(), s = 0;
#pragma unroll
        for (int g = 0; g < Groups; ++g) merge_stats(m, s, group_stats[g][c][0], group_stats[g][c][1]);
        block_stats[c][0] = m;
        block_stats[c][1] = s;
    }
}

}  // namespace softmax_detail
}  // namespace cufuse

// Reduced axis strided, inner axis contiguous, 16-byte vectors across columns: a block covers
// Cols = ColLanes*VS columns x Slices = Threads/ColLanes slices of the reduced axis. Each
// thread keeps the online (max, sum) of its VS columns over its slice with Unroll vectors in
// flight; slices merge in shared memory, a cluster's blocks (each 1/Cluster of the column)
// through distributed shared memory. The output pass reads the block's part again (small:
// from L2). Needs si == 1 and so, sl, inner multiples of VS (the host checks); an x or y
// base that is not 16-byte aligned takes scalar accesses.
template <typename T, bool Log, int Threads, int ColLanes, int Unroll, int Cluster>
__device__ __forceinline__ void softmax_cols_vec_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                      int64 so, int64 sl, int64 column_block, int rank) {
    using A = cufuse::accum_t<T>;
    using V = cufuse::Vec16<T>;
    constexpr int VS = V::size, Slices = Threads / ColLanes, Cols = ColLanes * VS;
    static_assert(Threads % ColLanes == 0 && Cols <= Threads, "a thread per column merges the slices");
    __shared__ A slice_stats[Slices][Cols];  // maxima, then sums rescaled to the column max
    __shared__ A block_stats[Cols][2];       // (max, sum) of each column, pushed to the cluster
    const ColumnVector<T, ColLanes> cv(x, y, length, inner, so, column_block);
    const int lane = cv.lane, slice = cv.slice;
    const bool active = cv.active, in_vec = cv.in_vec, out_vec = cv.out_vec;
    const T* in = cv.in;
    T* out = cv.out;
    const int64 part = (length + Cluster - 1) / Cluster;
    const int64 begin = min(length, rank * part), end = min(length, begin + part);
    auto load = [&](int64 l) {  // the VS columns of reduced index l, -inf past the part
        return active && l < end ? load_columns(in + l * sl, in_vec) : neg_inf_vector<T>();
    };
    A m[VS], s[VS];
#pragma unroll
    for (int j = 0; j < VS; ++j) m[j] = cufuse::neg_infinity<A>(), s[j] = 0;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        V v[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) v[u] = load(l0 + static_cast<int64>(u) * Slices);
        merge_columns<T, Unroll>(v, m, s);
    }
    // Merge the slices: thread c < Cols reduces column c over all slices.
    const int c = threadIdx.x;
#pragma unroll
    for (int j = 0; j < VS; ++j) slice_stats[slice][lane * VS + j] = m[j];
    __syncthreads();
    if (c < Cols) {
        A col_max = cufuse::neg_infinity<A>();
        for (int q = 0; q < Slices; ++q) col_max = max_nan(col_max, slice_stats[q][c]);
        block_stats[c][0] = col_max;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < VS; ++j) slice_stats[slice][lane * VS + j] = rescale(s[j], m[j], block_stats[lane * VS + j][0]);
    __syncthreads();
    if (c < Cols) {
        A col_sum = 0;
        for (int q = 0; q < Slices; ++q) col_sum += slice_stats[q][c];
        block_stats[c][1] = col_sum;
    }
    Normalizer<A, Log> f[VS];
    column_normalizers<Cluster, Cols>(block_stats, lane, f);
    if (!active) return;
    for (int64 l0 = begin + slice; l0 < end; l0 += static_cast<int64>(Slices) * Unroll) {
        V v[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) v[u] = load(l0 + static_cast<int64>(u) * Slices);
#pragma unroll
        for (int u = 0; u < Unroll; ++u) {
            const int64 l = l0 + static_cast<int64>(u) * Slices;
            const V r = normalize_columns<T, Log>(f, v[u]);
            if (l < end) store_columns(out + l * inner, out_vec, r);  // (a `break` here made ptxas spill log_softmax)
        }
    }
}

template <typename T, bool Log, int Threads, int ColLanes, int Unroll>
__global__ void __launch_bounds__(Threads) softmax_cols_vec(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                            int64 inner, int64 so, int64 si, int64 sl) {
    softmax_cols_vec_body<T, Log, Threads, ColLanes, Unroll, 1>(x, y, length, inner, so, sl, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int ColLanes, int Unroll, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads)
    softmax_cols_vec_cluster(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so,
                             int64 si, int64 sl) {
    cluster_arrive_relaxed();
    softmax_cols_vec_body<T, Log, Threads, ColLanes, Unroll, Cluster>(x, y, length, inner, so, sl, blockIdx.x / Cluster,
                                                                       static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif

// Reduced axis strided, inner axis contiguous, every element read once and written once: a
// strip of Cols = ColLanes*VS adjacent columns (ColLanes 16-byte vectors: ColLanes*16 bytes
// contiguous a row, a warp 32/ColLanes rows) is held on chip by a cluster of Cluster blocks,
// block `rank` the rows [rank*part, (rank+1)*part). A block cuts its rows into tiles of
// TileRows = Slices*Vecs rows (thread: lane = its column vector, slice = its row in a
// Slices-row band). With RegisterTile the last, possibly ragged, tile stays in registers; the
// other tiles are copied into dynamic shared memory with cp.async (the host sizes it for them
// all), one group a tile, and merged into the thread's online per-column (max, sum) as each
// lands; a thread reads back only the slots it copied itself (no barrier). The statistics meet
// across a warp's slices by shuffles, across warps in shared memory and across the cluster
// through distributed shared memory; the output pass then normalises the tiles from registers
// and shared memory. BlocksPerSM blocks share an SM (the host's shared-memory budget assumes
// it) so that one block's loads overlap another's stores. Needs si == 1 and so, sl, inner
// multiples of VS (the host checks); an x or y base that is not 16-byte aligned takes scalar
// accesses (x's shared-memory tiles then loaded synchronously).
template <typename T, bool Log, int Threads, int ColLanes, int Vecs, bool RegisterTile, int Cluster>
__device__ __forceinline__ void softmax_cols_strip_body(const T* __restrict__ x, T* __restrict__ y, int64 length, int64 inner,
                                                        int64 so, int64 sl, int64 part, int64 strip, int rank) {
    using A = cufuse::accum_t<T>;
    using Part = StripPart<T, Threads, ColLanes, Vecs, RegisterTile>;
    constexpr int VS = Part::VS, Cols = Part::Cols;
    __shared__ A warp_stats[Part::Warps][Cols][2];
    __shared__ A block_stats[Cols][2];  // (max, sum) of each column, pushed to the cluster
    extern __shared__ uint4 stash_bytes[];
    const ColumnVector<T, ColLanes> cv(x, y, length, inner, so, strip);
    const Part p(reinterpret_cast<typename Part::V*>(stash_bytes), length, part, rank);
    request_strip_tiles<Vecs>(p, cv, sl);
    A m[VS], s[VS];
    typename Part::V last[RegisterTile ? Vecs : 1];
    merge_strip_part<Vecs, RegisterTile>(p, cv, sl, last, m, s);
    block_column_stats<Threads, ColLanes>(m, s, warp_stats, block_stats, cv.lane);
    Normalizer<A, Log> f[VS];
    column_normalizers<Cluster, Cols>(block_stats, cv.lane, f);
    if (!cv.active) return;
    store_strip_part<Log, Vecs, RegisterTile>(p, cv, inner, f, last, [](int, int) {});
}

template <typename T, bool Log, int Threads, int ColLanes, int Vecs, bool RegisterTile, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_cols_strip(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so, int64 si,
                       int64 sl, int64 part) {
    softmax_cols_strip_body<T, Log, Threads, ColLanes, Vecs, RegisterTile, 1>(x, y, length, inner, so, sl, part, blockIdx.x, 0);
}

#if __CUDA_ARCH__ >= 900
template <typename T, bool Log, int Threads, int ColLanes, int Vecs, bool RegisterTile, int BlocksPerSM, int Cluster>
__global__ void __cluster_dims__(Cluster, 1, 1) __launch_bounds__(Threads, BlocksPerSM)
    softmax_cols_strip_cluster(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so,
                               int64 si, int64 sl, int64 part) {
    cluster_arrive_relaxed();
    softmax_cols_strip_body<T, Log, Threads, ColLanes, Vecs, RegisterTile, Cluster>(
        x, y, length, inner, so, sl, part, blockIdx.x / Cluster, static_cast<int>(cooperative_groups::this_cluster().block_rank()));
}
#endif

// The strip kernel's twin without clusters: a persistent grid of strips_per_wave x
// blocks_per_strip co-resident blocks (the host sizes it from the occupancy guaranteed by
// __launch_bounds__(Threads, BlocksPerSM) and the shared memory per block). Block b holds part
// b % blocks_per_strip (rows [part*part_rows, ...)) of strips b / blocks_per_strip,
// + strips_per_wave, ... (a strip: Cols adjacent columns of one outer index, strips = outer x
// column strips), in tiles as in the strip kernel; the blocks of one strip advance together, so
// the arrival wait cannot deadlock. Column statistics meet in global memory: partials
// [parity][slot][part][Cols][2] (2 x gridDim.x x Cols pairs; parity: a block may publish its
// next strip's pairs while a slower block of its slot still reads this strip's) and one arrival
// counter a slot, counting up by blocks_per_strip a strip (a block arrives at its next strip
// only after all arrived at this one); each block adds 1 more on leaving and the last to leave
// zeroes the counter, so the scratch is reused without a memset. The output pass refills each
// shared-memory slot, once read, with the block's next strip (a thread refills only the slots
// it reads itself: no barrier), so the next strip's loads overlap this one's stores.
template <typename T, bool Log, int Threads, int ColLanes, int Vecs, bool RegisterTile, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    softmax_cols_split(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length, int64 inner, int64 so, int64 si,
                       int64 sl, int64 part_rows, int blocks_per_strip, int64 strips, cufuse::accum_t<T>* partials,
                       unsigned* arrivals) {
    using A = cufuse::accum_t<T>;
    using Part = StripPart<T, Threads, ColLanes, Vecs, RegisterTile>;
    constexpr int VS = Part::VS, Cols = Part::Cols;
    static_assert(Threads / Cols <= Part::Warps, "the exchange's per-group pairs reuse warp_stats");
    __shared__ A warp_stats[Part::Warps][Cols][2];
    __shared__ A block_stats[Cols][2];
    extern __shared__ uint4 stash_bytes[];
    const int part = blockIdx.x % blocks_per_strip;
    const int64 slot = blockIdx.x / blocks_per_strip, strips_per_wave = gridDim.x / blocks_per_strip;
    if (slot >= strips) return;
    const Part p(reinterpret_cast<typename Part::V*>(stash_bytes), length, part_rows, part);
    auto column_vector = [&](int64 strip) { return ColumnVector<T, ColLanes>(x, y, length, inner, so, strip); };
    unsigned* counter = arrivals + slot;
    A* slot_partials = partials + 2 * slot * blocks_per_strip * Cols;
    request_strip_tiles<Vecs>(p, column_vector(slot), sl);
    unsigned arrived = 0;  // arrivals at this slot's counter once every block reached this strip
    int parity = 0;
    for (int64 strip = slot; strip < strips; strip += strips_per_wave, parity ^= 1) {
        const ColumnVector<T, ColLanes> cv = column_vector(strip);
        A m[VS], s[VS];
        typename Part::V last[RegisterTile ? Vecs : 1];
        merge_strip_part<Vecs, RegisterTile>(p, cv, sl, last, m, s);
        block_column_stats<Threads, ColLanes>(m, s, warp_stats, block_stats, cv.lane);
        arrived += blocks_per_strip;
        exchange_column_stats<Threads, Cols>(block_stats, reinterpret_cast<A(&)[Threads / Cols][Cols][2]>(warp_stats),
                                             slot_partials + static_cast<int64>(parity) * 2 * gridDim.x * Cols, part,
                                             blocks_per_strip, counter, arrived);
        Normalizer<A, Log> f[VS];
        column_normalizers<1, Cols>(block_stats, cv.lane, f);
        const bool refill = strip + strips_per_wave < strips;
        const ColumnVector<T, ColLanes> next = column_vector(refill ? strip + strips_per_wave : strip);
        store_strip_part<Log, Vecs, RegisterTile>(p, cv, inner, f, last, [&](int t, int v) {
            if (!refill) return;
            compiler_barrier();  // the read of slot (t, v) stays before its refill
            request_strip_slot(p, next, sl, t, v);
            if (v == Vecs - 1) cufuse::cp_async_commit();
        });
    }
    // Every thread read its partials before the exchange's last barrier: leave the slot. The
    // last block to leave re-arms the counter for the next call (the others passed their waits).
    if (threadIdx.x == 0 && atomicAdd(counter, 1u) == arrived + blocks_per_strip - 1u) atomicExch(counter, 0u);
}
