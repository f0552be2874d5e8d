// attention_fwd_wgmma / attention_fwd_wgmma_tma: Hopper (sm_90a) prefill on warpgroup MMA,
// float16 / bfloat16, tile head dims 64, 96, 128 and 256. Both run the same
// consumer loop (consume_item); they differ in how K and V reach shared memory (the "feed"):
// every thread's cp.async ring with block barriers (CpAsyncFeed), or a producer warpgroup's
// TMA loads into an mbarrier ring, with setmaxnreg moving its registers to the consumers
// (TmaFeed, FA3's warp specialisation).
//
// Picked (cufuse/ops/attention/select.py, WGMMA_PREFILL) on compute capability 9.0 for 16-bit
// prefill (Nq > 16), any D and Dv up to 256 on the smallest tile holding them, q, k and v with
// unit column stride and 16-byte aligned rows, a positive scale (or a softcap), and a grid of at
// least one wave of blocks or one whose wave model keeps one key split (smaller grids split the
// keys on attention_fwd_mma). The tile goes by the keys a query row sees (docs/attention.md).
// attention_varlen_wgmma_tma runs the TMA kernel's block on ragged packed batches (select.py
// choose_varlen: compute capability 9.0, 16-bit, operands a tensor map takes), its work items
// found on the device from cu_seqlens. The TMA kernel also takes grouped-query decode with at
// least a warpgroup of packed rows (G x Nq of one KV head, row r the query r % Nq), its keys
// split over blocks whose float32 partials attention_merge combines (select.py
// WGMMA_PACKED_MIN_ROWS).
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "common/attention_layout.cuh"

namespace cufuse {
namespace attention {

// cp.async stream of consecutive ROWS x HD tiles of one operand (unit column stride, 16-byte
// aligned rows) into a swizzled shared layout `place` that advances 64 elements per row across
// steps of 8 rows (kmajor_atom_offset and nmajor_atom_offset both do). THREADS is a multiple of
// the HD / 8 chunks of a row, so a thread keeps one column chunk and rows r0, r0 + kRowStep, ...
// of every tile: the shared offset, source row and bounds are set once per work item, and a tile
// costs a pointer step, one compare and one cp.async per chunk (load_rows_16b spends ~40
// instructions per chunk on index, swizzle and 64-bit address math).
template <typename T, int ROWS, int HD, int THREADS>
struct TileStream {
    static constexpr int kChunks = HD / 8, kRowStep = THREADS / kChunks;
    static_assert(THREADS % kChunks == 0 && kRowStep % 8 == 0, "one column and swizzle phase per thread");
    const T* src;        // this thread's first chunk of the next tile
    const T* base;       // the operand's row 0: address of the zero-filled (unread) chunks
    int rows_left;       // operand rows from src's row on; 0 when the column is at or past cols
    int tile_rows_left;  // ROWS - r0: this thread's rows of a tile are those below it
    int smem_off;        // element offset of this thread's first chunk in a tile

