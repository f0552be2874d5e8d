"""``python -m cufuse.bench`` and its parts that run without a GPU: the CPU fallback, the
grids, the unfused compositions (against the float64 oracles), the table, the JSON and
the roofline (on made-up timings)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cufuse import reference
from cufuse.bench import cases as bench_cases
from cufuse.bench import runner
from cufuse.bench.runner import Ceilings, Result, format_table
from cufuse.bench.timing import calls_per_batch, repeat_for_budget, rotation_count, warmup_batches

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args, tmp_path):
    """The command line with every GPU hidden, so it takes the CPU path on any machine."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "cufuse.bench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_quick_without_gpu_says_so_and_runs_the_reference_path(tmp_path):
    done = run_cli("--quick", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "No CUDA GPU found" in done.stdout
    for op in ("softmax", "linear", "attention"):
        assert f"\n{op} " in "\n" + done.stdout, done.stdout


def test_json_without_gpu_records_each_case(tmp_path):
    path = tmp_path / "results.json"
    done = run_cli("--op", "linear", "--json", str(path), "--plot", str(tmp_path / "r.png"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(path.read_text())
    assert document["device"].startswith("none")
    assert [row["op"] for row in document["results"]] == ["linear"]
    assert document["results"][0]["impls"]["cufuse"]["ms"] > 0
    assert not (tmp_path / "r.png").exists()


def test_bad_option_is_refused(tmp_path):
    done = run_cli("--op", "gemm", tmp_path=tmp_path)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_grids_are_the_issues():
    classes = sum(len(members) for members in bench_cases.SOFTMAX_CLASSES.values()) * len(bench_cases.SOFTMAX_CLASS_DTYPES)
    assert len(bench_cases.softmax_cases()) == 9 * 2 + 2 + 2 + classes
    # both weight layouts, plus fp32 and fp64 at 4096^3 and at 16 and 64 x 8192^2 (both layouts)
    assert len(bench_cases.linear_cases()) == 7 * 2 * 2 + 2 + 2 * 2 * 2
    # the prefill grid, two decode points, the grouped-query decode classes and the sinks' cost
    assert len(bench_cases.gqa_decode_cases()) == 24
    assert len(bench_cases.attention_cases()) == 2 * 2 * 4 * 2 + 2 + 24 + len(bench_cases.SINK_SHAPES)
    everything = bench_cases.cases_for("all")
    assert len({case.key for case in everything}) == len(everything)
    for op in bench_cases.OPS:
        quick = bench_cases.cases_for(op, quick=True)
        assert 1 <= len(quick) <= 4 and {case.op for case in quick} == {op}
    for case in everything:
        assert case.fused.name == "cufuse"


def test_metrics_follow_the_issues():
    metrics = {case.label: case.metric for case in bench_cases.linear_cases() if case.dtype == "float16"}
    assert metrics["64x8192x8192"] == "TB/s" and metrics["512x4096x4096"] == "TFLOP/s"
    decode = bench_cases.decode_case(8192)
    assert decode.metric == "TB/s" and decode.ceiling == "copy"
    assert bench_cases.prefill_case(8192, 64, "float16", True).impl("cupy unfused") is None  # scores too big
    assert decode.impl("cupy unfused") is not None


def test_rate_units():
    case = bench_cases.softmax_case((1024, 1024), "float32")  # 8 MiB moved
    assert case.rate(1.0) == pytest.approx(8 * 2**20 / 1e-3 / 1e12)
    prefill = bench_cases.prefill_case(2048, 64, "bfloat16", False)
    assert prefill.rate(1.0) == pytest.approx(prefill.traffic.flops / 1e9)  # FLOP per ms / 1e12 = TFLOP/s


def test_unfused_compositions_match_the_oracles(rng):
    x = rng.standard_normal((6, 37))
    for axis in (-1, 0, None):
        np.testing.assert_allclose(bench_cases.softmax_unfused(x, axis), reference.softmax(x, axis), rtol=1e-12)
    w, b = rng.standard_normal((37, 5)), rng.standard_normal(5)
    np.testing.assert_allclose(bench_cases.linear_relu_unfused(x, w, b), reference.fused_linear_relu(x, w, b), rtol=1e-12)
    q, k, v = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((2, 3, 9, 4))
    for causal in (False, True):
        np.testing.assert_allclose(bench_cases.attention_unfused(q, k, v, causal=causal),
                                   reference.attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-12)


def test_cpu_cases_run_the_numpy_path():
    for case in bench_cases.cpu_cases():
        result = runner.measure_cpu(case, repeat=1)
        assert result.fused_ms > 0


def _made_up_result(case, ms, status=None):
    status = status or {name: "ok" if value is not None else "unavailable" for name, value in ms.items()}
    return Result(case=case, ms=ms, status=status, ceiling=4.0 if case.metric == "TB/s" else 700.0)


def test_table_shows_rate_fraction_speedup_and_not_built():
    fast = _made_up_result(bench_cases.softmax_case((1024, 1024), "float16"),
                           {"cufuse": 0.002, "cupy unfused": 0.02, "cupyx.scipy": 0.03, "torch.softmax": 0.004})
    missing = _made_up_result(bench_cases.softmax_case((16, 1048576), "float16"),
                              {"cufuse": None, "cupy unfused": 0.5, "cupyx.scipy": None, "torch.softmax": None},
                              {"cufuse": "not built", "cupy unfused": "ok", "cupyx.scipy": "failed: boom",
                               "torch.softmax": "unavailable"})
    table = format_table([fast, missing])
    rate = fast.case.rate(0.002)
    assert f"{rate:.2f} TB/s" in table
    assert f"{100 * rate / 4.0:.0f}" in table
    assert "10.00x" in table and "15.00x" in table and "torch.softmax 2.00x" in table  # the best peer
    assert "not built" in table and "failed" in table and "unavailable" in table
    assert runner.failures([fast, missing]) == ["softmax 16x1048576 float16 cupyx.scipy: failed: boom"]
    row = missing.to_dict()
    assert row["impls"]["cufuse"]["status"] == "not built" and row["fraction_of_ceiling"] is None
    assert fast.to_dict()["impls"]["cupy unfused"]["speedup"] == pytest.approx(10.0)


def test_a_result_that_differs_from_cupy_is_flagged():
    case = bench_cases.linear_case(16, 64, 32, "float16")
    assert runner.relative_difference(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == pytest.approx(0.5)
    close = _made_up_result(case, {"cufuse": 1.0, "cupy unfused": 2.0})
    wrong = _made_up_result(case, {"cufuse": 1.0, "cupy unfused": 2.0})
    close.error, wrong.error = 1e-3, float("nan")
    table = format_table([close, wrong])
    assert " ok " in table and "DIFFERS nan" in table
    assert runner.failures([close, wrong]) == ["linear 16x64x32 float16 cufuse: differs from cupy unfused by nan of the largest value"]


def test_ceilings_are_measured_once_and_bfloat16_falls_back(monkeypatch):
    calls = []
    monkeypatch.setattr(runner, "copy_ceiling_tbps", lambda nbytes: calls.append(nbytes) or 4.0)

    def gemm(dtype):
        if dtype.name == "bfloat16":
            raise TypeError("no bfloat16 matmul")
        return 700.0

    monkeypatch.setattr(runner, "gemm_ceiling_tflops", gemm)
    ceilings = Ceilings()
    decode = bench_cases.decode_case(8192)
    assert ceilings.for_case(decode) == ceilings.for_case(decode) == 4.0
    assert calls == [decode.traffic.min_bytes // 2]
    assert ceilings.for_case(bench_cases.prefill_case(512, 64, "bfloat16", False)) == 700.0
    assert ceilings.as_dict()["cupy_matmul_8192_TFLOPs"] == {"bfloat16": None, "float16": 700.0}


def test_roofline_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    from cufuse.bench.roofline import plot_roofline

    ceilings = Ceilings()
    ceilings.copy[1 << 30] = 4.2
    ceilings.gemm.update({"float16": 700.0, "bfloat16": None})
    results = [
        _made_up_result(bench_cases.softmax_case((65536, 1024), "float16"),
                        {"cufuse": 0.07, "cupy unfused": 1.1, "cupyx.scipy": None, "torch.softmax": None}),
        _made_up_result(bench_cases.linear_case(8192, 8192, 8192, "float16"),
                        {"cufuse": 2.0, "cupy unfused": 2.2, "torch addmm_relu": None, "torch unfused": None}),
    ]
    path = tmp_path / "roofline.png"
    plot_roofline(results, ceilings, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_repeats_and_rotation():
    assert repeat_for_budget(100.0, 200.0) == 5  # big shapes: a few runs
    assert repeat_for_budget(0.01, 200.0) == 50  # small ones: many
    assert rotation_count(1 << 30) == 2
    assert rotation_count(1 << 20) == 64


def test_batches_of_about_a_millisecond():
    assert calls_per_batch(2.0) == 1  # a long call is its own batch
    assert calls_per_batch(0.05) == 20  # 50 us calls: 20 back-to-back share one pair of events
    assert calls_per_batch(0.3) == 4  # rounded up: a batch is never shorter than 1 ms
    assert calls_per_batch(0.0) >= 1


def test_warm_up_lasts_about_100_ms():
    assert warmup_batches(0.05, calls_per_batch(0.05)) == 100  # 100 batches of 20 x 50 us
    assert warmup_batches(2.5, 1) == 40
    assert warmup_batches(500.0, 1) == 1  # never none


def test_gpu_flow_on_cpu_stand_ins(monkeypatch, tmp_path, capsys):
    """The GPU command's whole flow (ceilings, every implementation of every case, table,
    JSON, roofline) with NumPy arrays and wall-clock timing standing in for the device."""
    import time

    from cufuse.bench import cli

    def wall_ms(fn, arg_sets, budget_ms):
        start = time.perf_counter()
        fn(*arg_sets[0])
        return (time.perf_counter() - start) * 1e3

    monkeypatch.setattr(cli, "gpu_status", lambda: (True, "stand-in (compute capability 0.0)"))
    monkeypatch.setattr(bench_cases.common, "torch_module", lambda: None)  # the torch peers need CUDA tensors
    monkeypatch.setattr(cli, "selected_cases", lambda args: bench_cases.cpu_cases())
    monkeypatch.setattr(runner, "input_sets", lambda case: [case.make_inputs(np, np.random.default_rng(0))])
    monkeypatch.setattr(runner, "time_cuda_budget", wall_ms)
    monkeypatch.setattr(runner, "host_ms_per_call", lambda fn, arg_sets, calls: 0.0)
    monkeypatch.setattr(runner, "release_memory", lambda: None)
    monkeypatch.setattr(runner, "copy_ceiling_tbps", lambda nbytes: 4.0)
    monkeypatch.setattr(runner, "gemm_ceiling_tflops", lambda dtype: 700.0)
    plot = pytest.importorskip("matplotlib") and tmp_path / "roofline.png"
    assert cli.main(["--json", str(tmp_path / "r.json"), "--plot", str(plot)]) == 0
    shown = capsys.readouterr().out
    assert "== softmax" in shown and "== linear" in shown and "== attention" in shown
    document = json.loads((tmp_path / "r.json").read_text())
    impls = {row["op"]: row["impls"] for row in document["results"]}
    assert impls["softmax"]["cufuse"]["status"] == "ok"
    assert impls["softmax"]["cupy unfused"]["status"] == "ok"
    assert impls["linear"]["cupy unfused"]["speedup"] > 0
    assert impls["linear"]["cupy unfused"]["host_bound"] is False  # enqueueing took no time
    assert all(row["relative_difference_from_unfused"] < 1e-5 for row in document["results"])
    assert plot.exists()


def test_compare_runs_matches_cli_and_pytest_benchmark_cases(tmp_path):
    """bench/compare_runs.py pairs a CLI JSON with a pytest-benchmark JSON case by case
    (implementation names with spaces are dashes in the pytest ids) and reports the ratios."""
    cli = {"results": [{"op": "linear", "case": "64x8192x8192 w=(N,K).T", "dtype": "bfloat16",
                        "impls": {"cufuse": {"rate": 3.0}, "torch addmm_relu": {"rate": 2.0},
                                  "torch unfused": {"rate": 1.0, "host_bound": True},
                                  "cupy unfused": {"rate": None}}}]}
    group = "linear 64x8192x8192 w=(N,K).T bfloat16"

    def bench(impl, rate):
        return {"group": group, "name": f"test_linear[{group.replace(' ', '-')}-{impl.replace(' ', '-')}]",
                "extra_info": {"metric": "TB/s", "TB/s": rate}}

    py = {"benchmarks": [bench("cufuse", 2.7), bench("torch addmm_relu", 2.0), bench("torch unfused", 2.0)]}
    (tmp_path / "cli.json").write_text(json.dumps(cli))
    (tmp_path / "py.json").write_text(json.dumps(py))
    done = subprocess.run([sys.executable, os.path.join(REPO, "bench", "compare_runs.py"),
                           str(tmp_path / "cli.json"), str(tmp_path / "py.json"), str(tmp_path / "cli.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cases in both: 3" in done.stdout
    assert "GPU-bound:  median 0.950" in done.stdout  # (0.9 + 1.0) / 2; the host-bound row apart
    assert "host-bound: median 2.000, within 5%: 0, within 10%: 0 of 1" in done.stdout
    assert "speed-up over each GPU-bound peer, pytest / cli: median 0.900" in done.stdout
    assert "cli2 / cli, GPU-bound: median 1.000, within 5%: 2, within 10%: 2 of 2" in done.stdout


def test_results_markdown_renders_every_case_of_a_run(tmp_path):
    """bench/results_markdown.py turns a CLI JSON into the README tables, one row per case."""
    run = {"device": "GPU X", "date": "2026-01-01", "command": "python -m cufuse.bench", "versions": {"cufuse": "0"},
           "ceilings": {"copy_TBps_read_plus_write": {"1048576": 3.0}, "cupy_matmul_8192_TFLOPs": {"float16": 700.0}},
           "results": [{"op": "softmax", "case": "4x8", "dtype": "float16", "metric": "TB/s", "fraction_of_ceiling": 0.5,
                        "impls": {"cufuse": {"rate": 1.5, "speedup": None},
                                  "torch.softmax": {"rate": 1.0, "speedup": 1.5}}},
                       {"op": "softmax", "case": "8x8", "dtype": "float32", "metric": "TB/s", "fraction_of_ceiling": 0.25,
                        "impls": {"cufuse": {"rate": 0.75, "speedup": None}, "torch.softmax": {"rate": None}}}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    done = subprocess.run([sys.executable, os.path.join(REPO, "bench", "results_markdown.py"), str(tmp_path / "run.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "| 4x8 | float16 | 1.50 | 50 | - | 1.50x (1.00) |" in done.stdout
    assert "| 8x8 | float32 | 0.75 | 25 | - | - |" in done.stdout
    assert "device copy 3.00 TB/s" in done.stdout and "float16 700" in done.stdout


def test_ragged_prefill_grid_is_fixed_and_matches_the_dense_flops():
    cases = bench_cases.attention_varlen_cases()
    assert len(cases) == len(bench_cases.RAGGED_SEQUENCES) * len(bench_cases.RAGGED_HEAD_DIMS) * 2
    low, high = bench_cases.RAGGED_LENGTHS
    for batch in bench_cases.RAGGED_SEQUENCES:
        lengths = bench_cases.ragged_lengths(batch)
        assert lengths == bench_cases.ragged_lengths(batch) and len(lengths) == batch  # a fixed seed
        assert all(low <= n <= high for n in lengths)
        n = bench_cases.dense_length(lengths)
        assert abs(batch * n * n / sum(x * x for x in lengths) - 1) < 1e-3
    case = bench_cases.ragged_case(32, 128, True)
    assert case.klass == "ragged prefill D128 causal" and [impl.name for impl in case.impls] == [
        "cufuse", "cufuse dense", "FA4"]
    assert not case.impl("cufuse dense").peer and case.impl("FA4").peer
    assert bench_cases.ragged_case(32, 64, False, "float32").impl("FA4").unsupported
