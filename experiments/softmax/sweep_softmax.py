"""Sweep of softmax kernel configurations on the softmax benchmark's shapes.

Run: ``python3 experiments/softmax/sweep_softmax.py [substring]`` (stdout only; under a minute and a half
on an H200, compiles included: every candidate is compiled first, in parallel).

For each shape and dtype: the default config and a few alternatives, all through the public
``cufuse.softmax(..., config=)`` override, timed with CUDA events over rotating input sets
(``out`` poisoned first), each output checked against a float64 softmax computed on the GPU.
Columns: ms, TB/s (2 x bytes of x / time), fraction of the measured copy of the same bytes,
max |error| / max(reference), status; then a "=>" line per case: the default's fraction of
the copy and the best correct candidate's (``grep '=>'`` gives the decision table). The
"v5 ..." candidates are the v5 defaults that v6 replaced, "v6 ..." softmax v6's new
candidates (docs/softmax.md has what each round decided). Every candidate goes in through
``config=``; candidates the product no longer selects are built here from its variant classes.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import cupy  # noqa: E402
import cufuse  # noqa: E402
from cufuse._core.device import SMEM_RESERVED_PER_BLOCK, current_device_info  # noqa: E402
from cufuse._core.loader import arch_for, device_cc, precompile  # noqa: E402
from cufuse.ops.softmax import select as S  # noqa: E402
from cufuse.ops.softmax import select_cols  # noqa: E402
from cufuse.ops.softmax.cols import ColsConfig, ColsVecConfig  # noqa: E402
from cufuse.ops.softmax.problem import cols_vectorizable, vector_size  # noqa: E402
from cufuse.ops.softmax.rows import ClusterConfig, RowsConfig, StashedRowsConfig  # noqa: E402
from cufuse.ops.softmax.split import SplitConfig  # noqa: E402
from cufuse.bench.timing import copy_ceiling_tbps, rotation_count, time_cuda  # noqa: E402

DTYPES = {"fp16": np.float16, "fp32": np.float32}
TOL = {"fp16": 2e-3, "fp32": 2e-5}  # of max(reference)
ANCHORS = (
    "peers (H200, anchors): torch.softmax 1.25-2.5 TB/s at common sizes, 0.07-0.34 TB/s at 1M+ "
    "columns; cupyx softmax 0.2-0.5 TB/s; copy ~3.6 TB/s at 128 MiB, ~4.2 TB/s at 1 GiB"
)

R, C = RowsConfig, ClusterConfig


def split_variant(length, rows, dtype, dev, tiles_per_block, pipelined):
    """choose_rows_split with the tiles per block forced (fewer: more blocks per row and more
    waves; the rule keeps every block of a wave resident)."""
    vs = vector_size(dtype)
    tile = S._SPLIT_THREADS * S._SPLIT_VECS * vs
    tile_bytes = S._SPLIT_THREADS * S._SPLIT_VECS * 16
    resident = dev.sm_count * S._SPLIT_BLOCKS_PER_SM
    max_smem_tiles = S._split_smem_per_block(dev) // tile_bytes
    tiles = -(-length // tile)
    blocks_per_row = -(-tiles // max(tiles_per_block, -(-tiles // resident)))
    chunk = -(-(-(-length // blocks_per_row)) // vs) * vs
    blocks_per_row = -(-length // chunk)
    tiles_per_block = -(-chunk // tile)
    smem_tiles = min(max_smem_tiles, tiles_per_block - 1)
    rows_per_wave = min(rows, resident // blocks_per_row)
    return SplitConfig(threads=S._SPLIT_THREADS, vecs=S._SPLIT_VECS, blocks_per_sm=S._SPLIT_BLOCKS_PER_SM,
                       blocks_per_row=blocks_per_row, grid=rows_per_wave * blocks_per_row, chunk=chunk,
                       smem_tiles=smem_tiles, streams=tiles_per_block - 1 > smem_tiles, pipelined=pipelined)


def alternatives(rows, length, dname, axis, dev):
    """(name, config) candidates besides the default, by the default's kernel; for the
    register-row kernel also the default with exp_once flipped; then the v6 and v10 candidates."""
    out = _alternatives(rows, length, dname, axis, dev)
    default = default_config(rows, length, DTYPES[dname], axis, dev)
    if isinstance(default, R):
        flipped = dataclasses.replace(default, exp_once=not default.exp_once)
        out += [("default exp_once" if flipped.exp_once else "default no exp_once", flipped)]
    return (out + v6_candidates(rows, length, dname, axis, dev) + stashed_cluster_candidates(rows, length, dname, axis, dev)
            + row_cluster_candidates(rows, length, dname, axis, dev) + split_candidates(rows, length, dname, axis, dev))


def row_cluster_candidates(rows, length, dname, axis, dev):
    """Register-row clusters in QuACK's geometry (256 threads x 8 vectors a block, one cluster a
    row), for 2- and 4-byte rows the smallest portable cluster holds: since their statistics
    moved to the st.async exchange, a rematch against the stashed and split rows."""
    dtype = DTYPES[dname]
    if axis not in (-1, 1) or dev.max_cluster_size < 8:
        return []
    vectors = -(-length // vector_size(dtype))
    for cluster in STASHED_CLUSTERS:
        config = ClusterConfig(threads=256, vecs=8, cluster=cluster)
        if vectors <= config.capacity_vectors and vectors > config.capacity_vectors // 2:
            return [(f"row cluster 256 x 8 c{cluster}", config)]
    return []


# softmax v10 (docs/softmax.md): rows over a cluster of stashed blocks, statistics pushed through
# distributed shared memory; (Threads, Vecs, StashTiles, BlocksPerSM) by itemsize, every
# portable cluster that holds the row (the product picks 8 for float32).
# (Two 4-vector blocks an SM take at most 448 threads, rows.STASHED_MAX_THREADS.)
STASHED_CLUSTER_GEOMETRIES = {2: ((256, 8, 3, 2), (448, 4, 4, 2)), 4: ((256, 8, 3, 2),)}
STASHED_CLUSTERS = (2, 4, 8)


def stashed_cluster_candidates(rows, length, dname, axis, dev):
    dtype = DTYPES[dname]
    if axis not in (-1, 1) or dev.max_cluster_size < 8:
        return []
    vectors = -(-length // vector_size(dtype))
    out = []
    for geometry in STASHED_CLUSTER_GEOMETRIES.get(np.dtype(dtype).itemsize, ()):
        for cluster in STASHED_CLUSTERS:
            t, v, tiles, blocks = geometry
            config = StashedRowsConfig(threads=t, vecs=v, stash_tiles=tiles, blocks_per_sm=blocks, cluster=cluster)
            if vectors <= config.capacity_vectors and (dname != "bf16" or t == 256):
                out.append((f"v10 stashed {t} x {v} + {tiles} {blocks}/SM c{cluster}", config))
    return out


# softmax v10 (docs/softmax.md): the persistent column split, (Threads, ColLanes,
# Vecs, RegisterTile, BlocksPerSM), none spills (sm_90a registers, softmax: 2-byte 113, 114,
# 113, 117, 64, 73; float32 128, 79, 128, 94, 56, 78, 56); the first of each itemsize is the
# chooser's pick, which is also tried with other parts (tiles a block; "b": blocks a strip).
SPLIT_GEOMETRIES = {
    2: ((256, 8, 8, False, 2), (256, 8, 4, True, 2), (256, 16, 8, False, 2), (256, 16, 4, True, 2), (512, 8, 4, False, 2),
        (256, 8, 4, False, 3)),
    4: ((256, 8, 8, True, 2), (256, 8, 8, False, 2), (256, 16, 8, True, 2), (256, 16, 4, True, 2), (512, 8, 4, False, 2),
        (256, 8, 4, True, 3), (256, 8, 4, False, 3)),
}


def split_with_tiles(config, length, columns, dtype, dev, tiles):
    """config with parts of ``tiles`` tiles and the resident grid's strips a wave, or None
    where a part would exceed the block's shared memory (at blocks_per_sm an SM) or the grid."""
    smem_tiles = tiles - int(config.register_tile)
    block_smem = smem_tiles * config.tile_bytes + config.static_smem(dtype)
    if smem_tiles > select_cols._COLS_SPLIT_MAX_SMEM_TILES or config.blocks_per_sm * (block_smem + SMEM_RESERVED_PER_BLOCK) > dev.smem_per_sm:
        return None
    blocks = -(-length // (tiles * config.tile_rows))
    resident = config.blocks_per_sm * dev.sm_count
    if blocks > resident:
        return None
    strips = -(-columns // config.columns(dtype))
    return dataclasses.replace(config, blocks_per_strip=blocks, strips_per_wave=min(strips, resident // blocks),
                               part=tiles * config.tile_rows, smem_tiles=smem_tiles)


def split_candidates(rows, length, dname, axis, dev):
    """axis=0 of rows x length: columns of ``rows`` elements, ``length`` of them."""
    if axis != 0:
        return []
    dtype = DTYPES[dname]
    out = []
    for i, geometry in enumerate(SPLIT_GEOMETRIES[np.dtype(dtype).itemsize]):
        config = select_cols.cols_split_config(rows, length, dtype, dev, geometry)
        if config is None:
            continue
        t, lanes, vecs, register_tile, blocks = geometry
        name = f"v10 colsplit {t} l{lanes} v{vecs}{' reg' if register_tile else ''} {blocks}/SM"
        variants = [config]
        if i == 0 or geometry == (256, 8, 4, False, 3):  # the picks with 1 to 4 tiles a block
            variants += [split_with_tiles(config, rows, length, dtype, dev, k) for k in (1, 2, 3, 4)]
        for variant in dict.fromkeys(v for v in variants if v is not None):
            out.append((f"{name} b{variant.blocks_per_strip}", variant))
    return out


def v6_candidates(rows, length, dname, axis, dev):
    """softmax v6 (docs/softmax.md): the v5 defaults each v6 default replaced (the other split
    flavour, the c8 scalar column kernel; the prefetching rows were removed in v7.1), the split kernel with
    the next row's tiles prefetched at 2 and 4 tiles a block (more waves to overlap), clusters
    of 16 for the rows of 1024 x 65536 float32 and 128 x 262144 float16, column vectors in
    clusters of 4."""
    dtype = DTYPES[dname]
    default = default_config(rows, length, dtype, axis, dev)
    vectors = -(-length // vector_size(dtype))
    if axis == 0:
        u = select_cols._COLS_UNROLL[np.dtype(dtype).itemsize]
        return [("v5 cols c8", ColsConfig(slices=16, unroll=u, cluster=8)),
                ("cols c4", ColsConfig(slices=16, unroll=u, cluster=4)),
                ("colsvec 256 l8 u4 c8", ColsVecConfig(threads=256, col_lanes=8, unroll=4, cluster=8)),
                ("v6 colsvec 256 l8 u4 c4", ColsVecConfig(threads=256, col_lanes=8, unroll=4, cluster=4)),
                ("v6 colsvec 256 l4 u4 c4", ColsVecConfig(threads=256, col_lanes=4, unroll=4, cluster=4))]
    out = []
    if isinstance(default, SplitConfig):
        flipped = dataclasses.replace(default, pipelined=not default.pipelined)
        out.append(("v6 split pipelined" if flipped.pipelined else "v5 split plain", flipped))
    if axis is None:  # one row of rows x length: only the split kernel holds it
        return out
    if vectors == 128 and np.dtype(dtype).itemsize == 2:  # 65536 x 1024 float16: 2 warps a block
        out.append(("v6 rows 64 g32 v4", S.with_exp_once(R(threads=64, group=32, vecs=4), dtype)))
    if vectors > 4096:  # cluster and split rows: the prefetching split at 2 and 4 tiles a block
        out += [(f"v6 split tpb{k} pipelined", split_variant(length, rows, dtype, dev, k, True)) for k in (2, 4)]
    return out


def _alternatives(rows, length, dname, axis, dev):
    dtype = DTYPES[dname]
    if axis == 0 or axis is None:  # the column kernels: v6_candidates; beyond the split kernel's capacity: nothing
        return []
    vectors = -(-length // vector_size(dtype))
    with_exp_once = lambda c: S.with_exp_once(c, dtype)  # noqa: E731
    if vectors <= 32:  # sub-warp groups: lanes per row x vectors per lane
        return [(f"rows 256 g{vectors // k} v{k}", with_exp_once(R(threads=256, group=vectors // k, vecs=k)))
                for k in (1, 2, 4) if vectors // k >= 1]
    if vectors <= 256:
        v = vectors // 32
        out = [(f"rows 256 g32 v{v}", with_exp_once(R(threads=256, group=32, vecs=v)))]
        if v <= 4:
            out.append((f"rows 128 g16 v{2 * v}", with_exp_once(R(threads=128, group=16, vecs=2 * v))))
        return out
    if vectors <= 4096:
        out = []
        for t in (128, 256, 512, 1024):
            v = vectors // t
            if 2 <= v <= 8 and S.choose_rows(length, rows, dtype, dev) != with_exp_once(R(threads=t, group=t, vecs=v)):
                out.append((f"block {t} v{v}", with_exp_once(R(threads=t, group=t, vecs=v))))
        return out
    if vectors <= 16384:
        out = []
        for t, v, c in ((512, 4, 8), (256, 4, 8), (512, 8, 4), (512, 4, 4), (256, 8, 4)):
            if t * v * c == vectors and C(threads=t, vecs=v, cluster=c) != S.choose_rows(length, rows, dtype, dev):
                out.append((f"cluster {t} v{v} c{c}", C(threads=t, vecs=v, cluster=c)))
        # The split kernel with one or two blocks a row, the next row's tiles prefetched (v6).
        out.append(("v6 split pipelined", dataclasses.replace(S.choose_rows_split(length, rows, dtype, dev), pipelined=True)))
        split = S.choose_rows_split(length, rows, dtype, dev)
        if split.blocks_per_row == 1:  # One block a row, not persistent (the hardware interleaves blocks)
            for pipelined in (True, False):
                out.append((f"s5 split one-shot{' pipelined' if pipelined else ''}",
                            dataclasses.replace(split, grid=rows, pipelined=pipelined)))
        # One block a row, a register tile plus shared-memory tiles (softmax_rows_stashed).
        # (The launch bounds: 448 x 4 at two an SM, 256 x 8 at one.)
        for geometry in ((448, 4, 4, 2), (256, 8, 3, 2), (256, 4, 7, 2), (256, 8, 7, 1), (512, 4, 7, 1)):
            t, v, tiles, blocks = geometry
            stashed = StashedRowsConfig(threads=t, vecs=v, stash_tiles=tiles, blocks_per_sm=blocks)
            if stashed.capacity_vectors >= vectors and (np.dtype(dtype).itemsize, geometry) != (4, (448, 4, 4, 2)):
                out.append((f"s5 stashed {geometry[0]} v{geometry[1]} t{geometry[2]} {geometry[3]}/SM", stashed))
        # (One 1024-thread block a row lost, 0.81 of the copy; block rows take up to 512 threads.)
        return out
    return []


CASES = [(r, c, -1) for r, c in ((1048576, 32), (262144, 128), (65536, 1024), (16384, 4096), (4096, 16384),
                                 (1024, 65536), (128, 262144), (16, 1048576), (4, 4194304))]
CASES += [(16384, 4096, 0), (8192, 8192, None)]
# Off the grid: the block rungs whose twin default is extrapolated (v6), float16 1024
# and 4096 vectors, float32 2048 (8192 x 8192; 2048 x 32768 float32 is a cluster row).
CASES += [(8192, 8192, -1), (2048, 32768, -1)]
# The long rows of the peer anchors (QuACK 0.94-0.98 of the copy there).
CASES += [(1024, 131072, -1), (256, 262144, -1)]


def default_config(rows, length, dtype, axis, dev):
    if axis == 0:  # a C-contiguous rows x length matrix down its columns, as cufuse.softmax sees it
        return S.choose_cols(rows, length, dtype, dev, cols_vectorizable(1, length, 0, length, dtype))
    if axis is None:
        return S.choose_rows(rows * length, 1, dtype, dev)
    return S.choose_rows(length, rows, dtype, dev)


def plan(dev, only):
    out = []
    for rows, length, axis in CASES:
        for dname, dtype in DTYPES.items():
            label = f"{rows}x{length} axis={axis} {dname}"
            if only and only not in label:
                continue
            variants = {}  # by config: no candidate twice
            for name, config in [("default", default_config(rows, length, dtype, axis, dev))] + alternatives(rows, length, dname, axis, dev):
                variants.setdefault(config, name)
            variants = [(name, config) for config, name in variants.items()]
            out.append((rows, length, axis, dname, variants))
    return out


def reference(x, axis):
    a = x.astype(cupy.float64)
    a = a - a.max(axis=axis, keepdims=axis is not None)
    e = cupy.exp(a)
    return e / e.sum(axis=axis, keepdims=axis is not None)


_ceilings = {}


def ceiling(nbytes):
    if nbytes not in _ceilings:
        _ceilings[nbytes] = copy_ceiling_tbps(nbytes, repeat=20)
    return _ceilings[nbytes]


def host_us(x, out, axis, calls=200):
    """Python time per call of the public function, launches only queued (the GPU lags).
    The first call of a signature (module load from the disk cache, plan) is left out: it
    alone made 60-95 us of the average over 200 calls wherever the kernel was new."""
    cufuse.softmax(x, axis=axis, out=out)
    cupy.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        cufuse.softmax(x, axis=axis, out=out)
    elapsed = time.perf_counter() - start
    cupy.cuda.get_current_stream().synchronize()
    return elapsed / calls * 1e6


def run_case(rows, length, axis, dname, variants):
    dtype = DTYPES[dname]
    nbytes = rows * length * np.dtype(dtype).itemsize
    rng = cupy.random.default_rng(rows + length)
    sets = [(2 * rng.standard_normal((rows, length), dtype=cupy.float32)).astype(dtype) for _ in range(rotation_count(2 * nbytes))]
    outs = [cupy.empty_like(s) for s in sets]
    ref = reference(sets[0], axis)
    scale = float(ref.max())
    ceil = ceiling(nbytes)
    print(f"{rows}x{length} axis={axis} {dname}: {nbytes / 2**20:.0f} MiB, copy ceiling {ceil:.2f} TB/s")
    fractions = {}
    for name, config in variants:
        if name == "default":
            print(f"  host {host_us(sets[0], outs[0], axis):.1f} us per call (default, eager, launches queued)")
        try:
            out = outs[0]
            out.fill(np.nan)
            cufuse.softmax(sets[0], axis=axis, out=out, config=config)
            err = float(cupy.abs(out.astype(cupy.float64) - ref).max()) / scale
            status = "ok" if err <= TOL[dname] else "WRONG"
            ms = time_cuda(lambda a, b: cufuse.softmax(a, axis=axis, out=b, config=config), list(zip(sets, outs)),
                           warmup=3, repeat=20)
            tbps = 2 * nbytes / (ms * 1e-3) / 1e12
            print(f"  {name:<26} {ms:7.3f} ms {tbps:5.2f} TB/s {tbps / ceil:5.2f}x copy  err {err:.1e}  {status}  {config}")
            if status == "ok":
                fractions[name] = tbps / ceil
        except Exception as exc:
            print(f"  {name:<26} FAILED {type(exc).__name__}: {str(exc)[:200]}  {config}")
            if os.environ.get("SWEEP_TRACE"):
                traceback.print_exc()
    if fractions:
        best = max(fractions, key=fractions.get)
        print(f"  => {rows}x{length} axis={axis} {dname}: default {fractions.get('default', float('nan')):.2f}x copy, "
              f"best {best} {fractions[best]:.2f}x")
    del sets, outs, ref


def sweep_cases(cases, axis):
    """``cases``: (rows, length, dtype name, variants); every variant compiled first, in
    parallel, then each case timed (run_case) over ``axis``."""
    t0 = time.time()
    specs = [config.spec(DTYPES[dname], False) for _, _, dname, variants in cases for _, config in variants]
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(set(specs))} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}")
    for spec, error in failures:
        print(spec.expression, error[:400])
    for rows, length, dname, variants in cases:
        run_case(rows, length, axis, dname, variants)


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    dev = current_device_info()
    print(ANCHORS)
    t0 = time.time()
    cases = plan(dev, only)
    specs = [cfg.spec(DTYPES[d], False) for _, _, _, d, vs in cases for _, cfg in vs]
    failures = [(s, e) for s, _, e in precompile(specs, arch_for(device_cc(cupy.cuda.Device().id)), jobs=16) if e]
    print(f"precompiled {len(set(specs))} kernels in {time.time() - t0:.1f} s; failures: {len(failures)}")
    for spec, error in failures:
        print(f"  compile FAILED {spec}: {error[:300]}")
    for case in cases:
        run_case(*case)
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"sweep done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
