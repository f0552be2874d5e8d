// softmax_cols_short and softmax_cols_short_vec: reduced axes of at most MaxLength elements
// strided over a contiguous inner axis (axis=0 of a (6, 3000000) matrix, a short middle axis):
// a thread's columns held in registers, their `length` elements loaded at once (all in
// flight), reduced and written back -- one read, one write.
//
// Picked (ColsShortConfig, ColsShortVecConfig: cufuse/ops/softmax/cols.py) for column layouts
// of at most 16 rows: the two-read column kernels split such a column over 16 slices (most of
// them idle) and the column split needs a tile's rows. softmax_cols_short_vec where the
// 16-byte vectors of adjacent columns are aligned (cols_vectorizable), on the smallest rung of
// 4, 8, 16 rows holding the column (its elements take 4 registers a row); else, for 2- and
// 4-byte types and columns of up to 8 elements, softmax_cols_short_shifted (the vectors cut
// from aligned ones, rungs of 4 and 8 rows); softmax_cols_short, a thread a column, for every
// other layout (float64, 9 to 16 rows). docs/softmax.md, "Columns".
#include "softmax/columns.cuh"

// One column of `length` <= MaxLength elements (input at stride sl, output at stride inner),
// loaded at once into registers, normalised and stored.
template <typename T, bool Log, int MaxLength>
__device__ __forceinline__ void short_column(const T* in, T* out, int64 length, int64 inner, int64 sl) {
    using A = cufuse::accum_t<T>;
    A a[MaxLength];
    A m = cufuse::neg_infinity<A>();
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) {
        a[l] = l < length ? cufuse::to_accum(in[l * sl]) : cufuse::neg_infinity<A>();
        m = max_nan(m, a[l]);
    }
    // (All -inf: exp(-inf - -inf) is NaN, but the Normalizer makes such a column NaN anyway.)
    A s = 0;
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) s += exp_accum_ftz(a[l] - m);
    const Normalizer<A, Log> f(m, s);
#pragma unroll
    for (int l = 0; l < MaxLength; ++l)
        if (l < length) out[l * inner] = cufuse::from_accum<T>(f.template to<T>(a[l]));
}

// A thread a column; adjacent threads take adjacent columns, so a warp's accesses to one
// reduced index are consecutive elements.
template <typename T, bool Log, int Threads, int MaxLength>
__global__ void __launch_bounds__(Threads) softmax_cols_short(const T* __restrict__ x, T* __restrict__ y, int64 outer, int64 length,
                                                              int64 inner, int64 so, int64 si, int64 sl) {
    const int64 c = static_cast<int64>(blockIdx.x) * Threads + threadIdx.x;  // column (o, i), i fastest
    if (c >= outer * inner) return;
    const int64 o = c / inner, i = c - o * inner;
    short_column<T, Log, MaxLength>(x + o * so + i * si, y + o * length * inner + i, length, inner, sl);
}

// The VS columns of a thread's vectors v[0 .. length) (their maxima m) normalised in place,
// G columns at a time (G = 2 for 16-bit types: a pair, converted back in one instruction): only
// one group's float copies and exps are live at once, so the elements take 4 registers a row
// (converting all columns at once kept 128 floats for 16 bfloat16 rows). ExpOnce (softmax
// only): the group's exps of the sum are kept and scaled, one exp an element instead of two.
template <typename T, bool Log, bool ExpOnce, int MaxLength, typename A = cufuse::accum_t<T>>
__device__ __forceinline__ void normalize_short_columns(cufuse::Vec16<T> (&v)[MaxLength], const A (&m)[cufuse::Vec16<T>::size], int64 length) {
    constexpr int VS = cufuse::Vec16<T>::size, G = sizeof(T) == 2 ? 2 : 1;
#pragma unroll
    for (int j0 = 0; j0 < VS; j0 += G) {
        A s[G], e[ExpOnce ? MaxLength : 1][G];
#pragma unroll
        for (int g = 0; g < G; ++g) s[g] = 0;
        // The sum skips the rung's padding rows. (All -inf: exp(-inf - -inf) is NaN, but the
        // Normalizer makes such a column NaN anyway.)
#pragma unroll
        for (int l = 0; l < MaxLength; ++l)
            if (l < length)
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const A a = cufuse::to_accum(v[l].v[j0 + g]) - m[j0 + g];
                    const A term = ExpOnce && sizeof(T) != 2 ? exp_accum(a) : exp_accum_ftz(a);  // float and double keep subnormal outputs
                    if constexpr (ExpOnce) e[l][g] = term;
                    s[g] += term;
                }
        Normalizer<A, Log> f[G];
#pragma unroll
        for (int g = 0; g < G; ++g) f[g] = Normalizer<A, Log>(m[j0 + g], s[g]);
#pragma unroll
        for (int l = 0; l < MaxLength; ++l)
            if (l < length) {
                A r[G];
#pragma unroll
                for (int g = 0; g < G; ++g) r[g] = ExpOnce ? e[l][g] * f[g].k : f[g].template to<T>(cufuse::to_accum(v[l].v[j0 + g]));
                if constexpr (G == 2) reinterpret_cast<typename Packed2<T>::type*>(v[l].v)[j0 / 2] = Packed2<T>::from_floats(r[0], r[1]);
                else v[l].v[j0] = cufuse::from_accum<T>(r[0]);
            }
    }
}

