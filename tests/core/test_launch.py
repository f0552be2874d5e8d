"""cufuse._core.launch: the cuLaunchKernelEx structures and the argument packing (CPU, through a
fake driver entry point); the GPU behaviour is tested through the ops that launch with it
(tests/linear/, "programmatic dependent launch")."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cufuse._core import launch as _launch


def test_structures_match_cuda_h():
    # CUlaunchAttribute: a 4-byte id, 4 pad bytes, a 64-byte value union; CUlaunchConfig:
    # six dims and the shared-memory size, then the stream, the attributes and their count.
    assert ctypes.sizeof(_launch._LaunchAttribute) == 72 and _launch._LaunchAttribute.value.offset == 8
    config = _launch._LaunchConfig
    assert (config.smem.offset, config.stream.offset, config.attrs.offset, config.num_attrs.offset) == (24, 32, 40, 48)
    assert ctypes.sizeof(config) == 56


class FakeDriver:
    """Stands in for cuLaunchKernelEx: decodes what a launch passes."""

    def __init__(self, kinds):
        self.kinds, self.launches = kinds, []

    def __call__(self, config_address, function, params, extra):
        config = _launch._LaunchConfig.from_address(config_address)
        attribute = config.attrs[0] if config.num_attrs else None
        values = []
        for index, kind in enumerate(self.kinds):
            address = params[index]
            if kind is _launch.MAP:
                values.append(("map", address))
            elif kind is _launch.POINTER:
                values.append(ctypes.c_uint64.from_address(address).value)
            else:
                values.append(_launch.scalar_argument(kind).__class__.from_address(address).value)
        self.launches.append(dict(grid=tuple(config.grid), block=tuple(config.block), smem=config.smem,
                                  stream=config.stream,
                                  attribute=(attribute.id, attribute.value) if attribute else None,
                                  num_attrs=config.num_attrs, function=function.value, extra=extra, values=values))
        return 0


def _fake_kernel(ptr=0x1234):
    return types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=ptr), name="fake")


def test_packs_pointers_maps_and_scalars_in_argument_order(monkeypatch):
    kinds = (_launch.MAP, _launch.MAP, _launch.POINTER, _launch.POINTER, np.uint64(0), np.int64(-5), np.int32(7),
             np.float32(0.5))
    driver = FakeDriver(kinds)
    monkeypatch.setattr(_launch, "_driver", driver)
    launch = _launch.DriverLaunch(_fake_kernel(), (128, 1, 2), (160, 1, 1), 81920, kinds, pdl=True)
    maps = (np.zeros(16, np.uint64), np.ones(16, np.uint64))
    launch(0xABC, (0x7000, 0x8000), (maps[0].ctypes.data, maps[1].ctypes.data))
    launch(0, (0x9000, 0))
    first, second = driver.launches
    assert first["grid"] == (128, 1, 2) and first["block"] == (160, 1, 1) and first["smem"] == 81920
    assert first["stream"] == 0xABC and second["stream"] in (None, 0)
    assert first["attribute"] == (_launch.PROGRAMMATIC_STREAM_SERIALIZATION, 1) and first["num_attrs"] == 1
    assert first["function"] == 0x1234 and first["extra"] is None
    assert first["values"] == [("map", maps[0].ctypes.data), ("map", maps[1].ctypes.data), 0x7000, 0x8000, 0, -5, 7,
                               0.5]
    assert second["values"][2:4] == [0x9000, 0]  # new pointers; the maps of the last call stay
    assert second["values"][:2] == first["values"][:2]


def test_plain_launches_carry_no_attribute_and_pad_their_dims(monkeypatch):
    kinds = (_launch.POINTER, np.int32(3))
    driver = FakeDriver(kinds)
    monkeypatch.setattr(_launch, "_driver", driver)
    _launch.DriverLaunch(_fake_kernel(), (4,), (160, 2), 0, kinds)(0xABC, (0x7000,))
    (launch,) = driver.launches
    assert launch["grid"] == (4, 1, 1) and launch["block"] == (160, 2, 1)
    assert launch["num_attrs"] == 0 and launch["attribute"] is None and launch["values"] == [0x7000, 3]


def test_a_failed_launch_names_the_kernel(monkeypatch):
    monkeypatch.setattr(_launch, "_driver", lambda *args: 701)
    launch = _launch.DriverLaunch(_fake_kernel(), (1, 1, 1), (32, 1, 1), 0, (_launch.POINTER,))
    with pytest.raises(RuntimeError, match="CUresult 701 .fake"):
        launch(0, (0x10,))


def test_refuses_a_scalar_without_a_c_type():
    with pytest.raises(TypeError, match="no kernel argument type for int16"):
        _launch.DriverLaunch(_fake_kernel(), (1, 1, 1), (32, 1, 1), 0, (np.int16(3),))
