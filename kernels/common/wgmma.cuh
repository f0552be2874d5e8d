// Hopper (sm_90a) warpgroup-MMA helpers: shared-memory matrix descriptors for 128-byte
// swizzled tiles, the wgmma fence / commit / wait wrappers and the async-proxy fence.
// Used by the GEMM and attention kernels; layouts follow the PTX ISA's "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout" sections. The instructions themselves
// (wgmma.mma_async.*) exist only on sm_90a; callers guard their bodies accordingly.
#pragma once
#include "common/mma.cuh"

namespace cufuse {

// Shared-memory matrix descriptor of a K-major tile whose rows are 128 bytes, 128-byte
// swizzle: start address >> 4 (bits 0-13), leading byte offset unused by swizzled K-major
// layouts (1, bits 16-29), stride byte offset 1024 >> 4 = 8 rows of 128 bytes between
// core-matrix groups (bits 32-45), layout type 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ unsigned long long sw128_kmajor_desc(const void* tile) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

// N-major B tile [BK][BN] as 128-byte swizzle atoms of 8 k rows x 64 n (1024 bytes each):
// atom (n / 64, k / 8) at element (n / 64) * BK * 64 + (k / 8) * 512, row k % 8 of the atom
// 64 elements further per row, its 16-byte chunk c at chunk c ^ (k % 8).
enum : int { WGMMA_ATOM_N = 64 };  // n per 128-byte swizzle atom row (16-bit types)
template <int BK>
__device__ __forceinline__ int nmajor_atom_offset(int k, int n) {  // element offset, n a multiple of 8
    const int r = k & 7;
    return (n / WGMMA_ATOM_N) * BK * WGMMA_ATOM_N + (k >> 3) * 8 * WGMMA_ATOM_N + r * WGMMA_ATOM_N +
           ((((n % WGMMA_ATOM_N) >> 3) ^ r) << 3);
}

// Descriptor of that layout (the MN-major canonical form ((8 chunks, n atoms), (8 rows, k groups))):
// leading byte offset = bytes between n atoms (BK * 128, bits 16-29), stride byte offset =
// bytes between groups of 8 k rows (1024, bits 32-45), 128-byte swizzle (bits 62-63).
template <int BK>
__device__ __forceinline__ unsigned long long sw128_nmajor_desc(const void* tile) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(BK * 128 >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// cp.async of one N-major weight tile (w + k * ldw + n; N % 8 == 0, so a chunk is all in or
// all out) by THREADS threads (`thread`: this one's index among them): consecutive threads
// take consecutive 16-byte chunks of a k row (coalesced).
template <typename T, int BN, int BK, int THREADS>
__device__ __forceinline__ void wgmma_load_b_nmajor(T* sb, const T* __restrict__ w, int64 n0, int64 k0, int64 N,
                                                    int64 k_end, int64 ldw, int thread) {
    constexpr int row_chunks = BN / 8;
    static_assert(BN % WGMMA_ATOM_N == 0 && BK % 8 == 0 && BK * row_chunks % THREADS == 0, "B tile geometry");
#pragma unroll
    for (int i = 0; i < BK * row_chunks / THREADS; ++i) {
        const int c = thread + i * THREADS;
        const int k = c / row_chunks, n = (c % row_chunks) * 8;
        const bool ok = k0 + k < k_end && n0 + n < N;
        cp_async_16(sb + nmajor_atom_offset<BK>(k, n), ok ? w + (k0 + k) * ldw + n0 + n : w, ok);
    }
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// Shared memory written by the generic proxy (cp.async) becomes visible to wgmma's async proxy.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Named barrier `id` of `threads` threads (a multiple of 32): sync waits for all of them,
// arrive counts this warp and goes on (producer / consumer hand-offs between warpgroups).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Named barriers (0 is __syncthreads): 1 + wg joins the 128 threads of warpgroup wg (up to
// 4 warpgroups).
__device__ __forceinline__ void warpgroup_barrier(int wg) { named_barrier_sync(1 + wg, 128); }
// Warp specialisation: a warpgroup gives up (dec) or takes (inc) registers, REGS a thread
// (a multiple of 8, 24..256); the kernel needs a register cap at entry (__launch_bounds__ with
// a minimum of 1 block), and every thread of the warpgroup executes it.
template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
// Keeps the compiler from moving accumulator reads or writes across wgmma issue and wait.
__device__ __forceinline__ void pin(float& v) { asm volatile("" : "+f"(v)::"memory"); }

}  // namespace cufuse

namespace cufuse {

// K-major tile of ROWS rows and any multiple of 64 columns (16-bit types) as [cols / 64]
// column atoms of [ROWS][64] elements, each row 128 bytes with its 16-byte chunk c at
// c ^ (row % 8): every atom is what sw128_kmajor_desc describes (SBO 1024 = 8 rows).
template <int ROWS>
__device__ __forceinline__ int kmajor_atom_offset(int row, int col) {
    return (col / WGMMA_ATOM_N) * ROWS * WGMMA_ATOM_N + row * WGMMA_ATOM_N +
           ((((col % WGMMA_ATOM_N) >> 3) ^ (row & 7)) << 3) + (col & 7);
}
// Descriptor advance (16-byte units) to k16 block kk of that layout: 32 bytes along the
// swizzled rows inside an atom, ROWS x 128 bytes to the next column atom.
template <int ROWS>
__device__ __forceinline__ constexpr unsigned kmajor_k16_step(int kk) {
    return (kk / 4) * (ROWS * 128 / 16) + (kk % 4) * 2;
}

// ---------------------------------------------------------------------------------------
// wgmma m64nNk16, float32 accumulators, N = 8, 16, 64, 96, 128 or 256 (attention: S = Q K^T with
// both operands in shared memory, `ss`; O += P V with P in registers, `rs`; the GEMMs: `ss`).
// d is the warpgroup accumulator fragment: N / 2 floats per thread, per 16-row warp slice the
// mma.sync m16n8 layout along N. `accumulate` 0 ignores d's old contents (D = A B). TransB 1
// reads an N-major B, TransA 1 an M-major A (transposed; shared-memory A of 16-bit types). The
// register A operand is 4 x 32 bits per thread: mma.sync m16n8k16's A layout per warp slice.
template <int N, typename T> struct Wgmma;

// Accumulator operand lists (N / 2 floats) and their PTX references, nested by size.
#define CUFUSE_WGMMA_D4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define CUFUSE_WGMMA_D8 CUFUSE_WGMMA_D4, "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define CUFUSE_WGMMA_D32 CUFUSE_WGMMA_D8, \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define CUFUSE_WGMMA_D48 CUFUSE_WGMMA_D32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define CUFUSE_WGMMA_D64 CUFUSE_WGMMA_D32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define CUFUSE_WGMMA_D128 CUFUSE_WGMMA_D64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define CUFUSE_WGMMA_R4 "%0,%1,%2,%3"
#define CUFUSE_WGMMA_R8 CUFUSE_WGMMA_R4 ",%4,%5,%6,%7"
#define CUFUSE_WGMMA_R32 CUFUSE_WGMMA_R8 "," \
    "%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define CUFUSE_WGMMA_R48 CUFUSE_WGMMA_R32 "," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define CUFUSE_WGMMA_R64 CUFUSE_WGMMA_R32 "," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define CUFUSE_WGMMA_R128 CUFUSE_WGMMA_R64 "," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"

// Wgmma<N, CTYPE>. O0..O6 are the PTX operand numbers after the N / 2 accumulators (N / 2
// .. N / 2 + 6): ss reads desc_a, desc_b, accumulate, TransB, TransA from O0..O4; rs the A
// registers from O0..O3, then desc_b, accumulate, TransB from O4..O6.
#define CUFUSE_WGMMA(N, CTYPE, PTX_TYPE, DLIST, RLIST, O0, O1, O2, O3, O4, O5, O6)                               \
    template <> struct Wgmma<N, CTYPE> {                                                                         \
        template <int TransB, int TransA = 0>                                                                    \
        static __device__ __forceinline__ void ss(float (&d)[N / 2], unsigned long long desc_a,                  \
                                                  unsigned long long desc_b, int accumulate) {                   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #O2 ", 0;\n"                                      \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " {" RLIST "}, " \
                         "%" #O0 ", %" #O1 ", p, 1, 1, %" #O4 ", %" #O3 ";\n}\n"                                \
                         : DLIST                                                                                 \
                         : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransB), "n"(TransA));               \
        }                                                                                                        \
        template <int TransB>                                                                                    \
        static __device__ __forceinline__ void rs(float (&d)[N / 2], const unsigned (&a)[4],                     \
                                                  unsigned long long desc_b, int accumulate) {                   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #O5 ", 0;\n"                                      \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " {" RLIST "}, " \
                         "{%" #O0 ",%" #O1 ",%" #O2 ",%" #O3 "}, %" #O4 ", p, 1, 1, %" #O6 ";\n}\n"              \
                         : DLIST                                                                                 \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate),           \
                           "n"(TransB));                                                                         \
        }                                                                                                        \
    };
