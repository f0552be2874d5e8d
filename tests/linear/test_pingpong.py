"""CPU tests of the ping-pong GEMM (kernels/linear/pingpong_tma.cu, cufuse/ops/linear/pingpong.py):
where the selection takes it, its time model, the configs it refuses, its persistent launch,
and a model of its block's TMA ring under random interleavings (two consumer warpgroups taking
tiles in turn, mbarrier parity waits)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from cufuse._core.device import A100, H200
from cufuse._core.plans import NULL, TensorMap
from cufuse.ops.linear import select
from cufuse.ops.linear.operands import ACTIVATION_CODES
from cufuse.ops.linear.pingpong import PINGPONG_128x128, GatedPingPongConfig, PingPongConfig, PingPongTile, \
    pingpong_time
from cufuse.ops.linear.plan import plan_gated, plan_linear
from cufuse.ops.linear.tiling import tile_count
from cufuse.ops.linear.wgmma import TmaConfig

from .cases import BF16, F16
from .test_epilogues import _linear_problem, gated_problem

BASE = 0x10000000
PINGPONG_64x256 = PingPongTile(bm=64, bn=256, stages=5)


def test_pingpong_time_counts_the_busiest_blocks_tiles():
    a, b = PINGPONG_128x128.cost
    # 4096 x 11008: 32 x 86 = 2752 tiles of 128x128 over 132 blocks, 21 for the busiest; 64 k tiles each
    assert pingpong_time(4096, 11008, 4096, PINGPONG_128x128, H200) == pytest.approx(21 * 64 * a + b)
    assert pingpong_time(2048, 2056, 1024, PINGPONG_128x128, H200) == pytest.approx(3 * 16 * a + b)


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("m,n,k", [(4096, 11008, 4096), (8192, 8192, 8192), (2048, 2064, 1024), (512, 28672, 8192)])
def test_the_selection_takes_pingpong_where_every_warpgroup_has_a_tile(m, n, k, kmajor):
    config = select._choose(m, n, k, BF16, True, H200, kmajor, True)
    assert config == PingPongConfig(tile=PINGPONG_128x128)
    assert tile_count(m, n, config.tile) >= 2 * H200.sm_count
    gated = select.choose(gated_problem(m, k, n // 2, BF16, H200, "kn" if not kmajor else "nk_t"), H200)
    assert gated == GatedPingPongConfig(tile=PINGPONG_128x128)


@pytest.mark.parametrize("m,n,k", [(512, 4096, 4096), (128, 11008, 4096), (65, 28672, 8192), (2048, 2048, 16384)])
def test_fewer_tiles_than_two_a_block_keep_the_cooperative_kernel(m, n, k):
    assert tile_count(m, n, PINGPONG_128x128) < 2 * H200.sm_count
    assert type(select._choose(m, n, k, BF16, True, H200, True, True)) is TmaConfig


def test_pingpong_is_reachable_exactly_on_hopper():
    hopper = {type(c) for c, _ in select.reachable_configs(H200) + select.reachable_gated_configs(H200)}
    ampere = {type(c) for c, _ in select.reachable_configs(A100) + select.reachable_gated_configs(A100)}
    assert {PingPongConfig, GatedPingPongConfig} <= hopper and not {PingPongConfig, GatedPingPongConfig} & ampere


def test_pingpong_configs_refuse_what_they_cannot_run():
    problem = _linear_problem(4096, 4096, 4096, BF16, H200)
    with pytest.raises(ValueError, match="fused_linear: argument 'config' asks for the pingpong_tma kernel, which "
                                         "never splits K \\(splits=1\\), got splits=2"):
        PingPongConfig(tile=PINGPONG_128x128, splits=2).check(problem, H200)
    with pytest.raises(ValueError, match="takes warpgroup tiles of 128x128 or 64x256, k 64 or 128 a stage and "
                                         "0 <= pending < stages, got 128x256, k 64, pending 1, stages 4"):
        PingPongConfig(tile=PingPongTile(bm=128, bn=256, stages=4)).check(problem, H200)
    with pytest.raises(ValueError, match="got 128x128, k 64, pending 6, stages 6"):
        PingPongConfig(tile=PingPongTile(pending=6)).check(problem, H200)
    with pytest.raises(ValueError, match="asks for the pingpong_tma kernel, which needs compute capability 9.0"):
        PingPongConfig(tile=PINGPONG_128x128).check(_linear_problem(4096, 4096, 4096, BF16, A100), A100)
    with pytest.raises(ValueError, match="asks for the gated_pingpong_tma kernel, which runs fused_gated_linear only"):
        GatedPingPongConfig(tile=PINGPONG_128x128).check(problem, H200)
    with pytest.raises(ValueError, match="asks for the pingpong_tma kernel, which runs fused_linear only"):
        PingPongConfig(tile=PINGPONG_128x128).check(gated_problem(4096, 4096, 4096, BF16, H200), H200)
    PingPongConfig(tile=PINGPONG_64x256).check(problem, H200)  # the other shape runs through config=


@pytest.mark.parametrize("w", ["kn", "nk_t"])
@pytest.mark.parametrize("tile", [PINGPONG_128x128, PINGPONG_64x256], ids=lambda t: f"{t.bm}x{t.bn}")
def test_pingpong_plan_is_one_persistent_launch(w, tile):
    k, n = 1032, 2056
    for m, dtype in ((300, BF16), (4097, F16)):
        strides = {"kn": (n, 1), "nk_t": (1, k)}[w]
        plan = plan_linear((m, k), (k, 1), BASE, (k, n), strides, BASE, 1, None, np.dtype(dtype), H200,
                           PingPongConfig(tile=tile), activation=ACTIVATION_CODES["gelu"])
        (launch,) = plan.launches
        assert launch.spec.name == "linear_pingpong_tma" and plan.scratch is None
        tiles = math.ceil(m / tile.bm) * math.ceil(n / tile.bn)
        assert launch.grid == (min(tiles, H200.sm_count), 1, 1) and launch.block == (384, 1, 1)
        assert launch.smem == tile.smem_bytes() <= H200.max_smem_per_block
        x_map, w_map = launch.args[:2]
        assert type(x_map) is TensorMap and type(w_map) is TensorMap
        assert x_map.geometry.box_outer == tile.bm
        assert w_map.geometry.box_outer == (tile.bn if w == "nk_t" else tile.bk)
        assert launch.args[2:6] == ("bias", "out", NULL, NULL)  # never split: no workspace
        assert launch.args[-1] == ACTIVATION_CODES["gelu"]


def test_gated_pingpong_plan_maps_both_weights_in_halves():
    k, n = 1032, 1032
    plan = plan_gated((4097, k), (k, 1), BASE, (k, n), (1, k), BASE, (1, k), BASE, None, np.dtype(BF16), H200,
                      GatedPingPongConfig(tile=PINGPONG_128x128), activation=ACTIVATION_CODES["silu"])
    (launch,) = plan.launches
    assert launch.spec.name == "gated_linear_pingpong_tma"
    assert [a.name for a in launch.args[:3]] == ["x", "w_gate", "w_up"]
    assert all(a.geometry.box_outer == 64 for a in launch.args[1:3])  # BN / 2 rows of each weight
    assert launch.grid == (min(33 * 17, H200.sm_count), 1, 1)  # tiles of 64 output columns


# ---------------------------------------------------------------------------------------------
# A model of pingpong_block: the producer thread loads the k tiles of the block's tiles in order
# into a ring of STAGES stages; consumer warpgroup w takes the block's tiles w, w + 2, ...,
# waits on each stage's "full" mbarrier, issues its wgmmas, releases the stage PENDING stages
# later (or at the tile's end) on its "empty" mbarrier (four warps arrive), then runs the tile's
# epilogue. Waits are mbarrier parity waits: a wait passes when the barrier's completed phases
# have the other parity, so a waiter two phases ahead of its barrier passes at once, wrongly.
# A warpgroup therefore starts a tile only once the other one has seen its previous tile's last
# stage land (the turn barrier); without the turns the model fails (`turns=False`).


class Barrier:
    def __init__(self, arrivals):
        self.arrivals, self.pending, self.completed = arrivals, arrivals, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.completed, self.pending = self.completed + 1, self.arrivals

    def passes(self, parity, expected_completed):
        done = self.completed % 2 != parity
        # A pass must mean the phase the waiter wants, never one two phases on.
        assert not done or self.completed == expected_completed, (self.completed, expected_completed)
        return done


class Ring:
    def __init__(self, stages):
        self.stages = stages
        self.full = [Barrier(1) for _ in range(stages)]
        self.empty = [Barrier(4) for _ in range(stages)]
        self.content = [None] * stages  # the k tile a stage holds
        self.readers = [0] * stages  # warps still reading it
        self.turns = [0, 0]  # turns handed to each warpgroup


def producer(ring, tiles, k_tiles):
    s_count = ring.stages
    for passed in range(tiles * k_tiles):
        s, r = passed % s_count, passed // s_count
        while not ring.empty[s].passes((r & 1) ^ 1, r):  # round 0 passes at once
            yield
        assert ring.readers[s] == 0, "a stage reloaded while a warpgroup reads it"
        ring.content[s] = passed
        ring.full[s].arrive()
        yield


def consumer(ring, wg, tiles, k_tiles, pending, log, turns=True):
    s_count = ring.stages
    passed = wg * k_tiles
    taken = 0
    for tile in range(wg, tiles, 2):
        first = passed
        if turns and tile > 0:  # named_barrier_sync(TURN_BARRIER + wg)
            taken += 1
            while ring.turns[wg] < taken:
                yield
        for kt in range(k_tiles):
            s, r = passed % s_count, passed // s_count
            while not ring.full[s].passes(r & 1, r + 1):
                yield
            if kt == k_tiles - 1 and tile + 1 < tiles:  # named_barrier_arrive(TURN_BARRIER + other)
                ring.turns[1 - wg] += 1
            assert ring.content[s] == passed, (wg, tile, kt, ring.content[s], passed)
            ring.readers[s] += 4
            yield  # wgmmas in flight
            if kt >= pending:
                done = (passed - pending) % s_count
                ring.readers[done] -= 4
                for _ in range(4):
                    ring.empty[done].arrive()
            passed += 1
        for done in range(max(first, passed - pending), passed):
            ring.readers[done % s_count] -= 4
            for _ in range(4):
                ring.empty[done % s_count].arrive()
        for _ in range(random.randrange(4)):  # the epilogue
            yield
        log.append((wg, tile))
        passed += k_tiles  # the other warpgroup's tile


def run_model(stages, pending, tiles, k_tiles, seed, turns=True):
    random.seed(seed)
    ring, log = Ring(stages), []
    actors = [producer(ring, tiles, k_tiles)] + [consumer(ring, w, tiles, k_tiles, pending, log, turns)
                                                 for w in (0, 1)]
    live = list(actors)
    for _ in range(100_000):
        if not live:
            break
        actor = random.choice(live)
        try:
            next(actor)
        except StopIteration:
            live.remove(actor)
    return ring, log, live


@pytest.mark.parametrize("stages,pending", [(6, 1), (5, 1), (4, 2), (2, 1)])
@pytest.mark.parametrize("tiles,k_tiles", [(1, 1), (1, 9), (2, 1), (3, 5), (4, 6), (5, 13), (7, 2)])
def test_ring_model_finishes_every_tile_in_every_interleaving(stages, pending, tiles, k_tiles):
    for seed in range(40):
        ring, log, live = run_model(stages, pending, tiles, k_tiles, seed)
        assert not live, f"deadlock: seed {seed}"
        assert sorted(log) == sorted((t % 2, t) for t in range(tiles))
        # every stage released as often as loaded: the next kernel's ring starts clean
        loads = [len(range(s, tiles * k_tiles, stages)) for s in range(stages)]
        assert [b.completed for b in ring.full] == loads and [b.completed for b in ring.empty] == loads
        assert ring.readers == [0] * stages


def test_ring_model_without_turns_reads_a_stage_before_it_lands():
    """The turn barrier is what keeps a warpgroup's first wait of a tile within one phase."""
    with pytest.raises(AssertionError):
        for seed in range(40):
            run_model(5, 1, 3, 5, seed, turns=False)
