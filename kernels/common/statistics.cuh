// Device code shared by every softmax and logsumexp kernel (kernels/softmax/,
// kernels/logsumexp/): the exps, the NaN-keeping maximum and the rescaling rule of (max, sum) pairs, the Normalizer that maps a row's
// statistics to its outputs (SciPy's non-finite rules), scalar and paired conversions, the
// cluster push exchange, and the waits of the persistent and cp.async kernels.
//
// Every softmax kernel works on the (outer, length, inner) view of x: a "row" is the `length`
// elements of one (o, i) pair, input element l of row r at x[o*so + i*si + l*sl] (any strides,
// 64-bit), output element at y[(o*length + l)*inner + i] (out is C-contiguous). Statistics are
// exact two-step (max, then sum of exp(x - max)) inside a block, except in the kernels that
// merge tiles as they land (online rule: OnlineStats, merge_columns); between threads and blocks
// (max, sum) pairs merge with `rescale`. The blocks of a cluster push their pairs into each
// other's shared memory (rows: every warp's pair by st.async, ClusterStats; columns: push_pair
// and one cluster barrier); those of a persistent grid meet in global memory
// (wait_for_arrivals). Which kernel runs which shapes: docs/softmax.md.
#pragma once

#include "common/common.cuh"
#include "common/mma.cuh"  // cp.async
#include <cooperative_groups.h>
#if __CUDA_ARCH__ >= 900
#include "common/tma.cuh"  // mbarriers
#endif

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

// Two (max, sum) pairs merged into (m, s).
template <typename A> __device__ __forceinline__ void merge_stats(A& m, A& s, A other_m, A other_s) {
    const A new_m = max_nan(m, other_m);
    s = rescale(s, m, new_m) + rescale(other_s, other_m, new_m);
    m = new_m;
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

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15) == 0; }

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

#if __CUDA_ARCH__ >= 900
// Cluster statistics move by push: a block stores its (max, sum) pair of an item into its own
// slot (`rank`) of the same item's inbox in every block of the cluster (distributed shared
// memory), one cluster barrier (release / acquire) publishes them, and each block then merges
// its own inbox. No block reads a peer's memory, so none has to wait for its peers a second
// time before it moves on or leaves: experiments/softmax/probe_cluster_cost.py measured a staged
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

// (m, s) merged over the 32 lanes of a warp; every lane ends with the same pair.
template <typename A> __device__ __forceinline__ void warp_merge_stats(A& m, A& s) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        merge_stats(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}

// The pair (m, s) into a peer's shared memory at `remote` (a shared::cluster address), its
// bytes counted on the peer's mbarrier `remote_bar` (st.async: no fence, no barrier).
__device__ __forceinline__ void store_pair_async(unsigned remote, unsigned remote_bar, float m, float s) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote), "f"(m),
                 "f"(s), "r"(remote_bar)
                 : "memory");
}
__device__ __forceinline__ void store_pair_async(unsigned remote, unsigned remote_bar, double m, double s) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];" ::"r"(remote), "d"(m),
                 "d"(s), "r"(remote_bar)
                 : "memory");
}
// The shared::cluster address of `p` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_shared_addr(const void* p, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
    return r;
}

// A row's (max, sum) over the blocks of a cluster by asynchronous push: every warp of every
// block stores its merged pair into its own slot of every block's inbox with st.async, whose
// bytes complete on the receiving block's mbarrier; a block waits once for all Cluster x warps
// pairs and merges them. No block barrier and no cluster barrier (QuACK's exchange; the
// barrier exchange costs a block reduction's two __syncthreads and a cluster barrier a row).
// A cluster that serves several rows alternates two inboxes (Rounds = 2): a peer's push of
// round n + 2 needs every warp of this block to have pushed round n + 1, which each does only
// after merging round n. The kernel calls init() before its opening cluster arrive and waits on
// that phase before the first exchange, so no push reaches a block whose mbarriers are not
// initialised; a block may leave after its last exchange (every push into it has landed).
template <typename A, int Cluster, int MaxWarps, int Rounds> struct ClusterStats {
    static_assert(Rounds == 1 || Rounds == 2, "one row, or rows in turn");
    static_assert(Cluster <= 32, "lane q of every warp pushes the warp's pair to block q");
    A pairs[Rounds][Cluster * MaxWarps][2];  // [round % Rounds][rank * warps + warp][max, sum]
    unsigned long long landed[Rounds];

    __device__ __forceinline__ void init() {
        if (threadIdx.x == 0) {
#pragma unroll
            for (int p = 0; p < Rounds; ++p) mbarrier_init(&landed[p], 1);
            mbarrier_init_fence();
        }
    }
    // (m, s): this thread's pair on entry, the row's merged over the cluster on return (every
    // thread of every block the same). warps = blockDim.x / 32 (at most MaxWarps), round = the
    // block's count of earlier exchanges (0 only, with Rounds = 1).
    __device__ __forceinline__ void exchange(A& m, A& s, unsigned rank, int warps, unsigned round) {
        const int p = round % Rounds, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (threadIdx.x == 0) mbarrier_arrive_expect_tx(&landed[p], Cluster * warps * 2 * sizeof(A));
        warp_merge_stats(m, s);
        if (lane < Cluster)
            store_pair_async(peer_shared_addr(pairs[p][rank * warps + warp], lane), peer_shared_addr(&landed[p], lane), m, s);
        mbarrier_wait(&landed[p], (round / Rounds) & 1);
        m = neg_infinity<A>();
        s = 0;
#pragma unroll 1  // (unrolled, the 16-bit log_softmax cluster rows spilled)
        for (int i = lane; i < Cluster * warps; i += 32) merge_stats(m, s, pairs[p][i][0], pairs[p][i][1]);
        warp_merge_stats(m, s);
    }
};
#endif

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

// The kernels are global templates (their names are what the host instantiates); they use
// the helpers unqualified.
using cufuse::int64;
using namespace cufuse::softmax_detail;
