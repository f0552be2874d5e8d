"""The problem of one softmax call: x viewed as (outer, length, inner) with element strides
(so, sl, si), reduced over the middle axis into a C-contiguous out; the facts about that view
which the selection rules and the variants' checks share, and the variants' common helpers
(the refusal of a config, the cluster twins' specs). Pure (no GPU).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec


def collapse(shape, strides, axes):
    """(outer, length, inner) sizes and (so, sl, si) element strides of x reduced over
    ``axes``, or None when the axes are not consecutive or a group of axes does not
    collapse to one stride. Size-1 axes are dropped; an absent group has size 1, stride 0.
    """
    kept = [d for d in range(len(shape)) if shape[d] != 1]
    reduced = [d for d in kept if d in axes]
    if reduced and kept[kept.index(reduced[0]) : kept.index(reduced[-1]) + 1] != reduced:
        return None
    first = kept.index(reduced[0]) if reduced else len(kept)
    groups = (kept[:first], reduced, kept[first + len(reduced) :])
    sizes, group_strides = [], []
    for group in groups:
        for a, b in zip(group, group[1:]):
            if strides[a] != strides[b] * shape[b]:
                return None
        sizes.append(math.prod(shape[d] for d in group))
        group_strides.append(strides[group[-1]] if group else 0)
    return tuple(sizes), tuple(group_strides)


def vector_size(dtype) -> int:
    """Elements of ``dtype`` in a 16-byte vector: the unit every capacity is counted in."""
    return 16 // np.dtype(dtype).itemsize


def row_share(length: int, parts: int, dtype) -> int:
    """Elements of a row of ``length`` that each of ``parts`` blocks holds: whole 16-byte
    vectors, so that every block's share starts aligned where the row does."""
    vs = vector_size(dtype)
    return ceil_div(ceil_div(length, parts), vs) * vs


def cols_vectorizable(outer: int, inner: int, so: int, sl: int, dtype) -> bool:
    """Whether a column layout (inner axis contiguous) can be read and written as 16-byte
    vectors of adjacent columns: every vector starts at a multiple of the vector size (where
    the base is aligned; the kernels test the base). Any dtype: which kernels take float64
    vectors is theirs to say (the two-read and split kernels do not)."""
    vs = vector_size(dtype)
    return inner % vs == 0 and sl % vs == 0 and (outer == 1 or so % vs == 0)


@dataclasses.dataclass(frozen=True)
class SoftmaxProblem:
    """One call after the layout collapse: ``rows`` = outer x inner rows of ``length``."""

    outer: int
    length: int
    inner: int
    so: int
    sl: int
    si: int
    dtype: np.dtype
    log: bool

    @property
    def rows(self) -> int:
        return self.outer * self.inner

    @property
    def sizes(self) -> tuple:
        return self.outer, self.length, self.inner

    @property
    def strides(self) -> tuple:
        return self.so, self.sl, self.si

    @property
    def vectors(self) -> int:
        """16-byte vectors of a row."""
        return ceil_div(self.length, vector_size(self.dtype))

    @property
    def max_row_misalignment(self) -> int:
        """The most elements past a 16-byte boundary that one of several contiguous rows
        (input and output) starts, where the array starts on one: row o starts at o * so,
        a multiple of gcd(so, VS). The one-block-a-row kernels hold such a row from the
        boundary below (``align_row_origin``)."""
        if self.sl != 1 or self.inner != 1 or self.outer == 1:
            return 0
        vs = vector_size(self.dtype)
        return vs - math.gcd(self.so, vs)

    @property
    def dense_rows(self) -> bool:
        """The rows one after another in memory: unit element stride (rows of one element have
        none), each row where the last ends (the span kernel's layout)."""
        return (self.sl == 1 or self.length == 1) and self.inner == 1 and (self.outer == 1 or self.so == self.length)

    @property
    def column_layout(self) -> bool:
        """The reduced axis strided over a contiguous inner axis (axis=0 of a C-contiguous
        matrix): the column kernels' layout. Everything else runs the row kernels."""
        return self.sl != 1 and self.si == 1

    @property
    def vectorizable(self) -> bool:
        """A column layout whose every 16-byte vector of adjacent columns is aligned."""
        return self.column_layout and cols_vectorizable(self.outer, self.inner, self.so, self.sl, self.dtype)

    def geometry(self) -> tuple:
        """The kernels' (length, inner, so, si, sl) arguments."""
        return tuple(np.int64(v) for v in (self.length, self.inner, self.so, self.si, self.sl))


def refuse(config, message: str):
    """The ValueError of a ``config=`` that cannot run the problem."""
    raise ValueError(f"softmax: argument 'config' {config} {message}")


def require_clusters(config, cluster: int, dev) -> None:
    """Thread-block clusters (``cluster`` > 1) need compute capability 9.0, and at most the
    portable 8 blocks (no default takes more: larger clusters measured slower)."""
    if cluster > 1 and dev.cc < 90:
        refuse(config, f"needs thread-block clusters (compute capability 9.0), got a device of compute capability "
                       f"{dev.cc // 10}.{dev.cc % 10}")
    if cluster > dev.max_cluster_size:
        refuse(config, f"expected a cluster of at most {dev.max_cluster_size} blocks, got {cluster}")


def cluster_twin_spec(source: str, name: str, args: tuple, cluster: int) -> KernelSpec:
    """The one-block kernel ``name``, or for ``cluster`` > 1 its twin ``name_cluster`` (sm_90),
    whose last template argument is the cluster size."""
    if cluster == 1:
        return KernelSpec(source, name, args)
    return KernelSpec(source, f"{name}_cluster", args + (cluster,), min_cc=90)
