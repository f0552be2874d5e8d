"""cufuse._core.tma: the tensor-map rules and the cuTensorMapEncodeTiled argument packing (CPU)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cufuse._core import tma as _tma
from cufuse._core.dtypes import BFLOAT16

GOOD = _tma.MapGeometry(np.dtype(BFLOAT16), 4096, 300, 8192, 64, 128)


def test_a_good_map_has_no_problem():
    assert _tma.map_problem(GOOD, 256) is None


@pytest.mark.parametrize("change,address,words", [
    ({}, 264, "not 16-byte aligned"),
    ({"dtype": np.dtype(np.float32)}, 256, "16-bit floats only"),
    ({"stride": 8200}, 256, "row stride"),
    ({"stride": 4096}, 256, "row stride"),  # rows overlap
    ({"stride": 1 << 40}, 256, "row stride"),
    ({"inner": 0}, 256, "dimensions"),
    ({"outer": (1 << 32) + 1}, 256, "dimensions"),
    ({"box_outer": 257}, 256, "box"),
    ({"box_inner": 128}, 256, "box rows of 256 bytes"),  # wider than the 128-byte swizzle
    ({"box_inner": 4}, 256, "box rows of 8 bytes"),
    ({"swizzle": 16}, 256, "swizzle"),
    ({"l2_promotion": 96}, 256, "L2 promotion"),
])
def test_map_problems_name_the_rule(change, address, words):
    import dataclasses

    problem = _tma.map_problem(dataclasses.replace(GOOD, **change), address)
    assert problem is not None and words in problem
    with pytest.raises(ValueError, match="cannot build a tensor map"):
        _tma.encode_arguments(dataclasses.replace(GOOD, **change), address)


def test_single_row_stride_is_the_row_rounded_to_16_bytes():
    assert _tma.geometry(np.float16, 36, 1, 5, 64, 64).stride == 80
    assert _tma.geometry(np.float16, 36, 2, 40, 64, 64).stride == 80


def test_encode_arguments_follow_the_driver_signature():
    g = _tma.geometry(BFLOAT16, 264, 300, 272, 64, 128)
    (dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, promotion,
     fill) = _tma.encode_arguments(g, 0x7F0000000100)
    assert (dtype.value, rank.value, address.value) == (9, 2, 0x7F0000000100)
    assert list(dims) == [264, 300] and list(strides) == [544] and list(box) == [64, 128]
    assert list(element_strides) == [1, 1]
    assert (interleave.value, swizzle.value, promotion.value, fill.value) == (0, 3, 3, 0)
    assert isinstance(dims, ctypes.Array) and ctypes.sizeof(dims) == 16 and ctypes.sizeof(box) == 8
    assert _tma.DATA_TYPES[np.dtype(np.float16)] == 6


def test_batched_maps_add_a_third_dim():
    g = _tma.batched(_tma.geometry(BFLOAT16, 128, 1000, 128, 64, 64), 32, 128000)
    (_, rank, _, dims, strides, box, element_strides, *_rest) = _tma.encode_arguments(g, 256)
    assert rank.value == 3 and list(dims) == [128, 1000, 32] and list(strides) == [256, 256000]
    assert list(box) == [64, 64, 1] and list(element_strides) == [1, 1, 1]
    # one matrix: any valid stride (the rows' bytes rounded to 16)
    single = _tma.batched(_tma.geometry(BFLOAT16, 40, 3, 40, 64, 64), 1, 1)
    assert single.batch == 1 and single.batch_stride == 240 and _tma.map_problem(single, 0) is None
    # the unit of an overlapping layout ((B, N, H, D) viewed as (B, H, N, D)): D elements
    assert _tma.map_problem(_tma.batched(_tma.geometry(BFLOAT16, 64, 300, 192, 64, 64), 6, 64), 0) is None
    bad = _tma.batched(_tma.geometry(BFLOAT16, 64, 300, 64, 64, 64), 4, 4)  # 8-byte unit
    assert "matrices 8 bytes apart" in _tma.map_problem(bad, 0)


def test_tensor_maps_are_cached_per_geometry_and_address(monkeypatch):
    calls = []

    def fake_encode(g, address):
        calls.append((g, address))
        raw = np.zeros(_tma.MAP_BYTES // 8, dtype=np.uint64)
        raw[0] = address
        return raw

    monkeypatch.setattr(_tma, "_encode", fake_encode)
    monkeypatch.setattr(_tma, "_maps", {})
    first = _tma.cached_map(GOOD, 256)
    assert _tma.cached_map(GOOD, 256) is first and first[1] == first[0].ctypes.data and first[0][0] == 256
    _tma.cached_map(GOOD, 512)
    assert calls == [(GOOD, 256), (GOOD, 512)]


def test_l2_promotion_is_part_of_the_map():
    import dataclasses

    for promotion, value in _tma.L2_PROMOTIONS.items():
        g = dataclasses.replace(GOOD, l2_promotion=promotion)
        assert _tma.encode_arguments(g, 0)[9].value == value
