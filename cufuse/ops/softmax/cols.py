"""The column kernels: the reduced axis strided over a contiguous inner axis (axis=0 of a
C-contiguous matrix). ``softmax_cols[_cluster]`` and ``softmax_cols_vec[_cluster]``
(kernels/softmax/cols.cu) read each column twice; ``softmax_cols_split``
(kernels/softmax/cols_split.cu) holds strips of columns on chip over a persistent grid and
reads each element once; ``softmax_cols_short[_vec]`` (kernels/softmax/cols_short.cu) hold a
thread's short columns in registers (``_shifted``: vectors of them whatever their alignment)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import accumulator_dtype, ctype
from ..._core.loader import KernelSpec
from ..._core.plans import Launch, Plan, Scratch
from .layout import SoftmaxProblem, cluster_twin_spec, refuse, require_clusters, vector_size
from .split import split_scratch


def _require_column_vectors(config, problem: SoftmaxProblem, float64: bool = False) -> None:
    """The 16-byte column kernels need the reduced axis strided over a contiguous inner axis
    and every vector of columns aligned (``layout.cols_vectorizable``); those of two reads and
    the split take 2- and 4-byte types only (``float64`` False: their float64 vectors spilled)."""
    if not problem.vectorizable:
        refuse(config, f"needs the reduced axis strided over a contiguous inner axis with every 16-byte vector of "
                       f"columns aligned; got (outer, length, inner) = {problem.sizes}, element strides (so, sl, si) = "
                       f"{problem.strides}")
    if not float64 and problem.dtype.itemsize == 8:
        refuse(config, f"expected a 2- or 4-byte dtype, got {problem.dtype}")


def _require_short(config, problem: SoftmaxProblem) -> None:
    if problem.length > config.max_length:
        refuse(config, f"holds columns of up to {config.max_length} elements, got {problem.length}")


def _column_launch(config, problem: SoftmaxProblem, dev, threads: int, columns: int) -> Plan:
    """The two-read column kernels: a block (a cluster) per ``columns`` columns of an outer index."""
    grid = problem.outer * ceil_div(problem.inner, columns) * config.cluster
    args = ("x", "out", np.int64(problem.outer)) + problem.geometry()
    return Plan((Launch(config.spec(problem.dtype, problem.log), (grid,), (threads,), args),))


def _short_launch(config, problem: SoftmaxProblem, width: int) -> Plan:
    """The short-column kernels: a thread ``width`` adjacent columns, ``config.threads`` threads a block."""
    grid = ceil_div(problem.rows // width, config.threads)
    args = ("x", "out", np.int64(problem.outer)) + problem.geometry()
    return Plan((Launch(config.spec(problem.dtype, problem.log), (grid,), (config.threads,), args),))


@dataclasses.dataclass(frozen=True)
class ColsConfig:
    """``softmax_cols`` (cluster 1) or ``softmax_cols_cluster``: 32 columns x ``slices``
    slices of the reduced axis per block, ``unroll`` loads in flight per thread, the reduced
    axis split over ``cluster`` blocks. Any layout (scalar accesses)."""

    slices: int
    unroll: int
    cluster: int = 1

    def spec(self, dtype, log: bool) -> KernelSpec:
        return cluster_twin_spec("softmax/cols.cu", "softmax_cols", (ctype(dtype), log, self.slices, self.unroll), self.cluster)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        require_clusters(self, self.cluster, dev)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        return _column_launch(self, problem, dev, 32 * self.slices, 32)


@dataclasses.dataclass(frozen=True)
class ColsVecConfig:
    """``softmax_cols_vec`` (cluster 1) or ``softmax_cols_vec_cluster``: ``col_lanes`` 16-byte
    vectors of adjacent columns x ``threads / col_lanes`` slices of the reduced axis per block,
    ``unroll`` vectors in flight per thread, the reduced axis split over ``cluster`` blocks.
    Only where ``cols_vectorizable``."""

    threads: int
    col_lanes: int
    unroll: int
    cluster: int = 1

    def columns(self, dtype) -> int:
        return self.col_lanes * vector_size(dtype)

    def spec(self, dtype, log: bool) -> KernelSpec:
        args = (ctype(dtype), log, self.threads, self.col_lanes, self.unroll)
        return cluster_twin_spec("softmax/cols.cu", "softmax_cols_vec", args, self.cluster)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _require_column_vectors(self, problem)
        require_clusters(self, self.cluster, dev)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        return _column_launch(self, problem, dev, self.threads, self.columns(problem.dtype))


@dataclasses.dataclass(frozen=True)
class ColsShortConfig:
    """``softmax_cols_short``: a thread a column of at most ``max_length`` elements, held in
    registers (one read), ``threads`` columns a block. Any layout; picked for float64's short
    columns off the vector."""

    threads: int
    max_length: int

    def spec(self, dtype, log: bool) -> KernelSpec:
        return KernelSpec("softmax/cols_short.cu", "softmax_cols_short", (ctype(dtype), log, self.threads, self.max_length))

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _require_short(self, problem)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        return _short_launch(self, problem, 1)


@dataclasses.dataclass(frozen=True)
class ColsShortVecConfig:
    """``softmax_cols_short_vec``: a thread a 16-byte vector of adjacent columns of at most
    ``max_length`` elements, held in registers (one read), ``threads`` vectors a block, the
    registers bounded for ``blocks_per_sm`` blocks an SM (the launch bound); ``exp_once``
    (softmax only; log_softmax ignores it): the sum's exps stay in registers for the store.
    Only where ``cols_vectorizable`` (float64 included)."""

    threads: int
    max_length: int
    blocks_per_sm: int
    exp_once: bool = False

    def spec(self, dtype, log: bool) -> KernelSpec:
        args = (ctype(dtype), log, self.threads, self.max_length, self.blocks_per_sm, self.exp_once and not log)
        return KernelSpec("softmax/cols_short.cu", "softmax_cols_short_vec", args)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        _require_column_vectors(self, problem, float64=True)
        _require_short(self, problem)

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        return _short_launch(self, problem, vector_size(problem.dtype))


@dataclasses.dataclass(frozen=True)
class ColsShortShiftedConfig:
    """``softmax_cols_short_shifted``: a thread a 16-byte vector of adjacent columns of at most
    ``max_length`` elements whatever their alignment (each cut from two aligned vectors, a warp
    31 vectors of columns), held in registers (one read), ``threads`` a block, the registers
    bounded for ``blocks_per_sm`` blocks an SM (the launch bound); ``exp_once`` (softmax only;
    log_softmax ignores it): the sum's exps stay in registers for the store. Any column layout
    (the inner axis contiguous) of a 2- or 4-byte dtype."""

    threads: int
    max_length: int
    blocks_per_sm: int
    exp_once: bool = False

    def spec(self, dtype, log: bool) -> KernelSpec:
        args = (ctype(dtype), log, self.threads, self.max_length, self.blocks_per_sm, self.exp_once and not log)
        return KernelSpec("softmax/cols_short.cu", "softmax_cols_short_shifted", args)

    def check(self, problem: SoftmaxProblem, dev) -> None:
        if not problem.column_layout:
            refuse(self, f"needs the reduced axis strided over a contiguous inner axis; got (outer, length, inner) = "
                         f"{problem.sizes}, element strides (so, sl, si) = {problem.strides}")
        _require_short(self, problem)
        if problem.dtype.itemsize not in (2, 4):
            refuse(self, f"expected a 2- or 4-byte dtype, got {problem.dtype}")

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        vectors = problem.outer * ceil_div(problem.inner, vector_size(problem.dtype))
        threads = ceil_div(vectors, 31) * 32  # a warp 31 vectors of columns and the next one's loads
        args = ("x", "out", np.int64(problem.outer)) + problem.geometry()
        return Plan((Launch(self.spec(problem.dtype, problem.log), (ceil_div(threads, self.threads),), (self.threads,), args),))


@dataclasses.dataclass(frozen=True)
class ColsSplitConfig:
    """``softmax_cols_split``: a persistent grid of ``strips_per_wave`` x ``blocks_per_strip``
    co-resident blocks (``blocks_per_sm`` an SM: the kernel's launch bound). A strip of
    ``col_lanes`` 16-byte vectors of adjacent columns is split over ``blocks_per_strip`` blocks,
    each ``part`` rows of it in tiles of ``tile_rows`` rows (``vecs`` vectors a thread):
    ``smem_tiles`` in dynamic shared memory plus, with ``register_tile``, the last one in
    registers; the blocks' column statistics meet in a global scratch (``scratch``). Only
    where ``cols_vectorizable``."""

    threads: int
    col_lanes: int
    vecs: int
    register_tile: bool
    blocks_per_sm: int
    blocks_per_strip: int
    strips_per_wave: int
    part: int
    smem_tiles: int

    def columns(self, dtype) -> int:
        return self.col_lanes * vector_size(dtype)

    @property
    def tile_rows(self) -> int:
        return self.threads // self.col_lanes * self.vecs

    @property
    def tile_bytes(self) -> int:
        return self.threads * self.vecs * 16

    @property
    def smem_bytes(self) -> int:
        return self.smem_tiles * self.tile_bytes

    @property
    def tiles_per_block(self) -> int:
        return self.smem_tiles + int(self.register_tile)

    @property
    def grid(self) -> int:
        return self.strips_per_wave * self.blocks_per_strip

    def static_smem(self, dtype) -> int:
        """The kernel's static shared memory budgeted for: (max, sum) of each column per warp
        and of the block, and one set more (the budget the cluster strips had; it sets the
        tiles a block takes, so it stays)."""
        return (self.threads // 32 + 2) * self.columns(dtype) * 2 * accumulator_dtype(dtype).itemsize

    def scratch(self, dtype) -> tuple:
        """(accumulators, arrival counters) of the exchange: (max, sum) pairs of every column of
        every block, twice (a block may publish its next strip while its slot still reads this
        one), and a counter a strip slot."""
        return 2 * self.grid * self.columns(dtype) * 2, self.strips_per_wave

    def spec(self, dtype, log: bool) -> KernelSpec:
        return KernelSpec("softmax/cols_split.cu", "softmax_cols_split",
                          (ctype(dtype), log, self.threads, self.col_lanes, self.vecs, self.register_tile, self.blocks_per_sm))

    def check(self, problem: SoftmaxProblem, dev) -> None:
        """Column vectors; blocks_per_strip parts of ``part`` rows (a part within its tiles)
        that hold the column; a grid the device keeps resident at blocks_per_sm an SM."""
        _require_column_vectors(self, problem)
        capacity = min(self.part, self.tiles_per_block * self.tile_rows)
        if self.blocks_per_strip * capacity < problem.length:
            refuse(self, f"holds {self.blocks_per_strip} x {capacity} rows a strip, got columns of {problem.length}")
        if self.grid > self.blocks_per_sm * dev.sm_count:
            refuse(self, f"needs {self.grid} co-resident blocks, got a device of {dev.sm_count} SMs at "
                         f"{self.blocks_per_sm} blocks an SM")

    def plan(self, problem: SoftmaxProblem, dev) -> Plan:
        strips = problem.outer * ceil_div(problem.inner, self.columns(problem.dtype))
        args = (("x", "out", np.int64(problem.outer)) + problem.geometry()
                + (np.int64(self.part), np.int32(self.blocks_per_strip), np.int64(strips), Scratch(0), Scratch(1)))
        launch = Launch(self.spec(problem.dtype, problem.log), (self.grid,), (self.threads,), args, smem=self.smem_bytes,
                        whole_carveout=True, resident_blocks=self.blocks_per_sm)
        return Plan((launch,), split_scratch(problem.dtype, *self.scratch(problem.dtype)))
