"""CPU (NVRTC) tests of attention_fwd_wgmma_tma, the default Hopper prefill, and of
attention_varlen_wgmma_tma, its block body on ragged batches: each TMA tile of the
tests compiles for sm_90a without local-memory spills or
serialised wgmmas, and its entry register count is the one its setmaxnreg split is balanced
against (producer and consumers fill the register file exactly)."""
from __future__ import annotations


import pytest

from cufuse._core import loader
from cufuse.ops.attention.select import VARLEN_WGMMA

from ..conftest import requires_nvrtc
from .oracle import TMA_TILES

pytestmark = requires_nvrtc
# (producer, consumer) registers a thread by consumer warpgroups (wgmma.cu TmaRegisters)
SPLIT = {2: (24, 240), 3: (32, 160)}


@pytest.mark.parametrize("tile", [*TMA_TILES.values(), *VARLEN_WGMMA.values()],
                         ids=lambda t: f"{type(t).__name__}-hd{t.head_dim}w{t.warpgroups}n{t.block_n}")
def test_tma_tiles_compile_balanced_without_spills(tile):
    spec = tile.spec("__nv_bfloat16")
    threads = (tile.warpgroups + 1) * 128
    ((_, entry, error),) = loader.precompile([spec], "sm_90a", jobs=1)
    assert error is None, error
    usage = entry.usage
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0 and usage["stack"] == 0, usage
    producer, consumer = SPLIT[tile.warpgroups]
    assert (producer + tile.warpgroups * consumer) * 128 <= usage["registers"] * threads, usage
    # C7508: setmaxnreg ignored; C7512: wgmma serialised (spilled accumulators)
    assert "C7508" not in entry.log and "C7512" not in entry.log, entry.log