    template <typename Place>
    __device__ __forceinline__ void start(const T* g, int64 row_stride, int cols, int row_end, Place place) {
        const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks * 8;
        base = g;
        src = g + r0 * row_stride + c;
        rows_left = c < cols ? row_end - r0 : 0;
        tile_rows_left = ROWS - r0;
        smem_off = place(r0, c);
    }
    // The next tile into the ROWS x HD slot `tile`; rows past the operand's end are zero.
    __device__ __forceinline__ void load_next(T* tile, int64 row_stride) {
        const T* row = src;
#pragma unroll
        for (int i = 0; i * kRowStep < ROWS; ++i) {
            if (ROWS % kRowStep == 0 || i * kRowStep < tile_rows_left) {
                const bool ok = i * kRowStep < rows_left;
                cp_async_16(tile + smem_off + i * kRowStep * WGMMA_ATOM_N, ok ? row : base, ok);
            }
            row += kRowStep * row_stride;
        }
        src += ROWS * row_stride;
        rows_left -= ROWS;
    }
};

// A warpgroup's staged 64 x HD tile (kmajor_atom_offset<64> layout) to `rows` rows of `cols`
// elements of dst, `pitch` elements apart (cols and pitch % 8 == 0, dst 16-byte aligned), 16 bytes
// per thread and step. As in TileStream each of the 128 threads keeps one column chunk and rows
// kRowStep apart, so a chunk costs a shared load, a compare and a store (copy_rows: a run-time
// division); where kRowStep is a multiple of 8 (HD <= 128) the swizzle phase is the same on every
// row and the shared offset a constant step.
template <typename T, int HD>
__device__ __forceinline__ void store_staged_rows(T* dst, const T* stage, int rows, int cols, int64 pitch, int tid) {
    constexpr int kChunks = HD / 8, kRowStep = 128 / kChunks;
    const int r0 = tid / kChunks, c = tid % kChunks * 8;
    if (c >= cols) return;
    dst += r0 * pitch + c;
#pragma unroll
    for (int i = 0; i * kRowStep < 64; ++i)
        if (r0 + i * kRowStep < rows)
            *reinterpret_cast<uint4*>(dst + i * kRowStep * pitch) =
                *reinterpret_cast<const uint4*>(stage + kmajor_atom_offset<64>(r0 + i * kRowStep, c));
}

// desc + step for a start-address step (16-byte units) of a wgmma descriptor: a 32-bit add of
// the low word, exact because the low word (address >> 4 and the leading byte offset) stays far
// below 2^32, and one instruction instead of a 64-bit add chain per wgmma.
__device__ __forceinline__ unsigned long long desc_add(unsigned long long desc, unsigned step) {
    unsigned lo, hi;
    asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(desc));
    unsigned long long sum;
    asm("mov.b64 %0, {%1, %2};" : "=l"(sum) : "r"(lo + step), "r"(hi));
    return sum;
}

// Columns a row takes in shared memory: whole 64-column swizzle atoms (HD 96 leaves half of
// its second atom unused; its MMAs and copies stop at HD).
template <int HD>
constexpr int wgmma_row_elems() {
    return (HD + WGMMA_ATOM_N - 1) / WGMMA_ATOM_N * WGMMA_ATOM_N;
}

// One work item: BLOCK_M query rows of one batch item (attention) or of one (sequence, query
// head) (attention_varlen), with what the feeds and the consumer loop need to find its operands.
struct WorkItem {
    int m0;  // first query row, counted within the item's nq rows
    int nq, nk;  // the item's query rows and keys (a sequence's lengths in attention_varlen)
    KeyBand band;  // the keys query row i of the item sees
    int64 batch;  // the sink's item: the flat batch index, or the query head
    int64 q_off, k_off, v_off;  // element offsets of the batch item's q, k, v (cp.async feed)
    int q_row, kv_row;  // TMA row coordinates of the item's query row 0 and key 0
    int q_slab, k_slab, v_slab;  // TMA third coordinates of q, k, v
    int64 out_row;  // out / lse row of query row r: out_row + r * out_step (rows of dv elements)
    int out_step;
    int period;  // row r holds query r % period (packed query heads: G x Nq rows, period Nq; else kUnpacked)
    int split;  // the item's key split (attention with splits > 1: partial outputs)
    int key_begin, key_end, n_tiles;  // keys the block visits: its first row's window start to its last's end
};

constexpr int kUnpacked = 1 << 30;  // the period of rows that are their queries

// The block's keys: split `split` (keys_per_split of them, counted from its first query's
// window start; every key with one split) of those its rows see.
template <int BLOCK_M, int BN>
__device__ __forceinline__ void visit_keys(WorkItem& w, int keys_per_split) {
    const int2 queries = query_range(w.m0, max(min(w.m0 + BLOCK_M, w.nq), w.m0 + 1), w.period);
    w.key_begin = w.band.first_key(queries.x) + w.split * keys_per_split;
    w.key_end = min(w.band.key_end(queries.y, w.nk), w.key_begin + keys_per_split);
    w.n_tiles = w.key_end > w.key_begin ? (w.key_end - w.key_begin + BN - 1) / BN : 0;
}

// attention's items: (query tile, split, batch) with the query tile fastest (blocks running at
// once share K/V in L2); causal runs the longest tiles first. `period`: the queries a packed
// group of rows (kUnpacked where rows are queries).
template <int BLOCK_M, int BN>
__device__ __forceinline__ WorkItem work_item(int item, int q_tiles, bool causal, int nq, int nk, const KeyBand& band,
                                              const BatchLayout& layout, int splits = 1, int keys_per_split = 0,
                                              int period = kUnpacked) {
    WorkItem w;
    const int rank = item % q_tiles;
    w.split = item / q_tiles % splits;
    w.batch = item / q_tiles / splits;
    w.period = period;
    const int q_tile = causal ? q_tiles - 1 - rank : rank;
    w.m0 = q_tile * BLOCK_M;
    w.nq = nq;
    w.nk = nk;
    w.band = band;
    layout.offsets(w.batch, w.q_off, w.k_off, w.v_off);
    w.q_row = w.kv_row = 0;
    w.out_row = w.batch * nq;
    w.out_step = 1;
    visit_keys<BLOCK_M, BN>(w, splits > 1 ? keys_per_split : nk);
    return w;
}

// attention_varlen's tiles: sequence b owns virtual query tiles [f(b), f(b) + ceil(len_q(b) /
// BLOCK_M)) with f(b) = floor(cu_q[b] / BLOCK_M) + b, strictly increasing in b, so the ranges
// never overlap and all lie below floor(Tq / BLOCK_M) + B: the grid comes from the shapes alone
// (cufuse/ops/attention/varlen_wgmma.py sequence_of_tile is this mapping in Python).
// Offsets are clamped to the token counts, so that contract violations never read or write
// outside q, k, v and out.
struct VarlenSequences {
    const int *cu_q, *cu_k;
    int64 cu_q_stride, cu_k_stride;
    int batch, tq, tk;

    __device__ __forceinline__ int q_start(int b) const { return min(max(__ldg(cu_q + b * cu_q_stride), 0), tq); }
    // The sequence b whose tiles hold `tile`: the last b with f(b) <= tile (b = 0 if none). The warp
    // tests 32 candidates a round (a ballot over the prefix where f <= tile), so B <= 1024 takes two
    // dependent loads where a binary search takes log2 B. Every lane of the warp calls it.
    template <int BLOCK_M>
    __device__ __forceinline__ int sequence_of(int tile) const {
        const int lane = threadIdx.x % 32;
        int lo = 0, n = batch;
        while (n > 1) {
            const int step = (n + 31) / 32, c = lo + lane * step;
            const bool below = lane * step < n && q_start(c) / BLOCK_M + c <= tile;
            const int skip = max(__popc(__ballot_sync(0xffffffffu, below)) - 1, 0) * step;
            lo += skip;
            n = min(step, n - skip);
        }
        return lo;
    }
};

// The item of virtual query tile `tile` of query head `head` (KV head head / group); false where
// the tile lies past its sequence's tiles (or B is 0). The band of query i of a sequence of nq
// queries and nk keys: [p - left, p + right] at p = i + nk - nq (left, right -1: unlimited;
// causal folded into right by the host). Causal runs a sequence's longest tiles first.
template <int BLOCK_M, int BN>
__device__ __forceinline__ bool varlen_item(WorkItem& w, const VarlenSequences& seqs, int tile, int head, int group,
                                            int heads_q, bool causal, int left, int right) {
    if (seqs.batch <= 0) return false;
    const int b = seqs.sequence_of<BLOCK_M>(tile);
    const int q_begin = seqs.q_start(b), q_end = max(seqs.q_start(b + 1), q_begin);
    const int k_begin = min(max(__ldg(seqs.cu_k + b * seqs.cu_k_stride), 0), seqs.tk);
    const int k_end = min(max(__ldg(seqs.cu_k + (b + 1) * seqs.cu_k_stride), k_begin), seqs.tk);
    const int rank = tile - (q_begin / BLOCK_M + b), q_tiles = (q_end - q_begin + BLOCK_M - 1) / BLOCK_M;
    if (rank < 0 || rank >= q_tiles) return false;
    w.nq = q_end - q_begin;
    w.nk = k_end - k_begin;
    w.m0 = (causal ? q_tiles - 1 - rank : rank) * BLOCK_M;
    const int shift = w.nk - w.nq;
    w.band = KeyBand{left < 0 ? -kUnlimited : shift - left, right < 0 ? kUnlimited : shift + right};
    w.batch = head;
    w.q_row = q_begin;
    w.kv_row = k_begin;
    w.q_slab = head;
    w.k_slab = w.v_slab = head / group;
    w.out_row = static_cast<int64>(q_begin) * heads_q + head;
    w.out_step = heads_q;
    w.period = kUnpacked;
    w.split = 0;
    visit_keys<BLOCK_M, BN>(w, w.nk);
    return true;
}

// The feeds: how the consumer loop gets its tiles. acquire_k(t) / acquire_v(t): K / V tile t
// is in its stage; release_k / release_v: this warp is done reading it; skip(t): tile t
// (whose K was acquired) is not computed by this warpgroup; drain(): after the last tile, before
// the last P V; wait_q(): Q is in shared memory.

// Every thread streams Q, K and V with cp.async into a STAGES-deep ring; group g carries K tile
// g and V tile g - 1 (the loop's P V runs one tile behind), and a block barrier per tile both
// publishes a group and frees the stage the next group refills.
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES>
struct CpAsyncFeed {
    static constexpr int kThreads = WARPGROUPS * 128, kRowElems = wgmma_row_elems<HD>(), kStageElems = BN * kRowElems;
    T *k_s, *v_s;
    int n_tiles;
    int64 k_row, v_row;
    TileStream<T, BN, HD, kThreads> k_stream, v_stream;  // the item's K tiles 0, 1, ... and V tiles 0, 1, ...

