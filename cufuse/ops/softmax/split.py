"""``softmax_rows_split`` (kernels/softmax/rows_split.cu): rows longer than one block or
cluster holds, split over the co-resident blocks of a persistent grid whose statistics meet
in a global scratch. ``split_scratch`` is that scratch, shared with the column split
(``cols.ColsSplitConfig``)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.dtypes import accumulator_dtype, ctype
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan, Scratch, ScratchRequest
from .problem import SoftmaxProblem, refuse, vector_size


def split_scratch(dtype, accumulators: int, counters: int) -> ScratchRequest:
    """The persistent kernels' exchange: ``accumulators`` (max, sum) values and ``counters``
    arrival counters, zero on entry and left zero on exit (so the pool reuses them without a
    memset), one per device, stream and accumulator dtype (a float32 and a float64 call on one
    stream do not share it)."""
    acc = accumulator_dtype(dtype)
    return ScratchRequest(f"softmax-split-{acc.name}", ((acc, accumulators, False), (np.dtype(np.uint32), counters, True)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """``softmax_rows_split``: ``blocks_per_row`` blocks per row, ``grid`` co-resident blocks
    (``blocks_per_sm`` an SM: the kernel's launch bound; a wave is grid / blocks_per_row rows).

    Each block owns ``chunk`` elements of a row (a multiple of the vector size), cut into
    tiles of threads*vecs vectors: the last tile in registers, up to ``smem_tiles`` in
    dynamic shared memory; any others are streamed and read twice (``streams``).
    ``pipelined``: each shared-memory tile merged as soon as it lands, the next row's tiles
    requested as the output pass frees them.
    """

    threads: int
    vecs: int
    blocks_per_sm: int
    blocks_per_row: int
    grid: int
    chunk: int
    smem_tiles: int
    streams: bool
    pipelined: bool = False

    @property
    def smem_bytes(self) -> int:
        return self.smem_tiles * self.threads * self.vecs * 16

    def spec(self, dtype, log: bool) -> KernelSpec:
        return KernelSpec("softmax/rows_split.cu", "softmax_rows_split",
                          (ctype(dtype), log, self.threads, self.vecs, self.blocks_per_sm, self.pipelined))

    def check(self, problem: SoftmaxProblem, dev) -> None:
        """The chunks cover the row from aligned starts; the grid is whole rows' blocks, all
        resident at once where a row has several (they wait for each other)."""
        vs = vector_size(problem.dtype)
        if self.chunk % vs:
            refuse(self, f"needs chunks of whole 16-byte vectors ({vs} elements), got chunks of {self.chunk}")
        if self.blocks_per_row * self.chunk < problem.length:
            refuse(self, f"holds rows of up to {self.blocks_per_row} x {self.chunk} elements, got a row of {problem.length}")
        if self.grid % self.blocks_per_row:
            refuse(self, f"needs a grid of whole rows of {self.blocks_per_row} blocks, got a grid of {self.grid}")
        if self.blocks_per_row > 1 and self.grid > self.blocks_per_sm * dev.sm_count:
            refuse(self, f"needs {self.grid} co-resident blocks, got a device of {dev.sm_count} SMs at "
                         f"{self.blocks_per_sm} blocks an SM")

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        rows = problem.rows
        args = (("x", "out", np.int64(rows)) + problem.geometry()
                + (np.int64(self.chunk), np.int32(self.blocks_per_row), np.int32(self.smem_tiles), Scratch(0), Scratch(1)))
        launch = Launch(self.spec(problem.dtype, problem.log), (self.grid,), (self.threads,), args, smem=self.smem_bytes,
                        whole_carveout=True, resident_blocks=self.blocks_per_sm)
        return Plan((launch,), split_scratch(problem.dtype, 2 * rows * self.blocks_per_row, rows))
