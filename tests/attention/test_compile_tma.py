"""CPU (NVRTC) tests of attention_fwd_wgmma_tma, the default Hopper prefill, and of
attention_varlen_wgmma_tma, its block body on ragged batches: each TMA tile of the
tests compiles for sm_90a without local-memory spills or
serialised wgmmas, and its entry register count is the one its setmaxnreg split is balanced
against (producer and consumers fill the register file exactly). And in the SASS of every
wgmma prefill tile the selection reaches, the softmax of S(j) runs while P V(j - 1) is still
on the tensor cores (nvdisasm)."""
from __future__ import annotations

import re
import subprocess

import pytest

from cufuse._core import loader
from cufuse.ops.attention.select import VARLEN_WGMMA, WGMMA_PREFILL, WGMMA_PREFILL_CP_ASYNC

from ..conftest import NVDISASM, SETMAXNREG_IGNORED, WGMMA_SERIALISED, requires_nvrtc, requires_sass
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
    assert SETMAXNREG_IGNORED not in entry.log, entry.log
    assert not any(code in entry.log for code in WGMMA_SERIALISED), entry.log


WGMMA_TILES = [*dict.fromkeys(tile for table in (WGMMA_PREFILL, WGMMA_PREFILL_CP_ASYNC) for rules in table.values()
                              for _, tile in rules), *VARLEN_WGMMA.values()]


@requires_sass
@pytest.mark.parametrize("tile", WGMMA_TILES, ids=lambda t: f"{type(t).__name__}-hd{t.head_dim}w{t.warpgroups}"
                         f"n{t.block_n}{'-tma' if getattr(t, 'tma', True) else ''}")
def test_softmax_exps_issue_before_the_wait_for_the_previous_pv(tile, tmp_path):
    """consume_item's steady step issues S(j) and P V(j - 1), waits for S(j) alone (the one
    wgmma wait that leaves a group in flight), and runs the softmax of S(j) under P V(j - 1):
    every exp of the tile (block_n / 2 a thread) must issue before the wait for P V. ptxas
    schedules a wait first in its basic block, so a wait in the softmax's block put all of
    them after it."""
    compiled = loader.compile_spec(tile.spec("__nv_bfloat16"), "sm_90a")
    assert not any(code in compiled.log for code in WGMMA_SERIALISED), compiled.log
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.binary)
    sass = subprocess.run([NVDISASM, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
    waits_s = [i for i, line in enumerate(sass) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line]
    assert len(waits_s) == 1, f"one steady step expected, found {len(waits_s)} waits leaving a group in flight"
    exps = exps_before_the_wait_for_pv(sass, waits_s[0])
    assert exps >= tile.block_n // 2, f"{exps} of {tile.block_n // 2} exps issue before the wait for P V"


def exps_before_the_wait_for_pv(sass: list, start: int) -> int:
    """The MUFU.EX2 on the path from line `start` to the next wait for every wgmma group,
    following unconditional branches and the fall-through of conditional ones."""
    labels = {line.strip().rstrip(":"): i for i, line in enumerate(sass) if re.match(r"\s*\.L_x_\d+:", line)}
    exps, i = 0, start + 1
    for _ in range(len(sass)):
        line = sass[i]
        if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            return exps
        exps += "MUFU.EX2" in line
        jump = re.search(r"^\s*/\*[0-9a-f]+\*/\s+BRA `\((\.L_x_\d+)\)", line)  # unpredicated
        i = labels[jump.group(1)] if jump else i + 1
    raise AssertionError("no wait for P V after the steady step's wait for S")