    __device__ __forceinline__ void load_kv(int g) {
        if (g < n_tiles) k_stream.load_next(k_s + g % STAGES * kStageElems, k_row);
        if (g >= 1 && g <= n_tiles) v_stream.load_next(v_s + (g - 1) % STAGES * kStageElems, v_row);
    }
    // Q (the warpgroups' 64-row slices, joining group 0), then the ring's first STAGES - 1 groups.
    __device__ __forceinline__ void begin(const WorkItem& w, const T* q, const T* k, const T* v, T* q_s, int d, int dv,
                                          int64 q_row) {
        n_tiles = w.n_tiles;
        TileStream<T, 64, HD, kThreads> q_stream;
        q_stream.start(q + w.q_off + w.m0 * q_row, q_row, d, w.nq - w.m0,
                       [](int r, int c) { return kmajor_atom_offset<64>(r, c); });
#pragma unroll
        for (int slice = 0; slice < WARPGROUPS; ++slice) q_stream.load_next(q_s + slice * 64 * kRowElems, q_row);
        k_stream.start(k + w.k_off + w.key_begin * k_row, k_row, d, w.nk - w.key_begin,
                       [](int r, int c) { return kmajor_atom_offset<BN>(r, c); });
        v_stream.start(v + w.v_off + w.key_begin * v_row, v_row, dv, w.nk - w.key_begin,
                       [](int r, int c) { return nmajor_atom_offset<BN>(r, c); });
#pragma unroll
        for (int g = 0; g < STAGES - 1; ++g) {
            load_kv(g);
            cp_async_commit();  // empty groups keep the wait counts uniform
        }
    }
    __device__ __forceinline__ void wait_q() {}  // Q joined group 0, which acquire_k(0) waits for
    // Group t landed for all threads and every wgmma of step t - 1 is done: its stages refill.
    __device__ __forceinline__ void acquire_k(int t) {
        cp_async_wait<STAGES - 2>();
        fence_proxy_async_shared();
        __syncthreads();
        load_kv(t + STAGES - 1);
        cp_async_commit();
    }
    __device__ __forceinline__ void acquire_v(int) {}  // V tile t - 1 came with group t
    __device__ __forceinline__ void release_k(int) {}
    __device__ __forceinline__ void release_v(int) {}
    __device__ __forceinline__ void skip(int) {}
    __device__ __forceinline__ void drain() {  // group n_tiles: the last V tile; every S done
        cp_async_wait<STAGES - 2>();
        fence_proxy_async_shared();
        __syncthreads();
    }
    __device__ __forceinline__ void end() { cp_async_wait<0>(); }  // no copy may outlive the block
};

// The consumers' side of the producer warpgroup's mbarrier ring: K and V tile t uses stage
// t % STAGES in round t / STAGES; "full" completes when the stage's bytes landed, "empty" when
// every consumer warp released it (lane 0 arrives). A warp releases every tile, computed or
// skipped, after it landed, so the producer never refills a stage in flight. Q lands once, in
// q_full's phase 0.
template <int STAGES>
struct TmaFeed {
    unsigned long long *q_full, *k_full, *v_full, *k_empty, *v_empty;
    bool lane0;