// A thread a 16-byte vector of VS adjacent columns (8 float16 / bfloat16, 4 float32, 2
// float64): `length` vector loads in flight a thread, 16-byte stores, a warp's access to one
// reduced index 512 consecutive bytes. Needs si == 1 and inner, so, sl multiples of VS (the
// host checks). An x or y base off 16 bytes (a view) takes the thread's columns one by one
// as softmax_cols_short does (scalars in every vector slot held 172 registers, not 108).
// BlocksPerSM: the launch bound, which caps the registers so that a short rung keeps more
// threads, and their loads, resident. ExpOnce: normalize_short_columns.
template <typename T, bool Log, int Threads, int MaxLength, int BlocksPerSM, bool ExpOnce>
__global__ void __launch_bounds__(Threads, BlocksPerSM) softmax_cols_short_vec(const T* __restrict__ x, T* __restrict__ y, int64 outer,
                                                                  int64 length, int64 inner, int64 so, int64 si, int64 sl) {
    static_assert(!(ExpOnce && Log), "log_softmax stores x - m - log(s): no exp to keep");
    using A = cufuse::accum_t<T>;
    using V = cufuse::Vec16<T>;
    constexpr int VS = V::size;
    const int64 inner_vectors = inner / VS;
    const int64 c = static_cast<int64>(blockIdx.x) * Threads + threadIdx.x;  // vector (o, i / VS), i fastest
    if (c >= outer * inner_vectors) return;
    const int64 o = outer == 1 ? 0 : c / inner_vectors, i = (c - o * inner_vectors) * VS;
    const T* in = x + o * so + i;
    T* out = y + o * length * inner + i;
    if (!aligned16(x) || !aligned16(y)) {
#pragma unroll 1
        for (int j = 0; j < VS; ++j) short_column<T, Log, MaxLength>(in + j, out + j, length, inner, sl);
        return;
    }
    // Whole vectors as 128-bit values: a select of the padding element by element kept 16-bit
    // elements a register each (bfloat16: 148 registers at 16 rows, not 99).
    const V padding = neg_inf_vector<T>();
    V v[MaxLength];
#pragma unroll
    for (int l = 0; l < MaxLength; ++l)
        *reinterpret_cast<uint4*>(&v[l]) = l < length ? __ldg(reinterpret_cast<const uint4*>(in + l * sl)) : *reinterpret_cast<const uint4*>(&padding);
    A m[VS];
    column_max<T, MaxLength>(v, m);
    normalize_short_columns<T, Log, ExpOnce>(v, m, length);
#pragma unroll
    for (int l = 0; l < MaxLength; ++l)
        if (l < length) cufuse::store_vec16(out + l * inner, v[l]);
}

