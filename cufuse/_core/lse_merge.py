"""Launch geometry of the merges of split partials (O, lse) shared by attention_merge and
paged_attention_merge (their device code: kernels/common/lse_merge.cuh)."""
from __future__ import annotations

MERGE_COLUMNS = 32  # columns a merge block takes (kernels/common/lse_merge.cuh kMergeColumns)
MERGE_SPLITS_PER_WARP = 8  # splits a merge warp takes at most (its loads in flight together)
MERGE_MAX_WARPS = 32


def merge_threads(splits: int) -> int:
    """The block size of a merge of up to ``splits`` partials a row: a warp per
    MERGE_SPLITS_PER_WARP of them, 1 to 32 warps (also paged_attention_merge's)."""
    return 32 * max(1, min(MERGE_MAX_WARPS, -(-splits // MERGE_SPLITS_PER_WARP)))


def merge_grid(rows: int, head_dim_v: int) -> tuple:
    """A block per (row, MERGE_COLUMNS columns)."""
    return (rows, -(-head_dim_v // MERGE_COLUMNS))
