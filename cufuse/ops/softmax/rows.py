"""The row kernels that hold a whole row on chip, one group, block or cluster a row:
``softmax_rows`` (kernels/softmax/rows.cu), ``softmax_rows_span`` (rows_span.cu),
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
from .layout import SoftmaxProblem, cluster_twin_spec, refuse, require_clusters, row_share, vector_size


def _check_capacity(config, problem: SoftmaxProblem) -> None:
    """A config whose rows are shorter than the row would compute part of it."""
    if problem.vectors > config.capacity_vectors:
        refuse(config, f"holds rows of up to {config.capacity_vectors} 16-byte vectors, got a row of {problem.length} "
                       f"elements ({problem.vectors} vectors)")


@dataclasses.dataclass(frozen=True)
class RowsConfig:
    """``softmax_rows``: ``group`` threads per row, rows of up to group*vecs vectors.
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

    def spec(self, dtype, log: bool) -> KernelSpec:
        exp_once = self.exp_once and not log
        return KernelSpec("softmax/rows.cu", "softmax_rows", (ctype(dtype), log, self.threads, self.group, self.vecs, exp_once))

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _check_capacity(self, problem)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        args = ("x", "out", np.int64(problem.rows)) + problem.geometry()
        grid = ceil_div(problem.rows, self.rows_per_block)
        return Plan((Launch(self.spec(problem.dtype, problem.log), (grid,), (self.threads,), args),))


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
class StashedRowsConfig:
    """``softmax_rows_stashed``: one block of ``threads`` per row, rows of up to
    (``stash_tiles`` + 1) tiles of threads x vecs vectors: the last tile in registers, the
    others in dynamic shared memory, ``blocks_per_sm`` blocks an SM (the launch bound, and
    the whole carveout shared by them). With ``cluster`` > 1
    (``softmax_rows_stashed_cluster``, sm_90), a cluster of such blocks a row."""

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
        args = (ctype(dtype), log, self.threads, self.vecs, self.stash_tiles, self.blocks_per_sm)
        return cluster_twin_spec("softmax/rows_stashed.cu", "softmax_rows_stashed", args, self.cluster)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _check_capacity(self, problem)
        require_clusters(self, self.cluster, dev)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        args = ("x", "out") + problem.geometry() + (np.int64(self.chunk(problem.length, problem.dtype)),)
        launch = Launch(self.spec(problem.dtype, problem.log), (problem.rows * self.cluster,), (self.threads,), args,
                        smem=self.smem_bytes, whole_carveout=True)
        return Plan((launch,))


@dataclasses.dataclass(frozen=True)
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