CUFUSE_WGMMA(8, __half, "f16", CUFUSE_WGMMA_D4, CUFUSE_WGMMA_R4, 4, 5, 6, 7, 8, 9, 10)
CUFUSE_WGMMA(8, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D4, CUFUSE_WGMMA_R4, 4, 5, 6, 7, 8, 9, 10)
CUFUSE_WGMMA(16, __half, "f16", CUFUSE_WGMMA_D8, CUFUSE_WGMMA_R8, 8, 9, 10, 11, 12, 13, 14)
CUFUSE_WGMMA(16, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D8, CUFUSE_WGMMA_R8, 8, 9, 10, 11, 12, 13, 14)
CUFUSE_WGMMA(64, __half, "f16", CUFUSE_WGMMA_D32, CUFUSE_WGMMA_R32, 32, 33, 34, 35, 36, 37, 38)
CUFUSE_WGMMA(64, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D32, CUFUSE_WGMMA_R32, 32, 33, 34, 35, 36, 37, 38)
CUFUSE_WGMMA(96, __half, "f16", CUFUSE_WGMMA_D48, CUFUSE_WGMMA_R48, 48, 49, 50, 51, 52, 53, 54)
CUFUSE_WGMMA(96, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D48, CUFUSE_WGMMA_R48, 48, 49, 50, 51, 52, 53, 54)
CUFUSE_WGMMA(128, __half, "f16", CUFUSE_WGMMA_D64, CUFUSE_WGMMA_R64, 64, 65, 66, 67, 68, 69, 70)
CUFUSE_WGMMA(128, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D64, CUFUSE_WGMMA_R64, 64, 65, 66, 67, 68, 69, 70)
CUFUSE_WGMMA(256, __half, "f16", CUFUSE_WGMMA_D128, CUFUSE_WGMMA_R128, 128, 129, 130, 131, 132, 133, 134)
CUFUSE_WGMMA(256, __nv_bfloat16, "bf16", CUFUSE_WGMMA_D128, CUFUSE_WGMMA_R128, 128, 129, 130, 131, 132, 133, 134)
#undef CUFUSE_WGMMA
#undef CUFUSE_WGMMA_D4
#undef CUFUSE_WGMMA_D8
#undef CUFUSE_WGMMA_D32
#undef CUFUSE_WGMMA_D48
#undef CUFUSE_WGMMA_D64
#undef CUFUSE_WGMMA_D128
#undef CUFUSE_WGMMA_R4
#undef CUFUSE_WGMMA_R8
#undef CUFUSE_WGMMA_R32
#undef CUFUSE_WGMMA_R48
#undef CUFUSE_WGMMA_R64
#undef CUFUSE_WGMMA_R128

}  // namespace cufuse

namespace cufuse {
// pin for 32-bit packed operands (the register A fragments of wgmma).
__device__ __forceinline__ void pin(unsigned& v) { asm volatile("" : "+r"(v)::"memory"); }
}  // namespace cufuse
