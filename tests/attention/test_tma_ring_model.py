"""A model of attention_fwd_wgmma_tma's block (kernels/attention/wgmma.cu wgmma_tma_block and
consume_item with TmaFeed): the producer's K / V loads into two mbarrier rings, the consumer
warpgroups' ping-pong turns, their own key-tile ranges, skipped tiles and releases. Every
interleaving the random scheduler tries must finish (no deadlock) with every stage released as
often as it was filled, for the producer order the kernel uses (K(t + 1) before V(t))."""
from __future__ import annotations

import random

import pytest


class Block:
    """Counters of the block's synchronisation: per ring slot the loads landed (full) and the
    warpgroup releases (empty, one a warpgroup for its four warps), per warpgroup the turns
    passed to it."""

    def __init__(self, stages, warpgroups):
        self.stages, self.warpgroups = stages, warpgroups
        self.loaded = {"k": [0] * stages, "v": [0] * stages}
        self.released = {"k": [0] * stages, "v": [0] * stages}
        self.turns = [0] * warpgroups

    def landed(self, ring, t):  # mbarrier_wait(full + t % S, (t / S) & 1)
        return self.loaded[ring][t % self.stages] > t // self.stages

    def free(self, ring, t):  # the producer's mbarrier_wait(empty + t % S, ((t / S) & 1) ^ 1)
        return self.released[ring][t % self.stages] >= (t // self.stages) * self.warpgroups


def producer(block, n_tiles):
    def load(ring, t):
        while not block.free(ring, t):
            yield
        block.loaded[ring][t % block.stages] += 1

    if n_tiles > 0:
        yield from load("k", 0)
    for t in range(n_tiles):
        if t + 1 < n_tiles:
            yield from load("k", t + 1)
        yield from load("v", t)


def consumer(block, wg, n_tiles, wg_first, wg_tiles):
    turns_taken = 0
    last = block.warpgroups - 1

    def acquire(ring, t):
        while not block.landed(ring, t):
            yield

    def release(ring, t):
        block.released[ring][t % block.stages] += 1

    def take_turn():
        nonlocal turns_taken
        turns_taken += 1
        while block.turns[wg] < turns_taken:
            yield

    def pass_turn(tile):
        if wg < last or tile + 1 < n_tiles:
            block.turns[(wg + 1) % block.warpgroups] += 1

    def finish_pv(t):
        yield from acquire("v", t)
        release("v", t)

    if wg == last and n_tiles > 0:
        block.turns[0] += 1
    for tile in range(n_tiles):
        yield from acquire("k", tile)
        yield from take_turn()
        if tile < wg_first or tile >= wg_tiles:
            if tile == wg_tiles and tile > wg_first:
                yield from finish_pv(tile - 1)
            pass_turn(tile)
            yield from acquire("v", tile)  # skip: acquire V, release both
            release("k", tile)
            release("v", tile)
            continue
        if tile > wg_first:
            yield from acquire("v", tile - 1)
        pass_turn(tile)
        release("k", tile)
        if tile > wg_first:
            release("v", tile - 1)
    if wg_tiles == n_tiles and n_tiles > wg_first:
        yield from finish_pv(n_tiles - 1)


def run(stages, n_tiles, ranges, seed):
    """Runs the producer and one consumer per (wg_first, wg_tiles) in random order; False on a
    deadlock (every agent waiting)."""
    block = Block(stages, len(ranges))
    agents = [producer(block, n_tiles)] + [consumer(block, wg, n_tiles, *r) for wg, r in enumerate(ranges)]
    rng = random.Random(seed)
    stalled = 0
    while agents:
        agent = rng.choice(agents)
        before = (tuple(map(tuple, block.loaded.values())), tuple(map(tuple, block.released.values())),
                  tuple(block.turns))
        try:
            next(agent)
        except StopIteration:
            agents.remove(agent)
            stalled = 0
            continue
        after = (tuple(map(tuple, block.loaded.values())), tuple(map(tuple, block.released.values())),
                 tuple(block.turns))
        stalled = 0 if after != before else stalled + 1
        if stalled > 50 * len(agents) + 100:
            return False, block
    return True, block


# (n_tiles, per-warpgroup (wg_first, wg_tiles)): full ranges, causal staircases (a warpgroup
# ending before the block's last tile), windows (starting after tile 0), rows past Nq (none).
CASES = [
    (0, [(0, 0), (0, 0)]),  # a key split past the keys its rows see
    (1, [(0, 1), (0, 1)]),
    (5, [(0, 5), (0, 5)]),
    (6, [(0, 5), (0, 6)]),
    (6, [(0, 4), (0, 6)]),
    (7, [(2, 6), (3, 7)]),
    (7, [(0, 0), (0, 7)]),
    (9, [(0, 7), (0, 8), (0, 9)]),
    (9, [(1, 3), (2, 6), (4, 9)]),
    (4, [(0, 0), (0, 0), (0, 4)]),
]


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("n_tiles,ranges", CASES)
def test_every_interleaving_finishes_and_releases_every_stage(stages, n_tiles, ranges):
    for seed in range(40):
        finished, block = run(stages, n_tiles, ranges, seed)
        assert finished, f"deadlock (seed {seed}): loaded {block.loaded}, released {block.released}"
        for ring in ("k", "v"):
            assert [r // len(ranges) for r in block.released[ring]] == block.loaded[ring], ring