    __device__ __forceinline__ void wait_q() { mbarrier_wait(q_full, 0); }
    __device__ __forceinline__ void acquire_k(int t) { mbarrier_wait(k_full + t % STAGES, (t / STAGES) & 1); }
    __device__ __forceinline__ void acquire_v(int t) { mbarrier_wait(v_full + t % STAGES, (t / STAGES) & 1); }
    __device__ __forceinline__ void release_k(int t) {
        if (lane0) mbarrier_arrive(k_empty + t % STAGES);
    }
    __device__ __forceinline__ void release_v(int t) {
        if (lane0) mbarrier_arrive(v_empty + t % STAGES);
    }
    __device__ __forceinline__ void skip(int t) {
        acquire_v(t);
        release_k(t);
        release_v(t);
    }
    __device__ __forceinline__ void drain() {}
    __device__ __forceinline__ void end() {}
};

// A split item's outputs (attention_merge combines them): O / l in float32 and the lse, row
// split * rows + the item's row of out; o null where the call has one split.
struct Partials {
    float *o, *lse;
    int64 rows;
};

// ---------------------------------------------------------------------------------------
// The consumer loop of one work item: WARPGROUPS x 64 query rows, 64 per warpgroup (threads
// 0 .. WARPGROUPS x 128 - 1). S = Q K^T reads Q and K from shared memory, both K-major with
// the 128-byte swizzle ([HD / 64] column atoms of [rows][64]); O += P V takes P from registers
// (the S accumulator packed to 16-bit pairs is wgmma's A fragment) and V N-major (atoms of 8
// keys x 64 columns, read transposed). Loop step j issues S(j) = Q K_j^T and O += P(j-1) V(j-1)
// back to back, and the softmax of S(j) runs while P V is still on the tensor cores (FA3's
// intra-warpgroup overlap).
// The block's keys run from its first row's window start to its last row's window end
// (KeyBand: causal frontier, sliding window), so tiles that every row's window hides are
// never loaded. With WG_RANGES each warpgroup computes only the tiles of its own rows' range
// (rows past nq: none) while the block keeps streaming the tiles the others need, so the fully
// masked tiles outside a warpgroup's band and the rows of a ragged last query tile cost no
// MMAs and no exps (it still takes part in every barrier).
// PINGPONG (0, or the PINGPONG consumer warpgroups): the warpgroups take turns issuing a tile's
// wgmmas, in order, through named barriers (FA3's ping-pong), so one warpgroup's softmax runs
// while the next one's GEMMs hold the tensor cores; every warpgroup takes its turn on every
// tile of the block, computed or skipped, so the turns stay in step.
// Preconditions (checked by the host): d and dv multiples of 8, at most HD; scale_log2 > 0
// unless softcapped (the row max is taken on the raw scores and scaled once: one FFMA per
// score). A split item (partials.o set) writes float32 O / l and the lse for attention_merge;
// packed rows hold query row % period (the item's keys, masks and ranges go by query).
template <typename T, int HD, int BN, int STAGES, bool WG_RANGES, int PINGPONG, typename Feed>
__device__ __forceinline__ void consume_item(Feed& feed, const WorkItem& cur, T* q_s, const T* k_s, const T* v_s,
                                             T* out, float* lse, const Partials& partials, int dv, float scale_log2,
                                             int flags, float softcap_log2, const float* sinks, int sink_heads) {
    constexpr int kRowElems = wgmma_row_elems<HD>(), kStageElems = BN * kRowElems;
    constexpr unsigned kVDescK16 = 2 * 1024 / 16;  // V descriptor advance per k16: two 8-key atoms
    const float kNegInf = neg_infinity<float>();
    // wg through a shuffle from lane 0: ptxas then knows it is warp-uniform (CUTLASS canonical_warp_group_idx)
    const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0), warp = threadIdx.x / 32 % 4,
              lane = threadIdx.x % 32;
    const bool capped = flags & kSoftcap;
    const int nq = cur.nq, nk = cur.nk;
    const KeyBand band = cur.band;

    int wg_first = 0, wg_tiles = 0;  // key tiles [wg_first, wg_tiles) of the block's this warpgroup computes
    int clean_first = 0, clean_end = 0;  // key tiles [clean_first, clean_end) every row of this warp sees whole
    int warp_row0 = 0;  // this warp's rows: warp_row0 + lane / 4 (+ 8)
    int row_query[2];  // their queries (row % period)
    unsigned long long q_desc = 0;
    float o[HD / 2];  // accumulator fragment of this warpgroup's 64 x HD output
    float row_max[2];  // log2 units (scaled); rows lane / 4 and lane / 4 + 8
    float row_sum[2];  // this thread's columns only (the quad sums at the end)
    unsigned p[BN / 16][4];  // P of the previous key tile: A fragments per k16 slice

