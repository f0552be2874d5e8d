"""A model of attention_fwd_wgmma_tma's block (kernels/attention/wgmma.cu wgmma_tma_block and
consume_item with TmaFeed) with the mbarriers' own semantics: the producer thread's Q, K and V
loads (arrive_expect_tx, then TMA boxes that land in any order and complete the "full" phase by
their bytes), the consumer warps' parity waits, their releases (lane 0 of every warp arrives on
"empty", WARPGROUPS x 4 arrivals a phase), the ping-pong turns on named barriers, each
warpgroup's own key-tile range and the tiles it skips.

A parity wait passes whenever the barrier's current phase has the other parity, so a waiter two
phases behind passes at once; counting loads cannot see that, parities can. The kernel is safe
because every warp waits on every K and V tile in order (skipped ones too) and releases a tile
only after its own wait on it: when a warp waits for tile t of round r, its stage's "full"
barrier has completed r phases (tile t - S landed) or r + 1 (tile t landed), never r - 1 or
r + 2, and "empty" cannot complete a phase before every warp released the stage's tile.

The four warps of a warpgroup run as separate agents (mbarrier waits, arrivals and bar.sync are
per warp; no rendezvous at wgmma is assumed), which only adds interleavings. The scheduler runs
them, the producer and the TMA engine in random order at random speeds and checks that no warp reads a stage not holding its tile, that no load lands on a stage a warp
still reads or will read, that no mbarrier phase takes more arrivals than it expects, that the
block never exits with boxes in flight, that nothing deadlocks and that every barrier ends where
it started a phase."""
from __future__ import annotations

import random
import re

import pytest


class MBarrier:
    """mbarrier.init(arrivals): completed phases, arrivals pending in the current one and the
    transaction count (boxes here, bytes in the kernel) still to land."""

    def __init__(self, arrivals):
        self.arrivals = self.pending = arrivals
        self.tx = 0
        self.phase = 0

    def arrive(self, tx=0):  # mbarrier.arrive(.expect_tx): the bytes are announced, then the arrival
        assert self.pending > 0, "an arrival on an mbarrier phase that already has all of its arrivals"
        self.tx += tx
        self.pending -= 1
        self._complete()

    def complete_tx(self, tx):  # a TMA box landed
        self.tx -= tx
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.arrivals

    def passes(self, parity):  # mbarrier.try_wait.parity: the current phase has the other parity
        return self.phase % 2 != parity


class NamedBarrier:
    """bar.sync / bar.arrive with a count of 256 threads: it opens at the eighth warp's arrival,
    whichever warps they are."""

    def __init__(self, warps=8):
        self.warps, self.arrived, self.generation = warps, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived == self.warps:
            self.arrived, self.generation = 0, self.generation + 1


class Stage:
    """A ring slot's contents: the tile its last load wrote, the boxes of it not landed yet, the
    warps that compute that tile and have not finished reading it."""

    def __init__(self):
        self.tile, self.missing, self.needed_by = None, 0, set()


