"""Every kernel instantiation the default selection of each op can reach on a device: what
``python -m cufuse precompile`` compiles and CI's ``check-compile`` builds for sm_90a and
sm_80. Each op lists its own in ``cufuse.ops.<op>.select.instantiations(dev)``."""
from __future__ import annotations

import importlib

from .device import DeviceInfo
from .loader import KernelSpec

OPS = ("softmax", "logsumexp", "linear", "attention", "paged_attention")


def selftest_instantiations() -> list:
    """The loader's self-test kernel at two tile sizes (``python -m cufuse info`` and the
    loader's GPU test launch it)."""
    return [
        KernelSpec("common/selftest.cu", "scaled_copy", ("float", 128, 4)),
        KernelSpec("common/selftest.cu", "scaled_copy", ("float", 256, 2)),
    ]


def op_instantiations(op: str, dev: DeviceInfo) -> list:
    return list(importlib.import_module(f"cufuse.ops.{op}.select").instantiations(dev))


def all_instantiations(dev: DeviceInfo) -> list:
    """Every instantiation for ``dev``, without duplicates, those ``dev`` cannot run left out."""
    specs = selftest_instantiations()
    for op in OPS:
        specs.extend(s for s in op_instantiations(op, dev) if dev.cc >= s.min_cc)
    return list(dict.fromkeys(specs))
