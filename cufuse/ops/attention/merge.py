"""The key split's second pass: ``attention_merge`` (kernels/attention/merge.cu) combines the
float32 partials (O, lse) that attention_fwd_mma and attention_decode write when a plan
splits the keys over several blocks. The partials take ``splits * B * Nq * (Dv + 1)``
float32: up to SCRATCH_WORKSPACE_BYTES a workspace reused per stream (``ScratchPool``: a
decode call then allocates nothing but its output), beyond that temporaries of the call,
freed when it returns (a prefill's split need not hold hundreds of MB)."""
from __future__ import annotations

import numpy as np

from ..._core.loader import KernelSpec
from ..._core.lse_merge import merge_grid, merge_threads
from ..._core.plans import Launch, Plan, Scratch, ScratchRequest, Temporary

# Split workspaces up to this size are reused per stream: the two allocations a call were
# ~9 of the ~52 us a host-bound decode call cost (experiments/attention/profile_host.py).
SCRATCH_WORKSPACE_BYTES = 32 << 20


def merge_spec(dtype_ctype: str) -> KernelSpec:
    return KernelSpec("attention/merge.cu", "attention_merge", (dtype_ctype,))


def _partial_counts(problem, splits: int) -> tuple:
    """Elements of the partial O and lse of a split."""
    rows = splits * problem.batch_count * problem.n_q
    return rows * problem.head_dim_v, rows


def _reused(problem, splits: int) -> bool:
    return sum(_partial_counts(problem, splits)) * 4 <= SCRATCH_WORKSPACE_BYTES


def partial_pointers(problem, splits: int) -> tuple:
    """The forward kernel's partial O and lse pointers: the workspace with a split, else the
    lse argument again (the kernel does not touch them with one split)."""
    if splits == 1:
        return (problem.lse_arg, problem.lse_arg)
    return (Scratch(0), Scratch(1)) if _reused(problem, splits) else (Temporary(0), Temporary(1))


def split_scalars(problem, splits: int, keys_per_split: int) -> tuple:
    """The scalar tail of the forward kernels that split keys (after their shape arguments)."""
    keys = keys_per_split if splits > 1 else problem.n_k
    return (np.int32(splits), np.int32(keys), problem.scale_log2, np.int32(problem.vec_flags), *problem.mask_args,
            *problem.stride_args, *problem.layout_args)


def block_positions(problem, block_m: int, packed: bool) -> int:
    """Consecutive query positions a block of ``block_m`` rows holds (``packed`` rows: a group's
    queries, ``AttentionProblem.packed``)."""
    return min(block_m, problem.packed().queries_per_group if packed else problem.n_q)


def check_split_covers(problem, splits: int, keys_per_split: int, positions: int) -> None:
    """A config's key split must cover the keys a block sees (``problem.key_span`` of the
    ``positions`` consecutive query positions its rows hold): splits divide that span, from the
    block's first window start, and keys past the last split would be dropped."""
    span = problem.key_span(positions)
    if splits > 1 and splits * keys_per_split < span:
        raise ValueError(f"attention: argument 'config' expected splits * keys_per_split >= {span} (the keys a "
                         f"block sees), got {splits} * {keys_per_split}")


def split_plan(forward: Launch, problem, splits: int, dev) -> Plan:
    """``forward`` alone, or followed by the merge of its ``splits`` partials, which starts under
    the forward's tail where the device has programmatic dependent launch."""
    if splits == 1:
        return Plan((forward,))
    batch, rows = problem.batch_count, problem.batch_count * problem.n_q
    merge = Launch(merge_spec(problem.ctype), merge_grid(rows, problem.head_dim_v), (merge_threads(splits),),
                   (*partial_pointers(problem, splits), "out", problem.lse_arg, np.int64(rows),
                    np.int32(problem.head_dim_v), np.int32(splits), np.int32(problem.return_lse)), pdl=dev.has_pdl)
    if _reused(problem, splits):
        o_count, lse_count = _partial_counts(problem, splits)
        workspace = ScratchRequest("attention-split", ((np.float32, o_count, False), (np.float32, lse_count, False)))
        return Plan((forward, merge), scratch=workspace)
    return Plan((forward, merge), temporaries=((np.float32, (splits, batch, problem.n_q, problem.head_dim_v)),
                                               (np.float32, (splits, batch, problem.n_q))))
