"""The row problem of the reductions over one group of axes: an array viewed as (outer,
length, inner) with element strides (so, sl, si), reduced over the middle axis, one row for
each of the outer x inner positions. The collapse of an array's axes into that view and the
16-byte vector facts about it. Pure (no GPU).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np


def collapse(shape, strides, axes):
    """(outer, length, inner) sizes and (so, sl, si) element strides of an array reduced over
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


def cols_vectorizable(outer: int, inner: int, so: int, sl: int, dtype) -> bool:
    """Whether a column layout (inner axis contiguous) can be read and written as 16-byte
    vectors of adjacent columns: every vector starts at a multiple of the vector size (where
    the base is aligned; the kernels test the base). Any dtype: which kernels take float64
    vectors is theirs to say."""
    vs = vector_size(dtype)
    return inner % vs == 0 and sl % vs == 0 and (outer == 1 or so % vs == 0)


@dataclasses.dataclass(frozen=True)
class RowProblem:
    """The collapsed view: ``rows`` = outer x inner rows of ``length``, element strides
    (so, sl, si). Each reduction's problem adds its own fields (dtype, flags, operands)."""

    outer: int
    length: int
    inner: int
    so: int
    sl: int
    si: int

    @property
    def rows(self) -> int:
        return self.outer * self.inner

    @property
    def sizes(self) -> tuple:
        return self.outer, self.length, self.inner

    @property
    def strides(self) -> tuple:
        return self.so, self.sl, self.si
