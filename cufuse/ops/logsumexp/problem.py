"""The problem of one logsumexp call: a (and b, broadcast to a's shape) viewed as the row
problem (outer, length, inner) (``cufuse._core.rows``), one value (and sign) a row into
C-contiguous outputs. Pure (no GPU)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..._core.device import ceil_div
from ..._core.rows import RowProblem, collapse, cols_vectorizable, vector_size


@dataclasses.dataclass(frozen=True)
class LogsumexpProblem(RowProblem):
    """``rows`` = outer x inner rows of ``length``; element strides of a (so, sl, si) and of
    the weights b (bo, bl, bi; None without b); ``base_aligned``: a's first element on a
    16-byte boundary."""

    b_strides: tuple | None
    dtype: np.dtype
    base_aligned: bool

    @property
    def weighted(self) -> bool:
        return self.b_strides is not None

    @property
    def column_layout(self) -> bool:
        """The reduced axis strided and adjacent rows adjacent in memory (axis=0 of a
        C-contiguous matrix, a middle axis, the last axis of a transposed view): a lane a row."""
        row_stride = self.so if self.inner == 1 else self.si
        return self.sl != 1 and self.rows > 1 and row_stride == 1

    @property
    def aligned(self) -> bool:
        """Every row of a starts on a 16-byte boundary (so no row needs a masked head vector)."""
        vs = vector_size(self.dtype)
        return self.base_aligned and (self.outer == 1 or self.so % vs == 0) and (self.inner == 1 or self.si % vs == 0)

    @property
    def column_vectors(self) -> bool:
        """A column layout whose every VS adjacent rows (from a multiple of VS) are one aligned
        16-byte vector at each reduced index: a's base aligned and, as
        ``cols_vectorizable`` says of the runs of adjacent rows (inner; outer where inner is 1),
        the runs, their strides and sl multiples of VS."""
        if not (self.column_layout and self.base_aligned):
            return False
        if self.inner == 1:  # adjacent rows: the outer axis, unit stride
            return cols_vectorizable(1, self.outer, 0, self.sl, self.dtype)
        return cols_vectorizable(self.outer, self.inner, self.so, self.sl, self.dtype)

    @property
    def span(self) -> int:
        """Coordinates a row's slots cover: its length, plus the masked head of a row that
        starts inside a 16-byte vector."""
        return self.length if self.aligned or self.sl != 1 else self.length + vector_size(self.dtype) - 1

    @property
    def vectors(self) -> int:
        """16-byte slots a row needs."""
        return ceil_div(self.span, vector_size(self.dtype))

    def geometry(self) -> tuple:
        """The kernels' (rows, length, inner, so, si, sl, bo, bi, bl) arguments."""
        bo, bl, bi = self.b_strides or (0, 0, 0)
        return tuple(np.int64(v) for v in (self.rows, self.length, self.inner, self.so, self.si, self.sl, bo, bi, bl))


def make_problem(shape, strides, b_strides, dtype, axes, base_aligned: bool):
    """The LogsumexpProblem of a (element ``strides``) reduced over ``axes``, b (element strides of
    its view broadcast to ``shape``, or None), or None when a or b does not collapse to one
    (outer, length, inner) view (the caller copies)."""
    layout = collapse(shape, strides, set(axes))
    if layout is None:
        return None
    b_layout = None
    if b_strides is not None:
        b_layout = collapse(shape, b_strides, set(axes))
        if b_layout is None:
            return None
    (outer, length, inner), (so, sl, si) = layout
    return LogsumexpProblem(outer, length, inner, so, sl, si, None if b_layout is None else b_layout[1], np.dtype(dtype),
                      bool(base_aligned))
