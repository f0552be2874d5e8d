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

// One block per (output row (b, KV head, packed row), 32 columns); unit_meta[2b], [2b + 1]:
// the first unit of sequence b and how many it has. Units merge in order (bitwise
// reproducible for a given block size, which the host picks from its bound on the units a
// sequence may have).
template <typename T>
__global__ void __launch_bounds__(1024)
    paged_attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                          const int* __restrict__ unit_meta, T* __restrict__ out, float* __restrict__ lse,
                          int rows_per_batch, int dv, int write_lse) {
    const int64 row = blockIdx.x;
    const int b = static_cast<int>(row / rows_per_batch), row_in_batch = static_cast<int>(row % rows_per_batch);
    const int first = unit_meta[2 * b], count = unit_meta[2 * b + 1];
    if (count <= 1) return;  // the forward kernel wrote the row
    merge_partials<T>(partial_o, partial_lse,
                      [=](int u) { return static_cast<int64>(first + u) * rows_per_batch + row_in_batch; }, count,
                      dv, blockIdx.y * kMergeColumns, out + row * dv, write_lse ? lse + row : nullptr);
}

}  // namespace paged
}  // namespace cufuse

using cufuse::paged::paged_attention_merge;
