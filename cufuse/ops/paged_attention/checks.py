"""attention_paged's and kv_append's argument checks beyond the shared validators: page pools,
block tables, lengths, packed rows and their prefix sums; on the NumPy path (and under
CUFUSE_DEBUG=1) every page index and length a call uses."""
from __future__ import annotations

import numpy as np

from ..._core.validate import require_ndim
from .problem import UNLIMITED

MAX_HEAD_DIM = 256


def check_pages(fn, k_pages, v_pages, head_dim, head_name) -> int:
    """k_pages ``(P, Hkv, S, head_dim)`` and v_pages ``(P, Hkv, S, Dv)`` with unit last strides;
    returns Hkv."""
    n_pages, heads_kv, page_size, dim = k_pages.shape
    if dim != head_dim:
        raise ValueError(f"{fn}: argument 'k_pages' expected last axis {head_dim} ({head_name}'s head dim), "
                         f"got shape {k_pages.shape}")
    if v_pages.shape[:3] != k_pages.shape[:3]:
        raise ValueError(f"{fn}: argument 'v_pages' expected (P, Hkv, S) = {k_pages.shape[:3]} (k_pages'), "
                         f"got shape {v_pages.shape}")
    if heads_kv < 1 or page_size < 1:
        raise ValueError(f"{fn}: argument 'k_pages' expected at least one head (axis 1) and a page size (axis 2) "
                         f"of at least 1, got shape {k_pages.shape}")
    for name, arr in (("k_pages", k_pages), ("v_pages", v_pages)):
        if not 1 <= arr.shape[-1] <= MAX_HEAD_DIM:
            raise ValueError(f"{fn}: argument '{name}' expected a head dim from 1 to {MAX_HEAD_DIM}, got {arr.shape[-1]}")
        if arr.shape[-1] > 1 and arr.strides[-1] != arr.itemsize:
            raise ValueError(f"{fn}: argument '{name}' expected a unit stride on the last axis, got strides "
                             f"{arr.strides} (bytes)")
    return heads_kv


def require_rows(fn, name, arr, packed, packed_shape, padded_shape, cu_name) -> None:
    """q (k_new, v_new): 3-D packed rows with cu_seqlens_*, else 4-D."""
    if packed and arr.ndim != 3:
        raise ValueError(f"{fn}: argument '{name}' expected a 3-D array {packed_shape} with {cu_name}, got shape "
                         f"{arr.shape}")
    if not packed and arr.ndim != 4:
        raise ValueError(f"{fn}: argument '{name}' expected a 4-D array {padded_shape} (3-D packed rows need "
                         f"{cu_name}), got shape {arr.shape}")


def check_seq_lens(fn, seq_lens) -> int:
    """seq_lens int32 1-D; returns B (the packed calls' batch)."""
    if seq_lens.dtype != np.int32:
        raise TypeError(f"{fn}: argument 'seq_lens' expected dtype int32, got {seq_lens.dtype}")
    require_ndim(fn, "seq_lens", seq_lens, exactly=1)
    return seq_lens.shape[0]


def check_cu(fn, name, cu, batch, n_tokens, rows_name, total) -> None:
    """A cu_seqlens_* argument: int32 1-D of B + 1 entries; rows without a sequence (B = 0 with
    Tq or Tnew > 0) are refused here, from shapes alone."""
    if cu.dtype != np.int32:
        raise TypeError(f"{fn}: argument '{name}' expected dtype int32, got {cu.dtype}")
    require_ndim(fn, name, cu, exactly=1)
    if cu.shape[0] != batch + 1:
        raise ValueError(f"{fn}: argument '{name}' expected {batch + 1} entries (B + 1, B = {batch} sequences), got "
                         f"shape {cu.shape}")
    if batch == 0 and n_tokens > 0:
        raise ValueError(f"{fn}: argument '{rows_name}' expected no rows ({total} = 0) without a sequence, got "
                         f"{n_tokens}")


def host(cu):
    """A prefix sum as a NumPy array (a GPU one is copied: CUFUSE_DEBUG=1 only)."""
    return cu if isinstance(cu, np.ndarray) else cu.get()


def check_table(fn, block_table, seq_lens, batch, page_size) -> None:
    for name, arr, ndim in (("block_table", block_table, 2), ("seq_lens", seq_lens, 1)):
        if arr.dtype != np.int32:
            raise TypeError(f"{fn}: argument '{name}' expected dtype int32, got {arr.dtype}")
        require_ndim(fn, name, arr, exactly=ndim)
        if arr.shape[0] != batch:
            raise ValueError(f"{fn}: argument '{name}' expected {batch} rows (the batch), got shape {arr.shape}")
    if block_table.shape[1] * page_size > UNLIMITED:
        raise ValueError(f"{fn}: argument 'block_table' expected max_pages * S <= {UNLIMITED} keys, got "
                         f"{block_table.shape[1]} pages of {page_size}")


def check_indices(fn, xp, block_table, seq_lens, n_pages, page_size, n_new=0) -> None:
    """Every page a sequence uses (its first ceil((len + n_new) / S) table entries) in [0, P),
    and 0 <= len, len + n_new <= max_pages * S; ``n_new`` one count for all or one a sequence
    (packed). Synchronises on the GPU (CUFUSE_DEBUG=1 only)."""
    max_keys = block_table.shape[1] * page_size
    lengths = seq_lens.astype(np.int64)
    room = max_keys - xp.broadcast_to(xp.asarray(n_new, dtype=np.int64), lengths.shape)
    if lengths.size and bool(xp.any((lengths < 0) | (lengths > room))):
        bad = int(xp.argmax((lengths < 0) | (lengths > room)))
        new = " minus the sequence's new rows" if np.ndim(n_new) else " - Nnew" if n_new else ""
        raise ValueError(f"{fn}: argument 'seq_lens' expected lengths from 0 to {int(room[bad])} (max_pages * S"
                         f"{new}), got {int(lengths[bad])} at index {bad}")
    pages_used = -(-(lengths + n_new) // page_size)
    used = xp.arange(block_table.shape[1])[None, :] < pages_used[:, None]
    bad = used & ((block_table < 0) | (block_table >= n_pages))
    if bad.size and bool(xp.any(bad)):
        b, slot = divmod(int(xp.argmax(bad.ravel())), block_table.shape[1])
        raise ValueError(f"{fn}: argument 'block_table' expected page indices in [0, {n_pages}) for the pages a "
                         f"sequence uses, got {int(block_table[b, slot])} at [{b}, {slot}]")


def element_strides(arrays, names) -> dict:
    return {n: tuple(st // arrays[n].itemsize for st in arrays[n].strides) for n in names}
