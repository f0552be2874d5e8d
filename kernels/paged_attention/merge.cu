// paged_attention_merge: the log-sum-exp merge of the float32 partials (O, lse) that
// paged_attention_mma writes for sequences whose keys it split over several work units.
//
// Launched (cufuse/ops/paged_attention/mma.py) after paged_attention_mma whenever the
// host's bound on a sequence's keys (max_pages * S) exceeds one unit's minimum chunk, so
// that some sequence may have been split; rows of unsplit sequences return at once (the
// forward kernel wrote them). attention_merge (kernels/attention/merge.cu) does not fit: its
// splits are a fixed count per call, here every sequence has its own unit range.
#include "paged_attention/paged.cuh"
#include "common/lse_merge.cuh"

namespace cufuse {
namespace paged {

// One block per (output row, 32 columns): out's rows (b, query head, query) unpacked, (token,
// query head) with cu_q. unit_meta[2b], [2b + 1]: the first unit of sequence b and the units a
// query tile of it has, tile t's being first + t * count ... Units merge in order (bitwise
// reproducible for a given block size, which the host picks from its bound on the units a
// sequence may have). `units`: the forward's grid, the partials' units.
template <typename T>
__global__ void __launch_bounds__(1024)
    paged_attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                          const int* __restrict__ unit_meta, T* __restrict__ out, float* __restrict__ lse,
                          int batch_count, int heads_q, int group, int nq, const int* __restrict__ cu_q,
                          int64 cu_q_stride, int q_tile, int dv, int write_lse, int units) {
    begin_dependent_grid();
    const int64 row = blockIdx.x;
    const SeqRows queries{cu_q, cu_q_stride, nq, q_tile};
    int b, hq, i;
    if (!queries.locate(row, batch_count, heads_q, b, hq, i)) return;
    const int first = unit_meta[2 * b], count = unit_meta[2 * b + 1];
    if (count <= 1) return;  // the forward kernel wrote the row
    // the row's place among its unit's partials: KV head, then G x tile_nq rows packed as the forward packs them
    const int tile = i / q_tile, tile_nq = min(q_tile, queries.count(b) - tile * q_tile);
    const int64 unit_rows = static_cast<int64>(heads_q) * q_tile;
    const int64 in_unit = static_cast<int64>(hq / group) * group * q_tile + (hq % group) * tile_nq + i % q_tile;
    const int64 unit0 = first + static_cast<int64>(tile) * count;
    // unit_meta the forward did not write (prefix sums outside the contract): read no unit past the partials
    if (first < 0 || unit0 + count > units) return;
    // groups of 4 splits: at 8, ptxas kept this kernel at 32 registers and spilled its 64-bit row indices
    merge_partials<T, 4>(partial_o, partial_lse, [=](int u) { return (unit0 + u) * unit_rows + in_unit; }, count, dv,
                      blockIdx.y * kMergeColumns, out + row * dv, write_lse ? lse + row : nullptr);
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_merge;
