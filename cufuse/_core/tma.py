"""CUDA tensor maps (the 128-byte ``CUtensorMap`` that Hopper's TMA loads read) for 2-D
16-bit matrices (optionally a batch of them: a 3-D map), built by the driver's ``cuTensorMapEncodeTiled`` through ctypes (neither
CuPy nor NVRTC exposes it) and passed to a kernel by value.

A ``MapGeometry`` is everything of a map but the base address: element type, the two
dimensions (inner = the contiguous one first), the outer stride in bytes, the box and the
swizzle. It depends only on an array's shape and strides, so an op's cached launch plan
holds it; ``cached_map(geometry, address)`` then encodes once per (geometry, address) and
returns the map's bytes and their host address (the driver launch's parameter) from a cache
(one dict lookup per launch).

Everything but ``_encode`` runs without a GPU (the CPU tests check the rules and the packing).
"""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from .dtypes import BFLOAT16

MAP_BYTES = 128  # sizeof(CUtensorMap); the kernel declares it as TmaDescriptor (kernels/tma.cuh)
# CUtensorMapDataType / CUtensorMapSwizzle values (cuda.h, CUDA 12 and 13).
DATA_TYPES = {np.dtype(np.float16): 6, np.dtype(BFLOAT16): 9}
SWIZZLE_BYTES = {0: 0, 32: 1, 64: 2, 128: 3}  # swizzle span in bytes -> enum
# CUtensorMapL2promotion: how many bytes the L2 fetches for a box row's request.
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}
MAX_BOX = 256
MAX_DIM = 1 << 32
MAX_STRIDE = 1 << 40


@dataclasses.dataclass(frozen=True)
class MapGeometry:
    """A row-major 2-D view: ``outer`` rows of ``inner`` elements, rows ``stride`` bytes
    apart, read in boxes of ``box_outer`` x ``box_inner`` elements swizzled over
    ``swizzle`` bytes."""

    dtype: np.dtype
    inner: int
    outer: int
    stride: int  # bytes between rows
    box_inner: int
    box_outer: int
    swizzle: int = 128
    l2_promotion: int = 256  # bytes (L2_PROMOTIONS)
    batch: int = 0  # a third dim of ``batch`` matrices ``batch_stride`` bytes apart (box 1); 0: a 2-D map
    batch_stride: int = 0