class Block:
    def __init__(self, stages, n_tiles, ranges, rng, boxes=2, turns=True, wait_skipped=True, empty_arrivals=None):
        self.stages, self.n_tiles, self.ranges, self.rng, self.boxes = stages, n_tiles, ranges, rng, boxes
        self.warpgroups = len(ranges)
        self.turns, self.wait_skipped = turns, wait_skipped
        empty_arrivals = empty_arrivals or self.warpgroups * 4  # mbarrier_init(empty, WARPGROUPS * 4)
        self.q_full, self.q = MBarrier(1), Stage()
        self.full = {r: [MBarrier(1) for _ in range(stages)] for r in "kv"}
        self.empty = {r: [MBarrier(empty_arrivals) for _ in range(stages)] for r in "kv"}
        self.ring = {r: [Stage() for _ in range(stages)] for r in "kv"}
        self.loads = {r: [0] * stages for r in "kv"}
        self.turn = [NamedBarrier() for _ in range(self.warpgroups)]  # kTurn + wg
        self.in_flight = []  # (stage, its full barrier) a box
        self.threads_left = 1 + 4 * self.warpgroups  # the producer thread and the consumer warps
        self.version = 0  # bumped by every change of shared state (the scheduler's deadlock test)
        self.computed = []

    def issue(self, stage, bar, name, tile, boxes, readers):
        """Boxes of `tile` into `stage` (the producer has passed its empty wait)."""
        assert not stage.needed_by, f"{name} overwrites tile {stage.tile} that warps {sorted(stage.needed_by)} need"
        assert stage.missing == 0, f"{name} loads into a stage whose tile {stage.tile} is still landing"
        stage.tile, stage.missing, stage.needed_by = tile, boxes, set(readers)
        self.in_flight += [(stage, bar)] * boxes
        self.version += 1

    def read(self, warp, stage, name, tile):  # a wgmma reading `stage` issues
        assert stage.tile == tile and stage.missing == 0, \
            f"warp {warp} reads {name}({tile}) from a stage holding tile {stage.tile}, {stage.missing} boxes to land"

    def done_reading(self, warp, stage):  # its wgmma_wait
        stage.needed_by.discard(warp)
        self.version += 1

    def arrive(self, bar, **tx):
        bar.arrive(**tx)
        self.version += 1

    def readers(self, tile):
        return [(wg, w) for wg, (first, end) in enumerate(self.ranges) if first <= tile < end for w in range(4)]

    def exit_thread(self):  # the block ends when its threads do: no box may land after that
        self.threads_left -= 1
        self.version += 1
        assert self.threads_left or not self.in_flight, f"the block exits with {len(self.in_flight)} boxes in flight"


