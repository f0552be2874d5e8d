"""The row kernels that hold a whole row on chip, one group, block or cluster a row:
``softmax_rows`` and ``softmax_block_rows`` (kernels/softmax/rows.cu), ``softmax_rows_span`` (rows_span.cu),
``softmax_rows_stashed[_cluster]`` (rows_stashed.cu) and ``softmax_rows_cluster``
(rows_cluster.cu). Capacities are counted in 16-byte vectors, so one ladder serves every
dtype (``select.choose_rows``); the span rows count elements."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import ctype
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan
from .problem import SoftmaxProblem, cluster_twin_spec, refuse, require_clusters, row_share, vector_size


# The kernels whose block width is set at launch. Block rows: at most 512 threads, registers
# capped by dtype and vectors a lane (the fewest that do not spill on sm_90a, rounded to 8;
# uncapped, ptxas took 94-120 for 8 vectors: kernels/softmax/rows.cu), a vecs between rungs
# taking the next rung's cap. Stashed rows: the launch bound by (vectors a lane, blocks an SM):
# two 512-thread blocks an SM cap the registers at 64, which spilled the 2-byte stashed rows
# (12 bytes; 448 threads: 72 registers, none).
BLOCK_ROWS_MAX_THREADS = 512
_BLOCK_ROWS_REGISTERS = {  # dtype name: {vecs: registers}
    "float16": {4: 64, 5: 64, 6: 64, 8: 72},
    "bfloat16": {4: 64, 5: 64, 6: 64, 8: 88},
    "float32": {4: 64, 5: 64, 6: 64, 8: 72},
    "float64": {4: 64, 5: 64, 6: 72, 8: 96},
}


def block_rows_registers(dtype, vecs: int) -> int:
    """The register cap of the block-rows kernel of ``dtype`` at ``vecs`` vectors a lane."""
    caps = _BLOCK_ROWS_REGISTERS[np.dtype(dtype).name]
    return caps[min(v for v in caps if v >= vecs)] if vecs <= max(caps) else 255
STASHED_MAX_THREADS = {(4, 2): 448, (4, 1): 512, (8, 2): 256, (8, 1): 256}


def _check_block_width(config, threads: int, most: int) -> None:
    if threads % 32 or not 32 <= threads <= most:
        refuse(config, f"takes blocks of a multiple of 32 threads up to {most}, got {threads}")


def _check_capacity(config, problem: SoftmaxProblem) -> None:
    """A config whose rows are shorter than the row would compute part of it."""
    if problem.vectors > config.capacity_vectors:
        refuse(config, f"holds rows of up to {config.capacity_vectors} 16-byte vectors, got a row of {problem.length} "
                       f"elements ({problem.vectors} vectors)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowsConfig:
    """``softmax_rows``: ``group`` threads per row, rows of up to group*vecs vectors; with
    group == threads (> 32) one row a block (``softmax_block_rows``), of any multiple of 32
    threads up to BLOCK_ROWS_MAX_THREADS (one kernel a ``vecs``, its width set at launch).
    ``exp_once`` (softmax only; log_softmax ignores it): the exps of the sum stay in
    registers for the store, one exp an element instead of two (``select.with_exp_once`` sets
    it where they fit)."""

    threads: int
    group: int
    vecs: int
    exp_once: bool = False

    @property
    def capacity_vectors(self) -> int:
        return self.group * self.vecs

    @property
    def rows_per_block(self) -> int:
        return self.threads // self.group

    @property
    def block_rows(self) -> bool:
        return self.group == self.threads and self.threads > 32

    def spec(self, dtype, log: bool) -> KernelSpec:
        exp_once = self.exp_once and not log
        if self.block_rows:  # one kernel a vecs, its width set at launch
            args = (ctype(dtype), log, self.vecs, exp_once, block_rows_registers(dtype, self.vecs))
            return KernelSpec("softmax/rows.cu", "softmax_block_rows", args)
        return KernelSpec("softmax/rows.cu", "softmax_rows", (ctype(dtype), log, self.threads, self.group, self.vecs, exp_once))

    def check(self, problem: SoftmaxProblem, dev) -> None:
        if self.block_rows:
            _check_block_width(self, self.threads, BLOCK_ROWS_MAX_THREADS)
        _check_capacity(self, problem)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        args = ("x", "out", np.int64(problem.rows)) + problem.geometry()
        grid = ceil_div(problem.rows, self.rows_per_block)
        return Plan((Launch(self.spec(problem.dtype, problem.log), (grid,), (self.threads,), args),))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpanRowsConfig:
    """``softmax_rows_span``: dense rows (unit element stride, row stride = length) of up to
    ``group`` x ``per_lane`` elements, a block's span of whole rows (``tile_rows``) staged
    through shared memory, ``group`` lanes a row, ``blocks_per_sm`` blocks an SM (the launch
    bound: 40 registers at 6)."""

    threads: int
    group: int
    per_lane: int
    blocks_per_sm: int = 6
    tile_bytes: int = 16384

    @property
    def capacity_elements(self) -> int:
        return self.group * self.per_lane

    def tile_rows(self, length: int, rows: int, dtype, dev) -> int:
        """Rows a block stages, whole passes of threads / group rows: about ``tile_bytes`` of
        them, fewer where that leaves resident block slots of ``dev`` empty."""
        groups = self.threads // self.group
        by_bytes = groups * max(1, self.tile_bytes // (length * np.dtype(dtype).itemsize * groups))
        spread = groups * ceil_div(rows, self.blocks_per_sm * dev.sm_count * groups)
        return min(by_bytes, spread)

    def smem_bytes(self, length: int, tile_rows: int, dtype) -> int:
        """The tile: its rows from the boundary below the first, and a rung's capacity of
        padding (the last row's unused slots are read, then discarded), in whole vectors."""
        vs = vector_size(dtype)
        return ceil_div(tile_rows * length + vs + self.capacity_elements, vs) * 16

    def spec(self, dtype, log: bool) -> KernelSpec:
        args = (ctype(dtype), log, self.threads, self.group, self.per_lane, self.blocks_per_sm)
        return KernelSpec("softmax/rows_span.cu", "softmax_rows_span", args)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        if not problem.dense_rows:
            refuse(self, f"takes rows one after another in memory (unit element stride, row stride = length), got "
                         f"(outer, length, inner) {problem.sizes} with element strides {problem.strides}")
        if problem.length > self.capacity_elements:
            refuse(self, f"holds rows of up to {self.capacity_elements} elements, got a row of {problem.length}")
        smem = self.smem_bytes(problem.length, self.tile_rows(problem.length, problem.rows, problem.dtype, dev), problem.dtype)
        if smem > dev.max_smem_per_block:
            refuse(self, f"needs {smem} bytes of shared memory a block (tile_bytes {self.tile_bytes}), got a device "
                         f"of {dev.max_smem_per_block}")

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        tile_rows = self.tile_rows(problem.length, problem.rows, problem.dtype, dev)
        args = ("x", "out", np.int64(problem.rows), np.int32(problem.length), np.int32(tile_rows))
        launch = Launch(self.spec(problem.dtype, problem.log), (ceil_div(problem.rows, tile_rows),), (self.threads,), args,
                        smem=self.smem_bytes(problem.length, tile_rows, problem.dtype), whole_carveout=True)
        return Plan((launch,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StashedRowsConfig:
    """``softmax_rows_stashed``: one block of ``threads`` per row, rows of up to
    (``stash_tiles`` + 1) tiles of threads x vecs vectors: the last tile in registers, the
    others (1 to 7) in dynamic shared memory, ``blocks_per_sm`` blocks an SM (the launch bound,
    and the whole carveout shared by them). One kernel a (vecs, blocks_per_sm): the width (any
    multiple of 32 up to STASHED_MAX_THREADS[vecs, blocks_per_sm]) and the tiles are set at launch. With
    ``cluster`` > 1 (``softmax_rows_stashed_cluster``, sm_90), a cluster of such blocks a row."""

    threads: int
    vecs: int
    stash_tiles: int
    blocks_per_sm: int
    cluster: int = 1

    @property
    def capacity_vectors(self) -> int:
        return self.threads * self.vecs * (self.stash_tiles + 1) * self.cluster

    @property
    def smem_bytes(self) -> int:
        return self.stash_tiles * self.threads * self.vecs * 16

    def chunk(self, length: int, dtype) -> int:
        """Elements of the row a block holds (whole 16-byte vectors)."""
        return row_share(length, self.cluster, dtype)

    def spec(self, dtype, log: bool) -> KernelSpec:
        args = (ctype(dtype), log, STASHED_MAX_THREADS[self.vecs, self.blocks_per_sm], self.vecs, self.blocks_per_sm)
        return cluster_twin_spec("softmax/rows_stashed.cu", "softmax_rows_stashed", args, self.cluster)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        if (self.vecs, self.blocks_per_sm) not in STASHED_MAX_THREADS:
            refuse(self, f"takes (vecs, blocks_per_sm) of {sorted(STASHED_MAX_THREADS)}, got ({self.vecs}, {self.blocks_per_sm})")
        _check_block_width(self, self.threads, STASHED_MAX_THREADS[self.vecs, self.blocks_per_sm])
        if not 1 <= self.stash_tiles <= 7:
            refuse(self, f"takes 1 to 7 shared-memory tiles, got {self.stash_tiles}")
        if self.smem_bytes > dev.max_smem_per_block:
            refuse(self, f"needs {self.smem_bytes} bytes of shared memory a block, got a device of {dev.max_smem_per_block}")
        _check_capacity(self, problem)
        require_clusters(self, self.cluster, dev)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        args = ("x", "out") + problem.geometry() + (np.int64(self.chunk(problem.length, problem.dtype)), np.int32(self.stash_tiles))
        launch = Launch(self.spec(problem.dtype, problem.log), (problem.rows * self.cluster,), (self.threads,), args,
                        smem=self.smem_bytes, whole_carveout=True)
        return Plan((launch,))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """``softmax_rows_cluster`` (sm_90): ``cluster`` blocks of ``threads`` x ``vecs`` vectors
    per row; a grid of rows / ``rows_per_cluster`` clusters, each looping over its rows (a
    run-time parameter: same kernel)."""

    threads: int
    vecs: int
    cluster: int
    rows_per_cluster: int = 1

    @property
    def capacity_vectors(self) -> int:
        return self.threads * self.vecs * self.cluster

    def chunk(self, length: int, dtype) -> int:
        """Elements of the row a block holds (whole 16-byte vectors)."""
        return row_share(length, self.cluster, dtype)

    def spec(self, dtype, log: bool) -> KernelSpec:
        return KernelSpec("softmax/rows_cluster.cu", "softmax_rows_cluster",
                          (ctype(dtype), log, self.threads, self.vecs, self.cluster), min_cc=90)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _check_capacity(self, problem)
        require_clusters(self, self.cluster, dev)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        chunk = np.int64(self.chunk(problem.length, problem.dtype))
        args = ("x", "out", np.int64(problem.rows)) + problem.geometry() + (chunk,)
        grid = ceil_div(problem.rows, self.rows_per_cluster) * self.cluster
        launch = Launch(self.spec(problem.dtype, problem.log), (grid,), (self.threads,), args)
        return Plan((launch,))
