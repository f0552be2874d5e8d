"""The problem of one softmax call: x viewed as the row problem (outer, length, inner) with
element strides (so, sl, si) (``cufuse._core.rows``), reduced over the middle axis into a
C-contiguous out; the facts about that view which the selection rules and the variants' checks
share, and the variants' common helpers (the refusal of a config, the cluster twins' specs).
Pure (no GPU).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..._core.device import ceil_div
from ..._core.loader import KernelSpec
from ..._core.rows import RowProblem, collapse, cols_vectorizable, vector_size

__all__ = ["SoftmaxProblem", "cluster_twin_spec", "collapse", "cols_vectorizable", "refuse", "require_clusters",
           "row_share", "vector_size"]


def row_share(length: int, parts: int, dtype) -> int:
    """Elements of a row of ``length`` that each of ``parts`` blocks holds: whole 16-byte
    vectors, so that every block's share starts aligned where the row does."""
    vs = vector_size(dtype)
    return ceil_div(ceil_div(length, parts), vs) * vs


@dataclasses.dataclass(frozen=True)
class SoftmaxProblem(RowProblem):
    """One call after the layout collapse: ``rows`` = outer x inner rows of ``length``."""

    dtype: np.dtype
    log: bool

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
