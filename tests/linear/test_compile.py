"""CPU (NVRTC) tests of every linear kernel the default selection can reach: it compiles for
its device's architecture without local-memory spills, and the blocks per SM its config
counts on fit the SM's registers. Compiled through the loader's disk cache (``python -m
cufuse precompile`` or ``check-compile`` warm it)."""
from __future__ import annotations

import pytest

from cufuse._core import loader
from cufuse._core.device import A100, H200
from cufuse.ops.linear import select
from cufuse.ops.linear.pingpong import PingPongConfig

from ..conftest import SETMAXNREG_IGNORED, WGMMA_SERIALISED, requires_nvrtc

pytestmark = requires_nvrtc
DEVICES = {"sm_90a": H200, "sm_80": A100}


@pytest.fixture(scope="module")
def compiled():
    """{(arch, spec): CacheEntry} of every reachable linear instantiation."""
    results = {}
    for arch, dev in DEVICES.items():
        specs = select.instantiations(dev)
        for spec, entry, error in loader.precompile(specs, arch):
            assert error is None, error
            results[arch, spec] = entry
    return results


def _blocks_counted_on(tile, dev):
    """The blocks per SM a config's tile counts on, where it says (None: the launch bounds'
    own business, e.g. the gemv and SIMT kernels)."""
    if hasattr(tile, "max_blocks_per_sm"):
        return tile.max_blocks_per_sm
    return tile.blocks_per_sm(dev) if hasattr(tile, "blocks_per_sm") else None


@pytest.mark.parametrize("arch", DEVICES)
def test_reachable_kernels_compile_without_spills_in_their_register_budget(compiled, arch):
    dev = DEVICES[arch]
    for config, dtypes in select.reachable_configs(dev) + select.reachable_gated_configs(dev):
        for dtype in dtypes:
            for kmajor in (True, False):
                usage = compiled[arch, config.spec(dtype, kmajor)].usage
                assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, (config, dtype, kmajor, usage)
                blocks = _blocks_counted_on(config.tile, dev)
                if blocks:
                    assert blocks * config.tile.threads * usage["registers"] <= 65536, (config, dtype, kmajor, usage)


def test_hopper_kernels_keep_their_wgmma_pipelines(compiled):
    """No linear kernel's wgmmas were serialised by ptxas; the ping-pong kernels' setmaxnreg split
    (40 + 2 x 232 registers a thread of each warpgroup) was kept and fits the register file."""
    for config, dtypes in select.reachable_configs(H200) + select.reachable_gated_configs(H200):
        for dtype in dtypes:
            for kmajor in (True, False):
                entry = compiled["sm_90a", config.spec(dtype, kmajor)]
                assert not any(code in entry.log for code in WGMMA_SERIALISED), (config, entry.log)
                if isinstance(config, PingPongConfig):
                    assert SETMAXNREG_IGNORED not in entry.log, (config, entry.log)
                    assert (40 + 2 * 232) * 128 <= entry.usage["registers"] * config.tile.threads, entry.usage