    // Each batch of wgmmas is fenced: O and P were last written by ordinary instructions.
    auto issue_scores = [&](float (&s)[BN / 2], int tile) {
        wgmma_fence();
        const unsigned long long k_desc = sw128_kmajor_desc(k_s + tile % STAGES * kStageElems);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
            Wgmma<BN, T>::template ss<0>(s, desc_add(q_desc, kmajor_k16_step<64>(kk)),
                                         desc_add(k_desc, kmajor_k16_step<BN>(kk)), kk);
        wgmma_commit();
    };
    auto issue_pv = [&](int tile) {
        wgmma_fence();
        const unsigned long long v_desc = sw128_nmajor_desc<BN>(v_s + tile % STAGES * kStageElems);
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) Wgmma<HD, T>::template rs<1>(o, p[t], desc_add(v_desc, t * kVDescK16), 1);
        wgmma_commit();
    };
    auto pin_scores = [](float (&s)[BN / 2]) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) pin(s[i]);
    };
    auto pin_operands = [&]() {  // O and P: written by ordinary instructions or by wgmma
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) pin(o[i]);
#pragma unroll
        for (int t = 0; t < BN / 16; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) pin(p[t][e]);
    };
    auto finish_pv = [&](int tile) {  // this warpgroup's last P V, waited for
        feed.acquire_v(tile);
        pin_operands();
        issue_pv(tile);
        wgmma_wait<0>();
        pin_operands();
        feed.release_v(tile);
    };
    // Scores -> probabilities in place (log2 domain), running max and sum; alpha rescales O.
    // Accumulator element 4i + e sits at row lane / 4 + 8 (e / 2), column 8i + 2 (lane % 4) + e % 2.
    // Softcap: the scores become tanh(s scale / c) first (scale_log2 holds scale / c), and
    // c log2 e takes the scale's place below (positive, whatever the scale's sign).
    // Masking (only tiles outside [clean_first, clean_end): crossing key_end or an edge of a row's
    // window) selects -inf, so a NaN key never reaches a row that does not see it; fmaxf drops NaN
    // from the max, but exp2(NaN) brings it back into the row's sum. The running max moves only
    // when a tile's max exceeds it by more than kMaxSlack (FA4's conditional rescale):
    // probabilities stay <= 2^kMaxSlack (exact in float32, far from the 16-bit ranges), O and l
    // are scaled by the same stale max (O / l and lse = m + log2 l are unchanged), and after the
    // first tiles alpha is 1 on almost every row, so wait_pv_and_rescale skips the O rescale for the warp.
    constexpr float kMaxSlack = 8.f;
    const float score_scale = capped ? softcap_log2 : scale_log2;
    auto softmax = [&](float (&s)[BN / 2], int tile, float (&alpha)[2]) {
        const int n0 = cur.key_begin + tile * BN, key_end = cur.key_end;
        if (capped) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) s[i] = fast_tanh(s[i] * scale_log2);
        }
        if (tile < clean_first || tile >= clean_end) {
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = n0 + i * 8 + (lane % 4) * 2 + e % 2;
                    s[4 * i + e] = col < key_end && band.sees(col, row_query[e / 2]) ? s[4 * i + e] : kNegInf;
                }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = kNegInf;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) tile_max = fmaxf(tile_max, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
            tile_max = quad_max(tile_max);
            const float tile_max_scaled = tile_max * score_scale;
            const bool moves = tile_max_scaled > row_max[h] + kMaxSlack;  // -inf + slack: any finite max moves
            alpha[h] = moves ? fast_exp2(row_max[h] - tile_max_scaled) : 1.f;
            if (moves) row_max[h] = tile_max_scaled;
            const float base = row_max[h] == kNegInf ? 0.f : row_max[h];  // all masked so far: p = 0
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    s[4 * i + e] = fast_exp2(fmaf(s[4 * i + e], score_scale, -base));
                    sum += s[4 * i + e];
                }
            row_sum[h] = row_sum[h] * alpha[h] + sum;
        }
    };
    // From the second tile: waits for P V(j - 1), then O *= alpha per row (skipped when no row
    // of the warp moved its max; on the first tile O is 0). The wait sits in a basic block of its
    // own behind a branch that reads the row sums: in the softmax's block ptxas schedules it
    // first, and with a condition free of the sums it sinks exps past it (either way they wait
    // for P V(j - 1): no intra-warpgroup overlap; nvdisasm shows where it lands). The sums enter
    // through a warp vote that is always false (they are never negative; NaN compares false):
    // the condition stays warp-uniform for ptxas (a thread-dependent one serialises every wgmma,
    // C7518) and is tile > wg_first for the whole warpgroup, as a wgmma wait requires.
    auto wait_pv_and_rescale = [&](int tile, const float (&alpha)[2]) {
        // (were the vote ever true, it would add a wait, never drop one)
        if (tile + __any_sync(0xffffffffu, row_sum[0] + row_sum[1] < 0.f) > wg_first) {
            wgmma_wait<0>();
            pin_operands();
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e / 2];
            }
        }
    };
    // P = the probabilities as A fragments: k16 slice t is accumulator columns 16t..16t+15, i.e.
    // elements 8t..8t+3 (columns +0..7) and 8t+4..8t+7 (+8..15).
    auto pack_p = [&](const float (&s)[BN / 2]) {
#pragma unroll
        for (int t = 0; t < BN / 16; ++t)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[t][r] = pack2<T>(s[8 * t + 2 * r], s[8 * t + 2 * r + 1]);
    };

    const int n_tiles = cur.n_tiles;
    wg_tiles = n_tiles;
    if (WG_RANGES) {  // the tiles holding the keys of this warpgroup's rows (none past nq)
        const int wg_row0 = cur.m0 + wg * 64;
        const int2 queries = wg_row0 < nq ? query_range(wg_row0, min(wg_row0 + 64, nq), cur.period) : int2{0, 0};
        const int wg_key_begin = wg_row0 >= nq ? 0 : max(band.first_key(queries.x), cur.key_begin);
        const int wg_key_end = wg_row0 >= nq ? 0 : min(band.key_end(queries.y, nk), cur.key_end);
        const bool any = wg_key_end > wg_key_begin;
        wg_first = any ? (wg_key_begin - cur.key_begin) / BN : 0;
        wg_tiles = any ? (wg_key_end - cur.key_begin + BN - 1) / BN : 0;
    }
    warp_row0 = cur.m0 + wg * 64 + warp * 16;
    row_query[0] = (warp_row0 + lane / 4) % cur.period;
    row_query[1] = (warp_row0 + lane / 4 + 8) % cur.period;
    {  // every row of the warp sees keys [last query + band.lo, first query + band.hi]
        const int2 queries = query_range(warp_row0, warp_row0 + 16, cur.period);
        const int seen_lo = queries.y + band.lo - cur.key_begin;
        const int seen_end = min(cur.key_end, queries.x + band.hi + 1) - cur.key_begin;
        clean_first = max(0, (seen_lo + BN - 1) / BN);  // seen_lo <= 0: tile 0 (division truncates)
        clean_end = seen_end > 0 ? seen_end / BN : 0;
    }
    q_desc = sw128_kmajor_desc(q_s + wg * 64 * kRowElems);
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
    row_max[0] = row_max[1] = kNegInf;
    row_sum[0] = row_sum[1] = 0.f;

    // Ping-pong turns: warpgroup wg waits on barrier kTurn + wg, which the previous warpgroup
    // arrives on once it has issued; the last warpgroup opens the first turn and skips its final
    // arrival, so every barrier ends complete.
    constexpr int kTurn = 8;
    auto take_turn = [&]() {
        if constexpr (PINGPONG > 0) named_barrier_sync(kTurn + wg, 256);
    };
    auto pass_turn = [&](int tile) {
        if constexpr (PINGPONG > 0)
            if (wg < PINGPONG - 1 || tile + 1 < n_tiles) named_barrier_arrive(kTurn + (wg + 1) % PINGPONG, 256);
    };
    if constexpr (PINGPONG > 0)
        if (wg == PINGPONG - 1 && n_tiles > 0) named_barrier_arrive(kTurn, 256);

    feed.wait_q();
    for (int tile = 0; tile < n_tiles; ++tile) {
        feed.acquire_k(tile);
        take_turn();
        if (tile < wg_first) {  // before this warpgroup's keys (warpgroup-uniform)
            pass_turn(tile);
            feed.skip(tile);
            continue;
        }
        if (tile >= wg_tiles) {  // past them
            if (tile == wg_tiles && tile > wg_first) finish_pv(tile - 1);
            pass_turn(tile);
            feed.skip(tile);
            continue;
        }
        float s[BN / 2];
        pin_operands();  // O and P final before the fences that order them for the wgmmas
        issue_scores(s, tile);
        if (tile > wg_first) {
            feed.acquire_v(tile - 1);
            issue_pv(tile - 1);
            pass_turn(tile);
            wgmma_wait<1>();  // S(tile) done; P V still running
        } else {
            pass_turn(tile);
            wgmma_wait<0>();
        }
        feed.release_k(tile);
        pin_scores(s);
        float alpha[2];
        softmax(s, tile, alpha);
        pin_scores(s);  // the exps stay before the branch, not copied into its arms
        wait_pv_and_rescale(tile, alpha);  // P V done: P may be overwritten
        if (tile > wg_first) feed.release_v(tile - 1);
        pin_operands();
        pin_scores(s);
        pack_p(s);
    }
    feed.drain();
    if (wg_tiles == n_tiles && n_tiles > wg_first) finish_pv(n_tiles - 1);

    // Epilogue: O / l (0 for a row that saw no key), lse = (m + log2 l) ln 2. O is staged in
    // this warpgroup's own Q rows (its wgmmas are done with them) in the same swizzled
    // layout, so the fragment writes hit 8 distinct bank groups, then leaves as contiguous
    // rows of out (16 bytes per thread where out is 16-byte aligned). A split item writes its
    // float32 O and lse for the merge instead, straight from the fragments.
    T* o_stage = q_s + wg * 64 * kRowElems;
    const bool partial = partials.o != nullptr;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = quad_sum(row_sum[h]);
        const int stage_row = warp * 16 + lane / 4 + h * 8;
        const int row = cur.m0 + wg * 64 + stage_row;
        const bool empty = l == 0.f;  // no key: 0, also where v holds NaN
        float row_m = row_max[h], f = 1.f;
        if (sinks != nullptr && cur.split == 0) {  // split 0 alone carries the sink; packed rows: their group's head
            const int64 item = cur.period == kUnpacked ? cur.batch : cur.batch * (nq / cur.period) + row / cur.period;
            f = fold_sink_log2(sink_logit(sinks, sink_heads, item) * kLog2e, row_m, l);
        }
        const float inv = empty ? 0.f : f / l;
        // explicit 0 for an empty row: its O is 0 * V, NaN where V holds NaN
        auto o_value = [&](int j, int e) { return empty ? 0.f : o[4 * j + 2 * h + e] * inv; };
        const float m = row_m == kNegInf ? 0.f : row_m;
        const float row_lse = l == 0.f ? kNegInf : (m + __log2f(l)) * kLn2;
        const int64 out_row = cur.out_row + static_cast<int64>(row) * cur.out_step;
        if (partial) {
            if (row >= nq) continue;
            const int64 part_row = cur.split * partials.rows + out_row;
#pragma unroll
            for (int j = 0; j < HD / 8; ++j) {
                const int col = j * 8 + (lane % 4) * 2;  // dv % 8 == 0: col < dv holds the pair
                if (col < dv)
                    *reinterpret_cast<float2*>(partials.o + part_row * dv + col) =
                        make_float2(o_value(j, 0), o_value(j, 1));
            }
            if (lane % 4 == 0) partials.lse[part_row] = row_lse;
            continue;
        }
