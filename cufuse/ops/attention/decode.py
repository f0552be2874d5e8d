"""``attention_decode`` (kernels/attention/decode.cu): decode as pure K/V streaming into
registers, one query row a block, for float16 / bfloat16 calls of at most
DECODE_STREAM_MAX_QUERIES rows whose k and v have 16-byte rows."""
from __future__ import annotations

import dataclasses

from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .merge import check_split_covers, partial_pointers, split_plan, split_scalars

DECODE_HEAD_DIMS = (32, 64, 128, 256)  # HD / 8 lanes per key row must divide a warp


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeTile:
    """One ``attention_decode`` instantiation and its key split: ``warps`` warps a block,
    ``unroll`` 16-byte K and V loads in flight per lane, the keys split over ``splits``
    blocks of ``keys_per_split`` keys (a multiple of ``group_keys``; unused with one split)."""

    head_dim: int  # a DECODE_HEAD_DIMS entry covering D and Dv
    warps: int
    unroll: int
    splits: int = 1
    keys_per_split: int = 0

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def group_keys(self) -> int:
        """Keys one block reads per loop step (its split ranges are multiples of this)."""
        return self.warps * self.unroll * (256 // self.head_dim)

    def spec(self, dtype_ctype: str) -> KernelSpec:
        args = (dtype_ctype, self.head_dim, self.warps, self.unroll)
        return KernelSpec("attention/decode.cu", "attention_decode", args)

    def check(self, problem, dev) -> None:
        problem.check_tile_head_dim(self.head_dim)
        problem.check_dtype("attention_decode")
        check_split_covers(problem, self.splits, self.keys_per_split, 1)
        if not problem.kv_rows_16b:
            k_strides, v_strides = problem.operand_strides[1:]
            raise ValueError(
                f"attention: argument 'config' expected k and v with 16-byte aligned rows for a decode tile, "
                f"got k element strides {k_strides}, v element strides {v_strides}"
            )

    def plan(self, problem, dev) -> Plan:
        forward = Launch(self.spec(problem.ctype), (problem.n_q * self.splits * problem.batch_count,), (self.threads,),
                         (*problem.pointers, *partial_pointers(problem, self.splits), *problem.shape_args,
                          *split_scalars(problem, self.splits, self.keys_per_split), *problem.sink_args),
                         pdl=dev.has_pdl)
        return split_plan(forward, problem, self.splits, dev)


def decode_head_dim(head_dim: int) -> int:
    """The smallest DECODE_HEAD_DIMS entry holding ``head_dim``."""
    for bucket in DECODE_HEAD_DIMS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"attention: head dim {head_dim} exceeds {DECODE_HEAD_DIMS[-1]}")