def geometry(dtype, inner: int, outer: int, row_stride: int, box_inner: int, box_outer: int,
             swizzle: int = 128, l2_promotion: int = 256) -> MapGeometry:
    """The map of ``outer`` rows of ``inner`` elements ``row_stride`` elements apart. A single
    row's stride is meaningless to the caller and must still satisfy the driver (a multiple
    of 16 bytes covering the row): it becomes the row's size rounded up to 16 bytes."""
    dtype = np.dtype(dtype)
    stride = row_stride * dtype.itemsize
    if outer == 1:
        stride = -(-inner * dtype.itemsize // 16) * 16
    return MapGeometry(dtype, inner, outer, stride, box_inner, box_outer, swizzle, l2_promotion)


def batched(g: MapGeometry, batch: int, unit: int) -> MapGeometry:
    """``g`` with a third dim: ``batch`` matrices ``unit`` elements apart (any positive unit
    where batch is 1: the driver still wants a valid stride)."""
    stride = unit * g.dtype.itemsize if batch > 1 else -(-g.outer * g.stride // 16) * 16
    return dataclasses.replace(g, batch=batch, batch_stride=stride)


def map_problem(g: MapGeometry, address: int) -> str | None:
    """Why the driver would refuse this map (``cuTensorMapEncodeTiled``'s rules), or None."""
    if g.dtype not in DATA_TYPES:
        return f"element type {g.dtype} (16-bit floats only)"
    if g.swizzle not in SWIZZLE_BYTES:
        return f"swizzle of {g.swizzle} bytes"
    if g.l2_promotion not in L2_PROMOTIONS:
        return f"L2 promotion of {g.l2_promotion} bytes"
    if address % 16:
        return f"base address {address:#x} not 16-byte aligned"
    if not (0 < g.inner <= MAX_DIM and 0 < g.outer <= MAX_DIM):
        return f"dimensions {g.inner} x {g.outer} outside 1..2^32"
    if g.stride % 16 or not (g.inner * g.dtype.itemsize <= g.stride < MAX_STRIDE):
        return f"row stride of {g.stride} bytes (a multiple of 16, at least a row, below 2^40)"
    if g.batch and (not 0 < g.batch <= MAX_DIM or g.batch_stride % 16 or not 0 < g.batch_stride < MAX_STRIDE):
        return f"{g.batch} matrices {g.batch_stride} bytes apart (a positive multiple of 16 below 2^40, at most 2^32 of them)"
    if not (0 < g.box_inner <= MAX_BOX and 0 < g.box_outer <= MAX_BOX):
        return f"box {g.box_inner} x {g.box_outer} outside 1..256"
    inner_bytes = g.box_inner * g.dtype.itemsize
    if inner_bytes % 16 or (g.swizzle and inner_bytes > g.swizzle):
        return f"box rows of {inner_bytes} bytes (a multiple of 16, at most the {g.swizzle}-byte swizzle)"
    return None


def encode_arguments(g: MapGeometry, address: int) -> tuple:
    """``cuTensorMapEncodeTiled``'s arguments after the output map, as ctypes values."""
    problem = map_problem(g, address)
    if problem is not None:
        raise ValueError(f"cufuse: cannot build a tensor map: {problem}")
    dims, strides, box = [g.inner, g.outer], [g.stride], [g.box_inner, g.box_outer]
    if g.batch:
        dims, strides, box = dims + [g.batch], strides + [g.batch_stride], box + [1]
    rank = len(dims)
    return (
        ctypes.c_int(DATA_TYPES[g.dtype]),
        ctypes.c_uint32(rank),
        ctypes.c_void_p(address),
        (ctypes.c_uint64 * rank)(*dims),  # globalDim, innermost first
        (ctypes.c_uint64 * (rank - 1))(*strides),  # globalStrides of the dimensions above the first, bytes
        (ctypes.c_uint32 * rank)(*box),  # boxDim
        (ctypes.c_uint32 * rank)(*[1] * rank),  # elementStrides
        ctypes.c_int(0),  # CU_TENSOR_MAP_INTERLEAVE_NONE
        ctypes.c_int(SWIZZLE_BYTES[g.swizzle]),
        ctypes.c_int(L2_PROMOTIONS[g.l2_promotion]),
        ctypes.c_int(0),  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros outside the tensor
    )


_driver = None


def _encode_tiled():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        _driver = fn
    return _driver


def _encode(g: MapGeometry, address: int) -> np.ndarray:
    """The 128 map bytes (16 uint64, the host copy the launch passes by value)."""
    raw = np.zeros(MAP_BYTES // 8, dtype=np.uint64)
    status = _encode_tiled()(ctypes.c_void_p(raw.ctypes.data), *encode_arguments(g, address))
    if status != 0:
        raise RuntimeError(f"cufuse: cuTensorMapEncodeTiled failed with CUresult {status} for {g} at {address:#x}")
    return raw


_MAX_MAPS = 4096
_maps: dict = {}


def cached_map(g: MapGeometry, address: int) -> tuple:
    """``(map bytes, host address of the bytes)`` of the map of ``g`` at ``address``, cached
    (the map depends on where the memory is, not on its contents). A caller that launches
    with the host address holds the tuple until the launch returns (the driver copies the
    128 bytes from it during the call)."""
    key = (g, address)
    entry = _maps.get(key)
    if entry is None:
        if len(_maps) >= _MAX_MAPS:
            _maps.clear()
        raw = _encode(g, address)
        entry = _maps[key] = (raw, raw.ctypes.data)
    return entry