#pragma unroll
        for (int j = 0; j < HD / 8; ++j)
            *reinterpret_cast<unsigned*>(o_stage + kmajor_atom_offset<64>(stage_row, j * 8 + (lane % 4) * 2)) =
                pack2<T>(o_value(j, 0), o_value(j, 1));
        if ((flags & kWriteLse) && lane % 4 == 0 && row < nq) lse[out_row] = row_lse;
    }
    if (partial) return;
    warpgroup_barrier(wg);  // staged rows visible to the whole warpgroup (the others need not wait)
    const int rows = min(64, nq - (cur.m0 + wg * 64));
    const int64 pitch = static_cast<int64>(cur.out_step) * dv;  // elements between the item's rows of out
    T* dst = out + (cur.out_row + static_cast<int64>(cur.m0 + wg * 64) * cur.out_step) * dv;
    const auto staged = [](int r, int c) { return kmajor_atom_offset<64>(r, c); };
    if (reinterpret_cast<unsigned long long>(out) % 16 == 0) {
        if constexpr (128 % (HD / 8) == 0) {
            store_staged_rows<T, HD>(dst, o_stage, rows, dv, pitch, threadIdx.x % 128);
        } else {  // HD 96: a row's 12 chunks do not divide the warpgroup
            copy_rows<uint4>(dst, o_stage, staged, rows, dv, pitch, threadIdx.x % 128, 128);
        }
    } else {
        copy_rows<T>(dst, o_stage, staged, rows, dv, pitch, threadIdx.x % 128, 128);
    }
}

