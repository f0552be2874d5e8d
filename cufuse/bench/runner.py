"""Measuring cases: the ceilings, each implementation's time, the table and the JSON.

Shared by the command line and the pytest-benchmark suite (which takes ``Ceilings``,
``input_sets`` and ``release_memory`` from here).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time

from .cases import UNFUSED, Case, resolve_dtype
from .timing import (calls_per_batch, copy_ceiling_tbps, gemm_ceiling_tflops, host_ms_per_call, is_host_bound,
                     rotation_count, time_cuda_budget)

CEILING_COPY_BYTES = 1 << 30
CEILING_GEMM_DTYPES = ("float16", "bfloat16")
# Largest max|cufuse - unfused (float32)| / max|unfused| taken as agreement: a sanity flag so that a
# fast but wrong kernel never passes unnoticed (the tests are the proof of accuracy).
AGREEMENT = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-3, "float64": 1e-9}


class Ceilings:
    """Ceilings measured in this run, each once: copy bandwidth per byte count, and the
    ``cupy.matmul`` rate per dtype."""

    def __init__(self):
        self.copy = {}  # bytes copied -> TB/s (read + write)
        self.gemm = {}  # dtype name -> TFLOP/s, or None where cupy.matmul failed

    def copy_tbps(self, nbytes: int) -> float:
        if nbytes not in self.copy:
            self.copy[nbytes] = copy_ceiling_tbps(nbytes)
        return self.copy[nbytes]

    def gemm_tflops(self, dtype: str):
        if dtype not in self.gemm:
            try:
                self.gemm[dtype] = gemm_ceiling_tflops(resolve_dtype(dtype))
            except Exception:
                self.gemm[dtype] = None
        return self.gemm[dtype]

    def for_case(self, case: Case):
        """The ceiling of ``case``'s metric: a copy of the bytes the op must move, or
        the GEMM rate of its dtype (float16's where cupy.matmul cannot run the dtype)."""
        if case.ceiling == "copy":
            return self.copy_tbps(case.traffic.min_bytes // 2)
        return self.gemm_tflops(case.dtype) or self.gemm_tflops("float16")

    @property
    def best_copy_tbps(self) -> float:
        return max(self.copy.values())

    def as_dict(self) -> dict:
        return {
            "copy_TBps_read_plus_write": {str(n): v for n, v in sorted(self.copy.items())},
            "cupy_matmul_8192_TFLOPs": dict(self.gemm),
        }


@dataclasses.dataclass
class Result:
    """One case's times (ms, None where it did not run) and why each did or did not run."""

    case: Case
    ms: dict
    status: dict  # "ok", "not built", "unavailable", "unsupported: ..." or "failed: ..."
    ceiling: float | None
    error: float | None = None  # cufuse's max difference from the unfused CuPy result, relative
    host_ms: dict = dataclasses.field(default_factory=dict)  # Python enqueue time per call, per impl

    def host_bound(self, name: str):
        """Whether ``name``'s time is its launch rate (the GPU waited on the host)."""
        return is_host_bound(self.host_ms.get(name), self.ms.get(name))

    def agrees(self):
        return None if self.error is None else self.error <= AGREEMENT[self.case.dtype]

    @property
    def fused_ms(self):
        return self.ms[self.case.fused.name]

    def rate(self, name: str):
        ms = self.ms.get(name)
        return None if ms is None else self.case.rate(ms)

    def fraction_of_ceiling(self):
        rate = self.rate(self.case.fused.name)
        return None if rate is None or not self.ceiling else rate / self.ceiling

    def speedup(self, peer: str):
        """Peer time over cufuse time (> 1: cufuse is faster)."""
        peer_ms = self.ms.get(peer)
        return None if peer_ms is None or self.fused_ms is None else peer_ms / self.fused_ms

    def best_peer(self):
        """The fastest peer that ran (cufuse's own variants and the ceilings excluded), or None."""
        timed = [(self.ms[impl.name], impl.name) for impl in self.case.impls[1:]
                 if impl.peer and self.ms.get(impl.name) is not None]
        return min(timed)[1] if timed else None

    def to_dict(self) -> dict:
        case = self.case
        return {
            "op": case.op,
            "case": case.label,
            "dtype": case.dtype,
            "metric": case.metric,
            "flops": case.traffic.flops,
            "min_bytes": case.traffic.min_bytes,
            "unfused_bytes": case.traffic.unfused_bytes,
            "intensity": case.traffic.intensity,
            "ceiling": self.ceiling,
            "fraction_of_ceiling": self.fraction_of_ceiling(),
            "relative_difference_from_unfused": self.error,
            "class": case.klass,
            "best_peer": self.best_peer(),
            "best_peer_speedup": None if self.best_peer() is None else self.speedup(self.best_peer()),
            "impls": {
                name: {"ms": self.ms[name], "rate": self.rate(name), "status": self.status[name],
                       "speedup": None if name == case.fused.name else self.speedup(name),
                       "host_ms": self.host_ms.get(name), "host_bound": self.host_bound(name)}
                for name in self.ms
            },
        }


def input_sets(case: Case, *, seed: int = 0) -> list:
    """Enough input sets of ``case`` on the GPU that rotating through them spans several
    times the L2, so no timed call is served from the cache."""
    import cupy

    rng = cupy.random.default_rng(seed)
    first = case.make_inputs(cupy, rng)
    count = rotation_count(sum(array.nbytes for array in first if array is not None))  # (None: an out left to the call)
    return [first] + [case.make_inputs(cupy, rng) for _ in range(count - 1)]


def release_memory() -> None:
    """Return pooled device memory between cases (CuPy's pool and PyTorch's cache)."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")  # only if a peer already imported it
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def describe_failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "failed: " + (text if len(text) <= 120 else text[:117] + "...")


def measure(case: Case, ceilings: Ceilings, *, budget_ms: float = 200.0) -> Result:
    """Time every implementation of ``case`` on the same rotated inputs."""
    ms = {impl.name: None for impl in case.impls}
    try:
        sets = input_sets(case)
    except Exception as exc:  # out of memory, or a dtype this CuPy cannot make
        release_memory()
        why = describe_failure(exc).replace("failed", "failed making the inputs", 1)
        return Result(case=case, ms=ms, status=dict.fromkeys(ms, why), ceiling=None)
    status, host_ms = {}, {}
    for impl in case.impls:
        status[impl.name] = "unavailable"
        if impl.unsupported:
            status[impl.name] = f"unsupported: {impl.unsupported}"
            continue
        if not impl.available():
            continue
        try:
            prepared = [impl.prepare(inputs) for inputs in sets]
            ms[impl.name], status[impl.name] = time_cuda_budget(impl.call, prepared, budget_ms=budget_ms), "ok"
            host_ms[impl.name] = host_ms_per_call(impl.call, prepared, calls_per_batch(ms[impl.name]))
        except NotImplementedError:
            status[impl.name] = "not built"
        except Exception as exc:
            status[impl.name] = describe_failure(exc)
    error = None
    if status[case.fused.name] == status.get(UNFUSED) == "ok":
        # The check runs the unfused composition on float32 copies of 16-bit inputs: in the
        # input dtype itself it overflows or loses digits on long float16 rows.
        widened = [a.astype("float32") if getattr(a, "dtype", None) is not None and a.dtype.kind in "fV"
                   and a.dtype.itemsize < 4 else a for a in sets[0]]
        error = relative_difference(case.fused.call(*sets[0]), case.impl(UNFUSED).call(*widened))
    del sets
    release_memory()
    return Result(case=case, ms=ms, status=status, ceiling=ceilings.for_case(case), error=error, host_ms=host_ms)


def relative_difference(result, expected) -> float:
    """max |result - expected| / max |expected|, in float32, or float64 where either is
    float64 (NaN if either holds a NaN)."""
    wide = "float64" if "float64" in (result.dtype, expected.dtype) else "float32"
    result, expected = result.astype(wide), expected.astype(wide)
    return float(abs(result - expected).max() / max(float(abs(expected).max()), 1e-30))


def measure_cpu(case: Case, *, repeat: int = 5) -> Result:
    """Median wall time of cufuse's NumPy reference path on ``case`` (no GPU)."""
    import numpy as np

    inputs = case.make_inputs(np, np.random.default_rng(0))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        case.fused.call(*inputs)
        times.append((time.perf_counter() - start) * 1e3)
    name = case.fused.name
    return Result(case=case, ms={name: statistics.median(times)}, status={name: "ok"}, ceiling=None)


def _number(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _agreement(result: Result) -> str:
    agrees = result.agrees()
    return "-" if agrees is None else "ok" if agrees else f"DIFFERS {result.error:.1e}"


HOST_BOUND_MARK = " h"  # after a peer's rate: its time is its Python launch rate (host-bound)


def _best_peer_cell(result: Result) -> str:
    best = result.best_peer()
    return "-" if best is None else f"{best} {_number(result.speedup(best), '.2f', '?')}x"


def format_table(results: list) -> str:
    """One table per op: time, rate, fraction of the ceiling, the best (fastest) peer and
    the speed-up over it, then the speed-up over each peer (with the peer's own rate in
    brackets, marked where the peer is host-bound). A peer unavailable in every row of the
    op (not importable: ``skipped_peers`` says so in one line) gets no column."""
    blocks = []
    for op in dict.fromkeys(result.case.op for result in results):
        rows = [result for result in results if result.case.op == op]
        peers = [name for name in dict.fromkeys(name for result in rows for name in result.ms
                                                if name != result.case.fused.name)
                 if any(result.status.get(name, "unavailable") != "unavailable" for result in rows)]
        header = ["case", "dtype", "ms", "rate", "% ceil", "check", "best peer"] + [f"vs {peer}" for peer in peers]
        lines = [header]
        for result in rows:
            fused = result.case.fused.name
            fraction = result.fraction_of_ceiling()
            cells = [
                result.case.label,
                result.case.dtype,
                _number(result.fused_ms, ".3f", result.status[fused].split(":")[0]),
                _number(result.rate(fused), ".2f") + f" {result.case.metric}",
                _number(None if fraction is None else 100 * fraction, ".0f"),
                _agreement(result),
                _best_peer_cell(result),
            ]
            for peer in peers:
                speedup, rate = result.speedup(peer), result.rate(peer)
                if peer not in result.status:
                    cells.append("")
                elif rate is None:
                    cells.append(result.status[peer].split(":")[0])
                else:
                    host = HOST_BOUND_MARK if result.host_bound(peer) else ""
                    cells.append(f"{_number(speedup, '.2f', '?')}x ({rate:.2f}){host}")
            lines.append(cells)
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = [f"== {op}"] + ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
        blocks.append("\n".join(text))
    return "\n\n".join(blocks)


def skipped_peers(cases: list) -> list:
    """One line per reason some implementations cannot be imported here, naming them."""
    names = {}
    for case in cases:
        for impl in case.impls:
            why = None if impl.unsupported else impl.unavailable()
            if why is not None:
                names.setdefault(why, {})[impl.name] = None
    return [f"skipped {', '.join(found)}: {why}" for why, found in names.items()]


def class_minima(results: list) -> list:
    """Per op, class and dtype, the case where cufuse does worst against its best peer:
    ``(op, class, dtype, cases, speed-up over the best peer or None, that case's label, that
    peer)``; the speed-up is peer time / cufuse time, as in the table."""
    groups = {}
    for result in results:
        groups.setdefault((result.case.op, result.case.klass or "all", result.case.dtype), []).append(result)
    rows = []
    for (op, klass, dtype), members in groups.items():
        scored = [(result.speedup(result.best_peer()), result.case.label, result.best_peer()) for result in members
                  if result.best_peer() is not None and result.speedup(result.best_peer()) is not None]
        worst = min(scored) if scored else (None, "-", "-")
        rows.append((op, klass, dtype, len(members), *worst))
    return rows


def format_class_minima(results: list) -> str:
    """The class minima as text, one line a class."""
    rows = class_minima(results)
    lines = [["op", "class", "dtype", "cases", "min vs best peer", "at", "peer"]]
    lines += [[op, klass, dtype, str(count), _number(ratio, ".2f") + ("x" if ratio is not None else ""), label, peer]
              for op, klass, dtype, count, ratio, label, peer in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def failures(results: list) -> list:
    """``"<case> <impl>: <why>"`` for every implementation that failed (not the ones
    not built or unavailable), and for every cufuse result that differs from CuPy's."""
    found = []
    for result in results:
        found += [f"{result.case.key} {name}: {why}" for name, why in result.status.items() if why.startswith("failed")]
        if result.agrees() is False:
            found.append(f"{result.case.key} {result.case.fused.name}: differs from {UNFUSED} by "
                         f"{result.error:.1e} of the largest value")
    return found
