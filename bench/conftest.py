"""pytest-benchmark runs: cufuse next to its peers, one group per op, shape and dtype.

    pytest bench/ [--quick-grid] [--benchmark-json FILE]

Collects ``bench_*.py``. The cases, the input rotation and the ceilings come from
``cufuse.bench`` (the same ones ``python -m cufuse.bench`` uses). A round is a run of
back-to-back calls (at least ~1 ms of work) ending in a device synchronisation, divided
by the number of calls: the wall time of complete calls, with the launch-and-synchronise
round trip amortised as a pipeline of calls amortises it. Each result's
``extra_info`` holds its rate (TB/s or TFLOP/s), the measured ceiling and the kernels the
call launched (from ``cufuse.tracing``: their template arguments are the chosen config).
Without a GPU every benchmark is skipped.
"""
from __future__ import annotations

import itertools

import pytest

from cufuse.bench.cases import cases_for
from cufuse.bench.runner import Ceilings, describe_failure, input_sets, release_memory
from cufuse.bench.timing import (BUDGET_MS, calls_per_batch, copy_sets, device_copy, host_ms_per_call, repeat_for_budget,
                                 time_cuda, warmup_batches)

DEVICE_COPY = "device copy"  # the ceiling, timed beside a memory-bound op


def pytest_collect_file(parent, file_path):
    # a file named on the command line is collected by pytest itself already
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)


def pytest_addoption(parser):
    parser.addoption("--quick-grid", action="store_true", help="a few shapes per op (python -m cufuse.bench --quick's)")


def pytest_generate_tests(metafunc):
    """Parametrise ``(case, impl_name)`` over the grid of the module's ``OP``: every
    implementation of each case, plus the device copy where the ceiling is a copy."""
    if "case" not in metafunc.fixturenames:
        return
    pairs = []
    for case in cases_for(metafunc.module.OP, metafunc.config.getoption("--quick-grid")):
        names = [impl.name for impl in case.impls] + ([DEVICE_COPY] if case.ceiling == "copy" else [])
        pairs += [(case, name) for name in names]
    ids = [f"{case.key} {name}".replace(" ", "-") for case, name in pairs]
    metafunc.parametrize(("case", "impl_name"), pairs, ids=ids)


def _gpu():
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:
        return None


@pytest.fixture(scope="session")
def cupy():
    module = _gpu()
    if module is None:
        pytest.skip("no CUDA GPU present")
    return module


@pytest.fixture(scope="session")
def ceilings(cupy):
    return Ceilings()


def _calls(case, impl_name):
    """(callable, rotated argument tuples, kernels launched by one call or None)."""
    if impl_name == DEVICE_COPY:
        return device_copy, copy_sets(case.traffic.min_bytes // 2), None
    impl = case.impl(impl_name)
    if impl.unsupported:
        pytest.skip(f"unsupported: {impl.unsupported}")
    why = impl.unavailable()
    if why is not None:
        pytest.skip(why)
    sets = input_sets(case)
    try:
        impl.call(*impl.prepare(sets[0]))
    except NotImplementedError as exc:
        pytest.skip(f"not built: {exc}")
    except Exception as exc:
        if impl is case.fused:
            raise
        pytest.skip(f"the peer cannot run this case: {describe_failure(exc)}")
    return impl.call, [impl.prepare(inputs) for inputs in sets], _kernels(impl, sets[0]) if impl is case.fused else None


def _kernels(impl, inputs):
    """The kernels one call launches, with their template arguments (the config chosen)."""
    from cufuse.tracing import trace

    try:
        result = trace(impl.call, *impl.prepare(inputs))
    except Exception as exc:
        return describe_failure(exc).replace("failed", "trace failed", 1)
    if result.uncaptured:
        return f"not seen: {result.uncaptured}"
    return [f"{node.symbol} grid {node.grid} block {node.block}" for node in result.kernels]


@pytest.fixture
def run_benchmark(benchmark, cupy, ceilings):
    """Benchmark ``impl_name`` on ``case`` and record its rate and config."""

    def run(case, impl_name):
        benchmark.group = case.key
        fn, arg_sets, kernels = _calls(case, impl_name)
        rotation = itertools.cycle(arg_sets)
        device = cupy.cuda.Device()

        # A round is a batch of `calls` back-to-back calls and one device synchronisation
        # after the last, exactly the batches `python -m cufuse.bench` times between CUDA
        # events (same batch size, budget and warm-up): pytest-benchmark divides the
        # round by `calls`, so a short kernel is not charged a launch-and-synchronise round
        # trip (~15 us on the H200) per call.
        probe_ms = time_cuda(fn, arg_sets, warmup=2, repeat=3)
        calls = calls_per_batch(probe_ms)
        count = itertools.count(1)

        def timed():
            fn(*next(rotation))
            if next(count) % calls == 0:
                device.synchronize()

        rounds = repeat_for_budget(probe_ms * calls, BUDGET_MS)
        benchmark.pedantic(timed, rounds=rounds, warmup_rounds=warmup_batches(probe_ms, calls), iterations=calls)
        ms = benchmark.stats.stats.median * 1e3
        rate = case.rate(ms)
        ceiling = ceilings.for_case(case)
        benchmark.extra_info.update({
            "metric": case.metric,
            case.metric: rate,
            "ceiling": ceiling,
            "fraction_of_ceiling": rate / ceiling if ceiling else None,
            "min_bytes": case.traffic.min_bytes,
            "flops": case.traffic.flops,
            "calls_per_round": calls,
            "host_ms_per_call": host_ms_per_call(fn, arg_sets, calls),
        })
        if kernels is not None:
            benchmark.extra_info["kernels"] = kernels

    yield run
    release_memory()