// ---------------------------------------------------------------------------------------
// attention_fwd_wgmma: WARPGROUPS x 128 threads, all of them consumers that also stream Q, K
// and V through the cp.async ring (CpAsyncFeed). One (query tile, batch) work item a block
// (grid = items). Preconditions besides consume_item's: q, k, v with unit column stride and
// 16-byte aligned rows.
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES, int MIN_BLOCKS, bool WG_RANGES>
__global__ void __launch_bounds__(WARPGROUPS * 128, MIN_BLOCKS)
    attention_fwd_wgmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        T* __restrict__ out, float* __restrict__ lse, int nq, int nk, int d, int dv, int q_tiles,
                        int items, float scale_log2, int flags, float softcap_log2, int band_lo, int band_hi,
                        int64 q_row, int64 k_row, int64 v_row,
                        BATCH_LAYOUT_PARAMS, const float* __restrict__ sinks, int sink_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HD % 32 == 0 && HD <= 256 && (BN == 64 || BN == 128) && STAGES >= 2, "tile shape");
    constexpr int kRowElems = wgmma_row_elems<HD>(), kStageElems = BN * kRowElems;
    extern __shared__ unsigned char smem_raw[];
    // 1024-byte aligned: the swizzle is a function of the address bits [4, 10)
    T* const q_s = reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    T* const k_s = q_s + WARPGROUPS * 64 * kRowElems;
    T* const v_s = k_s + STAGES * kStageElems;
    const KeyBand band{band_lo, band_hi};  // the keys query row i sees (causal, window)

    const int item = blockIdx.x;
    const WorkItem cur = work_item<WARPGROUPS * 64, BN>(item, q_tiles, flags & kCausal, nq, nk, band, BATCH_LAYOUT);
    CpAsyncFeed<T, HD, WARPGROUPS, BN, STAGES> feed;
    feed.k_s = k_s;
    feed.v_s = v_s;
    feed.k_row = k_row;
    feed.v_row = v_row;
    feed.begin(cur, q, k, v, q_s, d, dv, q_row);
    if (item < items)  // always true (grid = items); without the test the PTX changes
        consume_item<T, HD, BN, STAGES, WG_RANGES, 0>(feed, cur, q_s, k_s, v_s, out, lse, Partials{}, dv, scale_log2,
                                                      flags, softcap_log2, sinks, sink_heads);
    feed.end();
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// ---------------------------------------------------------------------------------------
// attention_fwd_wgmma_tma / attention_varlen_wgmma_tma: WARPGROUPS consumer warpgroups, then
// one producer warpgroup whose first thread loads Q once and K / V tile by tile through tensor
// maps into the mbarrier ring (TmaFeed), so the consumers issue no copies and meet no block
// barrier; setmaxnreg gives the producer's registers to the consumers (TmaRegisters a thread).
// The maps are 3-D (columns, rows, slab): rows past the tensor's end are zero-filled, as the
// cp.async feed does. The consumer warpgroups take turns issuing their wgmmas (consume_item's
// ping-pong) and compute only their own rows' key tiles. One work item a block.
template <int WARPGROUPS>
struct TmaRegisters {  // (producer, consumer) registers a thread: 64 K registers in all
    static constexpr int kProducer = WARPGROUPS == 2 ? 24 : 32;
    static constexpr int kConsumer = WARPGROUPS == 2 ? 240 : 160;
    static_assert(WARPGROUPS == 2 || WARPGROUPS == 3, "two or three consumer warpgroups");
    static_assert((kProducer + WARPGROUPS * kConsumer) * 128 <= 65536, "the register file");
};

