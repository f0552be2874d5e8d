"""The logsumexp kernel families' variants: ``RowsConfig`` (``kernels/logsumexp/rows.cu``),
``ColsConfig`` (``kernels/logsumexp/cols.cu``), ``ColsShortConfig`` and ``ColsShortVecConfig``
(``kernels/logsumexp/cols_short.cu``). Each owns its spec, its check of a ``config=`` and its
plan; which one runs where: ``select`` and docs/logsumexp.md."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.dtypes import accumulator_dtype, ctype
from ..._core.loader import KernelSpec
from ..._core.plans import NULL, Launch, Plan, Scratch, ScratchRequest
from ..._core.rows import vector_size
from .problem import LogsumexpProblem


def refuse(config, message: str):
    raise ValueError(f"logsumexp: argument 'config' {config} {message}")


def parts_scratch(dtype, items: int, parts: int, counters: int) -> ScratchRequest:
    """A split reduction's exchange: (m, s, dropped) a part of each item and an arrival counter
    an item (or strip), zero on entry and left zero on exit; per device, stream and
    accumulator dtype."""
    acc = accumulator_dtype(dtype)
    return ScratchRequest(f"logsumexp-parts-{acc.name}", ((acc, 3 * items * parts, False), (np.dtype(np.uint32), counters, True)))


def _launch(spec, grid, threads, problem: LogsumexpProblem, parts: int, part_len: int, scratch) -> Plan:
    exchange = (Scratch(0), Scratch(1)) if scratch is not None else (NULL, NULL)
    args = ("a", "b", "value", "sign") + problem.geometry() + (np.int32(parts), np.int64(part_len)) + exchange
    return Plan((Launch(spec, (grid,), (threads,), args),), scratch)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowsConfig:
    """``logsumexp_rows``: ``group`` threads a row (a power of two up to 32, several rows a
    block; or the whole block, ``group == threads``), ``vecs`` 16-byte vectors a thread a
    tile; ``parts`` blocks a row (block groups only), merged by the last to finish."""

    threads: int
    group: int
    vecs: int
    parts: int = 1

    def spec(self, dtype, weighted: bool) -> KernelSpec:
        return KernelSpec("logsumexp/rows.cu", "logsumexp_rows", (ctype(dtype), weighted, self.threads, self.group, self.vecs))

    def check(self, problem: LogsumexpProblem, dev) -> None:
        if self.threads not in (128, 256, 512) or self.vecs not in (1, 2, 4, 8):
            refuse(self, "expected threads 128, 256 or 512 and vecs 1, 2, 4 or 8")
        if self.group != self.threads and self.group not in (1, 2, 4, 8, 16, 32):
            refuse(self, f"expected a group of 1, 2, 4, 8, 16, 32 or {self.threads} threads, got {self.group}")
        if not 1 <= self.parts <= 65536 or (self.parts > 1 and self.group != self.threads):
            refuse(self, "expected parts in [1, 65536], more than 1 only with a block a group")

    def part_len(self, problem: LogsumexpProblem) -> int:
        """Coordinates a part covers: whole vectors, so that each part starts aligned."""
        vs = vector_size(problem.dtype)
        return ceil_div(ceil_div(problem.span, self.parts), vs) * vs

    def plan(self, problem: LogsumexpProblem, dev) -> Plan:
        groups = problem.rows * self.parts
        grid = ceil_div(groups, self.threads // self.group)
        scratch = parts_scratch(problem.dtype, problem.rows, self.parts, problem.rows) if self.parts > 1 else None
        return _launch(self.spec(problem.dtype, problem.weighted), grid, self.threads, problem, self.parts,
                       self.part_len(problem), scratch)


def _require_columns(config, problem: LogsumexpProblem) -> None:
    if not problem.column_layout:
        refuse(config, "expected a layout whose adjacent rows are adjacent in memory and whose reduced axis is strided")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColsConfig:
    """``logsumexp_cols``: a lane a row, 32 rows a block of ``slices`` warps, each taking runs
    of ``unroll`` elements of the reduced axis; ``parts`` blocks a strip of 32 rows."""

    slices: int
    unroll: int
    parts: int = 1

    def spec(self, dtype, weighted: bool) -> KernelSpec:
        return KernelSpec("logsumexp/cols.cu", "logsumexp_cols", (ctype(dtype), weighted, self.slices, self.unroll))

    def check(self, problem: LogsumexpProblem, dev) -> None:
        if self.slices not in (4, 8, 16) or self.unroll not in (2, 4, 8, 16):
            refuse(self, "expected slices 4, 8 or 16 and unroll 2, 4, 8 or 16")
        if not 1 <= self.parts <= 1024:
            refuse(self, f"expected parts in [1, 1024], got {self.parts}")
        _require_columns(self, problem)

    def plan(self, problem: LogsumexpProblem, dev) -> Plan:
        strips = ceil_div(problem.rows, 32)
        scratch = parts_scratch(problem.dtype, strips * 32, self.parts, strips) if self.parts > 1 else None
        return _launch(self.spec(problem.dtype, problem.weighted), strips * self.parts, 32 * self.slices, problem,
                       self.parts, ceil_div(problem.length, self.parts), scratch)


def _require_short_columns(config, problem: LogsumexpProblem) -> None:
    _require_columns(config, problem)
    if problem.length > config.max_length:
        refuse(config, f"holds rows of up to {config.max_length} elements, got {problem.length}")


def _short_launch(config, problem: LogsumexpProblem, width: int) -> Plan:
    """The short-column kernels: a thread ``width`` adjacent rows, ``config.threads`` threads a block."""
    grid = ceil_div(problem.rows // width, config.threads)
    args = ("a", "b", "value", "sign") + problem.geometry()
    return Plan((Launch(config.spec(problem.dtype, problem.weighted), (grid,), (config.threads,), args),))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColsShortConfig:
    """``logsumexp_cols_short``: in the column layout, a thread a row of at most
    ``max_length`` elements, all loaded at once into registers; ``threads`` rows a block."""

    threads: int
    max_length: int

    def spec(self, dtype, weighted: bool) -> KernelSpec:
        return KernelSpec("logsumexp/cols_short.cu", "logsumexp_cols_short", (ctype(dtype), weighted, self.threads, self.max_length))

    def check(self, problem: LogsumexpProblem, dev) -> None:
        _require_short_columns(self, problem)

    def plan(self, problem: LogsumexpProblem, dev) -> Plan:
        return _short_launch(self, problem, 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColsShortVecConfig:
    """``logsumexp_cols_short_vec``: a thread a 16-byte vector of adjacent rows of at most
    ``max_length`` elements (``LogsumexpProblem.column_vectors``), all loaded at once; ``threads``
    vectors a block, the registers bounded for ``blocks_per_sm`` blocks an SM (the launch bound)."""

    threads: int
    max_length: int
    blocks_per_sm: int

    def spec(self, dtype, weighted: bool) -> KernelSpec:
        return KernelSpec("logsumexp/cols_short.cu", "logsumexp_cols_short_vec",
                          (ctype(dtype), weighted, self.threads, self.max_length, self.blocks_per_sm))

    def check(self, problem: LogsumexpProblem, dev) -> None:
        _require_short_columns(self, problem)
        if not problem.column_vectors:
            refuse(self, f"expected every 16-byte vector of adjacent rows aligned (a's base, the strides and the runs of "
                         f"adjacent rows multiples of 16 bytes); got (outer, length, inner) = "
                         f"({problem.outer}, {problem.length}, {problem.inner}), element strides (so, sl, si) = "
                         f"({problem.so}, {problem.sl}, {problem.si}), base aligned {problem.base_aligned}")

    def plan(self, problem: LogsumexpProblem, dev) -> Plan:
        return _short_launch(self, problem, vector_size(problem.dtype))
