// attention_merge: the log-sum-exp merge of the float32 partials (O, lse) of a key split.
//
// Launched (cufuse/ops/attention/merge.py) after attention_fwd_mma or attention_decode
// whenever their plan splits the keys over several blocks (splits > 1).
#include "common/attention_layout.cuh"
#include "common/lse_merge.cuh"

namespace cufuse {
namespace attention {

// One block per (row, 32 columns); the host picks the block size from the split count
// (cufuse/ops/attention/merge.py merge_threads).
template <typename T>
__global__ void __launch_bounds__(1024)
    attention_merge(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                    T* __restrict__ out, float* __restrict__ lse, int64 rows, int dv, int splits, int write_lse) {
    begin_dependent_grid();
    const int64 row = blockIdx.x;
    merge_partials<T>(partial_o, partial_lse, [=](int s) { return s * rows + row; }, splits, dv,
                      blockIdx.y * kMergeColumns, out + row * dv, write_lse ? lse + row : nullptr);
}

}  // namespace attention
}  // namespace cufuse

using cufuse::attention::attention_merge;