// The block of both TMA kernels; `item_of(w)` (called by whole warps) fills the block's work item
// and returns false where the block has none (the same answer for every thread: all of them return).
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES, typename ItemOf>
__device__ __forceinline__ void wgmma_tma_block(ItemOf item_of, T* out, float* lse, const Partials& partials, int dv,
                                                float scale_log2, int flags, float softcap_log2,
                                                const TmaDescriptor& q_map, const TmaDescriptor& k_map,
                                                const TmaDescriptor& v_map,
                                                const float* sinks, int sink_heads) {
    static_assert(HD % 32 == 0 && HD <= 256 && (BN == 64 || BN == 128) && STAGES >= 2, "tile shape");
    constexpr int kRowElems = wgmma_row_elems<HD>(), kStageElems = BN * kRowElems, kAtoms = kRowElems / WGMMA_ATOM_N;
    constexpr unsigned kQBytes = WARPGROUPS * 64 * kRowElems * sizeof(T), kStageBytes = kStageElems * sizeof(T);
    extern __shared__ unsigned char smem_raw[];
    T* const q_s = reinterpret_cast<T*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    T* const k_s = q_s + WARPGROUPS * 64 * kRowElems;
    T* const v_s = k_s + STAGES * kStageElems;
    // Q's full, then K's full, V's full, K's empty and V's empty per stage (FlashWgmmaTile.smem_bytes)
    unsigned long long* const bars = reinterpret_cast<unsigned long long*>(v_s + STAGES * kStageElems);
    TmaFeed<STAGES> feed{bars, bars + 1, bars + 1 + STAGES, bars + 1 + 2 * STAGES, bars + 1 + 3 * STAGES,
                         threadIdx.x % 32 == 0};
    if (threadIdx.x == 0) {
        mbarrier_init(feed.q_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(feed.k_full + s, 1);
            mbarrier_init(feed.v_full + s, 1);
            mbarrier_init(feed.k_empty + s, WARPGROUPS * 4);
            mbarrier_init(feed.v_empty + s, WARPGROUPS * 4);
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    WorkItem cur;
    if (threadIdx.x >= WARPGROUPS * 128) {  // the producer warpgroup
        setmaxnreg_dec<TmaRegisters<WARPGROUPS>::kProducer>();
        if (threadIdx.x / 32 != WARPGROUPS * 4 || !item_of(cur)) return;  // its first warp finds the item
        if (threadIdx.x == WARPGROUPS * 128) {
            mbarrier_arrive_expect_tx(feed.q_full, kQBytes);
#pragma unroll
            for (int slice = 0; slice < WARPGROUPS; ++slice)
#pragma unroll
                for (int a = 0; a < kAtoms; ++a)
                    tma_load_3d(q_s + slice * 64 * kRowElems + a * 64 * WGMMA_ATOM_N, q_map, a * WGMMA_ATOM_N,
                                cur.q_row + cur.m0 + slice * 64, cur.q_slab, feed.q_full);
            // tile t of K or V: wait for its stage to be released, announce its bytes, issue the boxes
            auto load_tile = [&](unsigned long long* empty, unsigned long long* full, T* ring,
                                 const TmaDescriptor& map, int t, int row, int slab) {
                const int s = t % STAGES;
                mbarrier_wait(empty + s, ((t / STAGES) & 1) ^ 1);  // round 0 passes at once
                mbarrier_arrive_expect_tx(full + s, kStageBytes);
#pragma unroll
                for (int a = 0; a < kAtoms; ++a)
                    tma_load_3d(ring + s * kStageElems + a * BN * WGMMA_ATOM_N, map, a * WGMMA_ATOM_N, row, slab,
                                full + s);
            };
            // K(t + 1) before V(t), the order the consumers take them in (S(t + 1) issues with P V(t)):
            // K's stage frees after S, half a step before V's after P V, so K is not held behind V's wait.
            const int row0 = cur.kv_row + cur.key_begin;
            if (cur.n_tiles > 0) load_tile(feed.k_empty, feed.k_full, k_s, k_map, 0, row0, cur.k_slab);
            for (int t = 0; t < cur.n_tiles; ++t) {
                if (t + 1 < cur.n_tiles)
                    load_tile(feed.k_empty, feed.k_full, k_s, k_map, t + 1, row0 + (t + 1) * BN, cur.k_slab);
                load_tile(feed.v_empty, feed.v_full, v_s, v_map, t, row0 + t * BN, cur.v_slab);
            }
        }
    } else {
        setmaxnreg_inc<TmaRegisters<WARPGROUPS>::kConsumer>();
        if (!item_of(cur)) return;
        consume_item<T, HD, BN, STAGES, true, WARPGROUPS>(feed, cur, q_s, k_s, v_s, out, lse, partials, dv, scale_log2,
                                                          flags, softcap_log2, sinks, sink_heads);
    }
}

// attention's items: one (query tile, batch) a block (grid = items). A batch item's offset is a
// multiple of its operand's unit (q_unit, ... elements), so its slab coordinate is offset / unit.
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES>
__global__ void __launch_bounds__((WARPGROUPS + 1) * 128, 1)
    attention_fwd_wgmma_tma(T* __restrict__ out, float* __restrict__ lse, float* __restrict__ partial_o,
                            float* __restrict__ partial_lse, int nq, int nk, int dv, int q_tiles, int splits,
                            int keys_per_split, int period, float scale_log2, int flags, float softcap_log2,
                            int band_lo, int band_hi, int64 q_unit,
                            int64 k_unit, int64 v_unit, BATCH_LAYOUT_PARAMS,
                            const __grid_constant__ TmaDescriptor q_map, const __grid_constant__ TmaDescriptor k_map,
                            const __grid_constant__ TmaDescriptor v_map, const float* __restrict__ sinks,
                            int sink_heads) {
    begin_dependent_grid();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const KeyBand band{band_lo, band_hi};
    auto item_of = [&](WorkItem& w) {
        w = work_item<WARPGROUPS * 64, BN>(blockIdx.x, q_tiles, flags & kCausal, nq, nk, band, BATCH_LAYOUT, splits,
                                           keys_per_split, period);
        w.q_slab = int(w.q_off / q_unit);
        w.k_slab = int(w.k_off / k_unit);
        w.v_slab = int(w.v_off / v_unit);
        return true;
    };
    // one split: out and lse directly; else the (splits, batch x nq) rows of the merge's partials
    const Partials partials{splits > 1 ? partial_o : nullptr, partial_lse,
                            static_cast<int64>(gridDim.x / (q_tiles * splits)) * nq};
    wgmma_tma_block<T, HD, WARPGROUPS, BN, STAGES>(item_of, out, lse, partials, dv, scale_log2, flags, softcap_log2,
                                                   q_map, k_map, v_map, sinks, sink_heads);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

// attention_varlen's items (varlen_item): grid (floor(Tq / BLOCK_M) + B virtual query tiles,
// Hq); the blocks of tiles past their sequence's end return at once. q (Tq, Hq, D), k (Tk, Hkv,
// D), v (Tk, Hkv, Dv) mapped as (columns, tokens, heads); out (Tq, Hq, Dv) and lse (Tq, Hq)
// C-contiguous. Rows of a tile past its sequence belong to the next one (or are zero-filled
// past the tensor): their keys are masked (key_end <= the sequence's nk) and their queries
// never stored. `left` / `right`: the window's sides (-1 unlimited), causal folded into right.
template <typename T, int HD, int WARPGROUPS, int BN, int STAGES>
__global__ void __launch_bounds__((WARPGROUPS + 1) * 128, 1)
    attention_varlen_wgmma_tma(T* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                               const int* __restrict__ cu_k, int batch, int tq, int tk, int heads_q, int group, int dv,
                               float scale_log2, int flags, float softcap_log2, int left, int right,
                               int64 cu_q_stride, int64 cu_k_stride, const __grid_constant__ TmaDescriptor q_map,
                               const __grid_constant__ TmaDescriptor k_map, const __grid_constant__ TmaDescriptor v_map,
                               const float* __restrict__ sinks, int sink_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const VarlenSequences seqs{cu_q, cu_k, cu_q_stride, cu_k_stride, batch, tq, tk};
    auto item_of = [&](WorkItem& w) {
        return varlen_item<WARPGROUPS * 64, BN>(w, seqs, blockIdx.x, blockIdx.y, group, heads_q, flags & kCausal,
                                                left, right);
    };
    wgmma_tma_block<T, HD, WARPGROUPS, BN, STAGES>(item_of, out, lse, Partials{}, dv, scale_log2, flags, softcap_log2,
                                                   q_map, k_map, v_map, sinks, sink_heads);
#else
    __trap();  // sm_90a only (the host never launches it elsewhere)
#endif
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_fwd_wgmma;
using cufuse::attention::attention_fwd_wgmma_tma;
using cufuse::attention::attention_varlen_wgmma_tma;
