// logsumexp_cols_short and logsumexp_cols_short_vec: reduced axes of at most MaxLength elements
// in logsumexp_cols's layout (adjacent rows adjacent in memory, the reduced axis strided: axis=0
// of a (2, 4194304) matrix, a short middle axis, the last axis of a transposed view): every
// element of a thread's rows in registers, loaded at once (all in flight), one value (and
// sign) a row.
//
// Picked (ColsShortConfig, ColsShortVecConfig: cufuse/ops/logsumexp/variants.py) for column
// layouts of at most 16 elements a row: logsumexp_cols gives a row a lane and its 8 warps runs
// of 16 / 8 / 4 elements, so a short row leaves most warps idle (2 x 4194304 float16: 7 of 8,
// 0.07 of a read stream). logsumexp_cols_short_vec where every 16-byte vector of VS adjacent
// rows is aligned (LogsumexpProblem.column_vectors), on the smallest rung of 4, 8, 16 elements
// holding the row; logsumexp_cols_short, a thread a row, for every other layout.
// docs/logsumexp.md, "Dispatch".
#include "logsumexp/statistics.cuh"
#include "common/columns.cuh"

using namespace cufuse;
using namespace cufuse::lse_detail;

// A thread a row: its `length` elements (and weights) loaded at once.
template <typename T, bool Weighted, int Threads, int MaxLength>
__global__ void __launch_bounds__(Threads)
    logsumexp_cols_short(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ value, T* __restrict__ sign, int64 rows,
                         int64 length, int64 inner, int64 so, int64 si, int64 sl, int64 bo, int64 bi, int64 bl) {
    using A = accum_t<T>;
    const int64 r = static_cast<int64>(blockIdx.x) * Threads + threadIdx.x;
    if (r >= rows) return;
    const int64 o = inner == 1 ? r : r / inner, i = r - o * inner;
    const T* row_a = a + o * so + i * si;
    A x[MaxLength];
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) x[l] = l < length ? to_accum(row_a[l * sl]) : neg_infinity<A>();
    LseStats<A> st;
    if constexpr (Weighted) {
        const T* row_b = b + o * bo + i * bi;
        A w[MaxLength];
#pragma unroll
        for (int l = 0; l < MaxLength; ++l) w[l] = l < length ? to_accum(row_b[l * bl]) : A(0);
        st.add_weighted(x, w, static_cast<int>(length));
    } else {
        st.add(x, static_cast<int>(length));
    }
    store_result<Weighted>(st, value, sign, r);
}

// The `length` vectors from p at stride `stride` (16-byte aligned) as 128-bit values, the
// rung's others `padding` (a select element by element kept 16-bit elements a register each).
template <int MaxLength, typename T>
__device__ __forceinline__ void load_short_vectors(Vec16<T> (&v)[MaxLength], const T* p, int64 stride, int64 length,
                                                   const Vec16<T>& padding) {
#pragma unroll
    for (int l = 0; l < MaxLength; ++l)
        *reinterpret_cast<uint4*>(&v[l]) =
            l < length ? __ldg(reinterpret_cast<const uint4*>(p + l * stride)) : *reinterpret_cast<const uint4*>(&padding);
}

// A thread VS adjacent rows (8 float16 / bfloat16, 4 float32, 2 float64): `length` 16-byte
// loads in flight a thread, a warp's load of one reduced index 512 consecutive bytes, the VS
// values (and signs) stored as one vector. Needs the rows' vectors aligned (the host checks);
// value and sign are whole arrays of the host (aligned), row r a multiple of VS. Weights b
// load as vectors where the thread's are (unit stride between rows, aligned), else element
// by element (a broadcast b: stride 0). BlocksPerSM: the launch bound, capping the registers
// so that a short rung keeps more threads, and their loads, resident.
template <typename T, bool Weighted, int Threads, int MaxLength, int BlocksPerSM>
__global__ void __launch_bounds__(Threads, BlocksPerSM)
    logsumexp_cols_short_vec(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ value, T* __restrict__ sign,
                             int64 rows, int64 length, int64 inner, int64 so, int64 si, int64 sl, int64 bo, int64 bi, int64 bl) {
    using A = accum_t<T>;
    using V = Vec16<T>;
    constexpr int VS = V::size;
    const int64 r = (static_cast<int64>(blockIdx.x) * Threads + threadIdx.x) * VS;  // the first of the thread's rows
    if (r >= rows) return;
    const int64 o = inner == 1 ? r : r / inner, i = r - o * inner;
    V x[MaxLength], w[Weighted ? MaxLength : 1];
    load_short_vectors(x, a + o * so + i * si, sl, length, neg_inf_vector<T>());
    if constexpr (Weighted) {
        const T* row_b = b + o * bo + i * bi;
        const int64 b_step = inner == 1 ? bo : bi;  // between adjacent rows
        V zero;
#pragma unroll
        for (int j = 0; j < VS; ++j) zero.v[j] = from_accum<T>(A(0));
        if (b_step == 1 && bl % VS == 0 && aligned16(row_b)) {
            load_short_vectors(w, row_b, bl, length, zero);
        } else {
#pragma unroll
            for (int l = 0; l < MaxLength; ++l) w[l] = l < length ? load_strided_slot(row_b + l * bl, b_step, 0, 0, VS, zero.v[0]) : zero;
        }
    }
    A v[VS], sg[VS], m[VS];
    if constexpr (!Weighted) column_max<T, MaxLength>(x, m);
#pragma unroll
    for (int j = 0; j < VS; ++j) {
        A xs[MaxLength];
#pragma unroll
        for (int l = 0; l < MaxLength; ++l) xs[l] = to_accum(x[l].v[j]);
        LseStats<A> st;
        if constexpr (Weighted) {
            A ws[MaxLength];
#pragma unroll
            for (int l = 0; l < MaxLength; ++l) ws[l] = to_accum(w[l].v[j]);
            st.add_weighted(xs, ws, static_cast<int>(length));
        } else {
            st.add_under(xs, m[j], static_cast<int>(length));
        }
        row_result<Weighted>(st, sign != nullptr, v[j], sg[j]);
    }
    store_vec16(value + r, vector_from_accum<T>(v));
    if (sign != nullptr) store_vec16(sign + r, vector_from_accum<T>(sg));
}