def producer(b):
    """wgmma_tma_block's producer thread: Q, then K(0), then K(t + 1) before V(t)."""
    b.arrive(b.q_full, tx=b.warpgroups)
    b.issue(b.q, b.q_full, "Q", 0, b.warpgroups, [])
    yield False

    def load_tile(r, t):
        s = t % b.stages
        while not b.empty[r][s].passes(((t // b.stages) & 1) ^ 1):  # round 0 passes at once
            yield True
        b.arrive(b.full[r][s], tx=b.boxes)
        b.issue(b.ring[r][s], b.full[r][s], f"{r.upper()}({t})", t, b.boxes, b.readers(t))
        b.loads[r][s] += 1
        yield False

    if b.n_tiles > 0:
        yield from load_tile("k", 0)
    for t in range(b.n_tiles):
        if t + 1 < b.n_tiles:
            yield from load_tile("k", t + 1)
        yield from load_tile("v", t)
    b.exit_thread()


def tma(b):
    """The copy engine: lands the boxes in flight one at a time, in any order."""
    while b.threads_left or b.in_flight:
        if not b.in_flight:
            yield True
            continue
        stage, bar = b.in_flight.pop(b.rng.randrange(len(b.in_flight)))
        stage.missing -= 1
        bar.complete_tx(1)
        b.version += 1
        yield False


def consumer(b, wg, warp, first, end):
    """One warp of consume_item (PINGPONG = WARPGROUPS): key tiles [first, end) computed, the
    rest skipped; each yield is a point where the other agents may run."""
    me, n, last, S = (wg, warp), b.n_tiles, b.warpgroups - 1, b.stages

    def acquire(r, t):  # mbarrier_wait(full + t % S, (t / S) & 1)
        while not b.full[r][t % S].passes((t // S) & 1):
            yield True

    def release(r, t):  # lane 0 arrives on empty + t % S
        b.arrive(b.empty[r][t % S])

    def take_turn():  # named_barrier_sync(kTurn + wg, 256)
        if b.turns:
            bar = b.turn[wg]
            generation = bar.generation
            bar.arrive()
            b.version += 1
            while bar.generation == generation:
                yield True

    def pass_turn(tile):  # named_barrier_arrive(kTurn + (wg + 1) % WARPGROUPS, 256)
        if b.turns and (wg < last or tile + 1 < n):
            b.turn[(wg + 1) % b.warpgroups].arrive()
            b.version += 1

    def skip(t):
        if b.wait_skipped:
            yield from acquire("v", t)
        release("k", t)
        release("v", t)
        yield False

    def finish_pv(t):
        yield from acquire("v", t)
        b.read(me, b.ring["v"][t % S], "V", t)
        yield False
        b.done_reading(me, b.ring["v"][t % S])  # wgmma_wait<0>
        release("v", t)
        yield False

    if b.turns and wg == last and n > 0:
        b.turn[0].arrive()
        b.version += 1
    while not b.q_full.passes(0):  # wait_q
        yield True
    for tile in range(n):
        computed = first <= tile < end
        if computed or b.wait_skipped:
            yield from acquire("k", tile)
        yield from take_turn()
        if tile < first:
            pass_turn(tile)
            yield from skip(tile)
            continue
        if tile >= end:
            if tile == end and tile > first:
                yield from finish_pv(tile - 1)
            pass_turn(tile)
            yield from skip(tile)
            continue
        b.read(me, b.q, "Q", 0)
        b.read(me, b.ring["k"][tile % S], "K", tile)  # issue_scores
        yield False
        if tile > first:
            yield from acquire("v", tile - 1)
            b.read(me, b.ring["v"][(tile - 1) % S], "V", tile - 1)  # issue_pv
        pass_turn(tile)
        yield False
        b.done_reading(me, b.ring["k"][tile % S])  # wgmma_wait<1> (or <0>): S(tile) done
        release("k", tile)
        yield False  # the softmax, P V(tile - 1) still running
        if tile > first:
            b.done_reading(me, b.ring["v"][(tile - 1) % S])  # wait_pv_and_rescale
            release("v", tile - 1)
        b.computed.append((wg, warp, tile))
        yield False
    if end == n and n > first:
        yield from finish_pv(n - 1)
    b.read(me, b.q, "Q", 0)  # the epilogue stages O in this warpgroup's Q rows: Q must have landed
    b.exit_thread()


def run(stages, n_tiles, ranges, seed, **variant):
    """The block under one random schedule (agents of random speeds); False on a deadlock."""
    rng = random.Random(seed)
    b = Block(stages, n_tiles, ranges, rng, **variant)
    agents = [producer(b), tma(b)] + [consumer(b, wg, w, *r) for wg, r in enumerate(ranges) for w in range(4)]
    speed = {a: rng.choice((0.05, 1, 1, 1, 20)) for a in agents}  # some agents far behind or ahead
    live, waiting = list(agents), set()  # waiting: blocked agents since the last change of state
    while live:
        ready = [a for a in live if a not in waiting]
        if not ready:
            return False, b
        agent = rng.choices(ready, [speed[a] for a in ready])[0]
        version = b.version
        try:
            blocked = next(agent)
        except StopIteration:
            live.remove(agent)
            waiting.clear()
            continue
        if b.version != version:
            waiting.clear()
        elif blocked:
            waiting.add(agent)
    return True, b


def check_run(stages, n_tiles, ranges, seed, **variant):
    """One schedule: no hazard (asserted as it runs), no deadlock, every barrier back between phases."""
    finished, b = run(stages, n_tiles, ranges, seed, **variant)
    state = {r: [(f.phase, e.phase, e.pending) for f, e in zip(b.full[r], b.empty[r])] for r in "kv"}
    assert finished, f"deadlock (seed {seed}): loads {b.loads}, (full, empty phases, empty pending) {state}"
    assert sorted(b.computed) == sorted((wg, w, t) for wg, (first, end) in enumerate(ranges) for w in range(4)
                                        for t in range(first, end))
    # every stage filled and released as often as loaded, every barrier between phases
    for r in "kv":
        assert [f.phase for f in b.full[r]] == b.loads[r] == [e.phase for e in b.empty[r]], (r, state)
        assert all(f.pending == 1 and f.tx == 0 and e.pending == e.arrivals for f, e in zip(b.full[r], b.empty[r]))
        assert b.loads[r] == [len(range(s, n_tiles, stages)) for s in range(stages)]
    assert b.q_full.phase == 1 and all(t.arrived == 0 for t in b.turn)


# (n_tiles, per-warpgroup [wg_first, wg_tiles)): full ranges, causal staircases (a warpgroup
# ending before the block's last tile), windows (starting after tile 0), rows past Nq ((0, 0)),
# packed rows (any range per warpgroup).
CASES = [
    (0, [(0, 0), (0, 0)]),  # a key split past the keys its rows see
    (1, [(0, 1), (0, 1)]),
    (5, [(0, 5), (0, 5)]),
    (6, [(0, 5), (0, 6)]),
    (6, [(0, 4), (0, 6)]),
    (7, [(2, 6), (3, 7)]),
    (7, [(0, 0), (0, 7)]),
    (8, [(6, 8), (0, 2)]),
    (9, [(0, 7), (0, 8), (0, 9)]),
    (9, [(1, 3), (2, 6), (4, 9)]),
    (4, [(0, 0), (0, 0), (0, 4)]),
    (7, [(0, 7), (0, 0), (5, 6)]),
    (1, [(0, 1), (0, 0), (0, 0)]),
]


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("n_tiles,ranges", CASES)
def test_every_interleaving_reads_landed_tiles_and_finishes(stages, n_tiles, ranges):
    for seed in range(30):
        check_run(stages, n_tiles, ranges, seed)


def random_geometry(rng):
    n_tiles = rng.choice((0, 1, 2, 3, 5, 8, 11))
    ranges = []
    for _ in range(rng.choice((2, 3))):
        if n_tiles == 0 or rng.random() < 0.15:
            ranges.append((0, 0))
        else:
            first = rng.randrange(n_tiles)
            ranges.append((first, rng.randrange(first + 1, n_tiles + 1)))
    return rng.choice((2, 3, 4)), n_tiles, ranges


def test_random_geometries_read_landed_tiles_and_finish():
    rng = random.Random(0)
    for seed in range(300):
        stages, n_tiles, ranges = random_geometry(rng)
        check_run(stages, n_tiles, ranges, seed, boxes=rng.choice((1, 2, 4)))


def test_the_ring_does_not_rest_on_the_turns():
    """Unlike the ping-pong GEMM's, this ring stays safe without the turns: every warp waits on
    every tile, so none falls two phases behind (the turns order the tensor-core work only)."""
    rng = random.Random(1)
    for seed in range(100):
        check_run(*random_geometry(rng), seed, turns=False)


def failures(stages, n_tiles, ranges, seeds, **variant):
    """The first lines of the assertions a variant of the protocol fails, one a failing seed."""
    found = []
    for seed in range(seeds):
        try:
            check_run(stages, n_tiles, ranges, seed, **variant)
        except AssertionError as e:
            found.append(str(e).splitlines()[0])
    return found


@pytest.mark.parametrize("turns", [True, False])
def test_skipping_the_waits_on_skipped_tiles_is_caught(turns):
    """A warpgroup that releases the tiles it skips without waiting for them falls phases behind
    the full barriers: its first wait on a computed tile passes on the stale parity and reads a
    stage that does not hold that tile (other seeds overrun a phase or deadlock)."""
    found = failures(2, 9, [(0, 0), (4, 9), (0, 0)], 150, turns=turns, wait_skipped=False)
    assert any(re.search(r"reads K\(4\) from a stage holding tile", m) for m in found), found


def test_an_empty_barrier_counting_warpgroups_is_caught():
    """empty expecting one arrival a warpgroup while four warps arrive: its phase completes before
    every warp released the stage, and a load lands on a tile a warp still reads."""
    found = failures(2, 6, [(0, 6), (0, 6)], 50, empty_arrivals=2)
    assert any(re.search(r"overwrites tile \d+ that warps", m) for m in found), found