// A thread a 16-byte vector of VS adjacent columns, as softmax_cols_short_vec, whatever the
// alignment (inner, sl or so not multiples of VS, or a base off 16 bytes: axis=0 of (6, 3000001)).
// A warp takes 31 adjacent vectors and loads 32: row l of lane t's columns is cut from the
// aligned vector holding its first element and the next, lane t + 1's (a shuffle; lane 31 only
// loads), so each input vector is loaded once; lane t stores the aligned output vector that
// ends inside its columns: lane t - 1's last elements (a shuffle) and its own first ones. A lane
// whose previous lane is not its column neighbour (lane 0, the first vector of an outer index)
// stores its first elements one by one, one whose next lane is not stores its last ones; a
// lane whose next lane holds no neighbour loads its second vector itself; the last, partial
// vector of an outer index takes its columns one by one (short_column). 6 x 3000001 float16:
// 0.38 of the copy a thread a column, 0.55 staged through shared memory, 0.63 so (run S20-5);
// 16 rows lost to a thread a column (16 x 1000001 float16 0.47 against 0.65, float32 0.57
// against 0.83: the rung's registers left few threads resident).
template <typename T, bool Log, int Threads, int MaxLength, int BlocksPerSM, bool ExpOnce>
__global__ void __launch_bounds__(Threads, BlocksPerSM) softmax_cols_short_shifted(const T* __restrict__ x, T* __restrict__ y, int64 outer,
                                                                      int64 length, int64 inner, int64 so, int64 si, int64 sl) {
    static_assert(!(ExpOnce && Log), "log_softmax stores x - m - log(s): no exp to keep");
    using A = cufuse::accum_t<T>;
    using V = cufuse::Vec16<T>;
    constexpr int VS = V::size, Size = sizeof(T);
    const int64 inner_vectors = (inner + VS - 1) / VS, whole_vectors = inner / VS, vectors = outer * inner_vectors;
    const int lane = threadIdx.x & 31;
    const int64 c = (static_cast<int64>(blockIdx.x) * Threads + threadIdx.x) / 32 * 31 + lane;  // vector (o, k), k fastest
    const bool loads = c < vectors, computes = loads && lane < 31;
    const int64 o = loads ? c / inner_vectors : 0, k = loads ? c - o * inner_vectors : 0;
    const T* in = x + o * so + k * VS;
    T* out = y + o * length * inner + k * VS;
    const bool whole = computes && k < whole_vectors;
    // The neighbours in the warp: lane t + 1 holds the vector after (its loads are this lane's
    // second), lane t - 1 the one before (it stores the output vector they share).
    const bool next_neighbour = lane < 30 && k + 1 < inner_vectors && c + 1 < vectors;
    const bool after_neighbour = whole && lane > 0 && k > 0;
    const bool before_neighbour = next_neighbour && k + 1 < whole_vectors;
    if (computes && !whole) {
#pragma unroll 1
        for (int j = 0; j < inner - k * VS; ++j) short_column<T, Log, MaxLength>(in + j, out + j, length, inner, sl);
    }
    // Row l's byte offsets past a 16-byte boundary, from row 0's and a row's step (no pointer a
    // row stays live): the input's and the output's.
    const int in_shift = static_cast<int>(reinterpret_cast<unsigned long long>(in) & 15), in_step = static_cast<int>((sl * Size) & 15);
    const int out_shift = static_cast<int>(reinterpret_cast<unsigned long long>(out) & 15), out_step = static_cast<int>((inner * Size) & 15);
    const uint4* in_aligned = reinterpret_cast<const uint4*>(in - in_shift / Size);
    V v[MaxLength];
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) {
        const int64 row = (l * sl * Size + in_shift) >> 4;  // 16-byte vectors from in_aligned
        *reinterpret_cast<uint4*>(&v[l]) = loads && l < length ? __ldg(in_aligned + row) : make_uint4(0, 0, 0, 0);
    }
    const V padding = neg_inf_vector<T>();
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) {
        const uint4 lo = *reinterpret_cast<const uint4*>(&v[l]);
        uint4 hi;
        hi.x = __shfl_down_sync(0xffffffffu, lo.x, 1);
        hi.y = __shfl_down_sync(0xffffffffu, lo.y, 1);
        hi.z = __shfl_down_sync(0xffffffffu, lo.z, 1);
        hi.w = __shfl_down_sync(0xffffffffu, lo.w, 1);
        const int shift = (in_shift + l * in_step) & 15;
        if (whole && l < length && shift != 0 && !next_neighbour) hi = __ldg(in_aligned + ((l * sl * Size + in_shift) >> 4) + 1);
        *reinterpret_cast<uint4*>(&v[l]) = whole && l < length ? (shift == 0 ? lo : cufuse::funnel_bytes16(lo, hi, shift))
                                                                : *reinterpret_cast<const uint4*>(&padding);
    }
    A m[VS];
    column_max<T, MaxLength>(v, m);
    normalize_short_columns<T, Log, ExpOnce>(v, m, length);
#pragma unroll
    for (int l = 0; l < MaxLength; ++l) {
        if (l >= length) break;  // uniform: every thread has the same length
        const uint4 mine = *reinterpret_cast<const uint4*>(&v[l]);
        uint4 previous;
        previous.x = __shfl_up_sync(0xffffffffu, mine.x, 1);
        previous.y = __shfl_up_sync(0xffffffffu, mine.y, 1);
        previous.z = __shfl_up_sync(0xffffffffu, mine.z, 1);
        previous.w = __shfl_up_sync(0xffffffffu, mine.w, 1);
        if (!whole) continue;
        T* q = out + l * inner;
        const int head = ((out_shift + l * out_step) & 15) / Size;
        if (head == 0) {
            cufuse::store_vec16(q, v[l]);
            continue;
        }
        // The aligned vector at q - head: the previous lane's last `head` elements, then this
        // thread's first VS - head.
        if (after_neighbour) {
            *reinterpret_cast<uint4*>(q - head) = cufuse::funnel_bytes16(previous, mine, (VS - head) * Size);
        } else {
#pragma unroll
            for (int j = 0; j < VS; ++j)
                if (j < VS - head) q[j] = v[l].v[j];
        }
        if (!before_neighbour) {
#pragma unroll
            for (int j = 0; j < VS; ++j)
                if (j >= VS - head) q[j] = v[l].v[j];
        }
    }
}
