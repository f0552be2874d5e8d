"""How q, k and v lie in memory, as the kernels read them (pure): the broadcast batch dims
collapsed into at most MAX_BATCH_DIMS strided dims (``BatchLayout`` in
kernels/common/attention_layout.cuh), and whether an operand's rows allow 16-byte loads."""
from __future__ import annotations

MAX_BATCH_DIMS = 4  # collapsed leading dims the kernels decompose (BatchLayout)


def batch_layout(batch, operands):
    """Collapse the broadcast batch dims for the kernels.

    ``operands`` maps a name to ``(shape, element strides)`` of q, k or v. Each operand's
    batch strides are right-aligned to ``batch`` with 0 on broadcast dims; size-1 dims are
    dropped and adjacent dims merged where every operand allows it. Returns
    ``(sizes, {name: strides})`` padded in front to MAX_BATCH_DIMS dims.
    """
    ndim = len(batch)
    dims = []  # (size, {name: stride}) outermost first
    for axis, size in enumerate(batch):
        if size == 1:
            continue
        strides = {}
        for name, (shape, elem_strides) in operands.items():
            lead = len(shape) - 2
            pos = axis - (ndim - lead)
            strides[name] = elem_strides[pos] if pos >= 0 and shape[pos] == size else 0
        if dims and all(dims[-1][1][n] == strides[n] * size for n in operands):
            dims[-1] = (dims[-1][0] * size, strides)
        else:
            dims.append((size, strides))
    if len(dims) > MAX_BATCH_DIMS:
        raise ValueError(
            f"attention: arguments 'q', 'k', 'v' expected leading dims that collapse to at most "
            f"{MAX_BATCH_DIMS} strided dims, got batch shape {tuple(batch)} with strides "
            + ", ".join(f"{n} {s[1][:len(s[0]) - 2]}" for n, s in operands.items())
        )
    dims = [(1, {n: 0 for n in operands})] * (MAX_BATCH_DIMS - len(dims)) + dims
    return tuple(size for size, _ in dims), {n: tuple(st[n] for _, st in dims) for n in operands}


def rows_16b(elem_strides, cols, batch_strides, base_aligned) -> bool:
    """16-byte loads apply to an operand: unit column stride, rows of a multiple of 8
    elements, row and batch strides multiples of 8 elements, a 16-byte aligned base."""
    return (
        elem_strides[-1] == 1
        and cols % 8 == 0
        and elem_strides[-2] % 8 == 0
        and all(st % 8 == 0 for st in batch_strides)
        and base_aligned
    )
