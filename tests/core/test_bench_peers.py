"""The optional benchmark peers (FlashAttention-4, QuACK) without a GPU, PyTorch or either
peer installed: skipped with one line when not importable, a peer that raises recorded as
failed while the run goes on, an unsupported case never called, and the best peer per case
and per class."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cufuse import traffic
from cufuse.bench import cases as bench_cases
from cufuse.bench import runner
from cufuse.bench.cases import Case, Impl, peers
from cufuse.bench.runner import Result

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_no_peer_is_imported_with_the_bench_modules():
    code = ("import sys, cufuse.bench.cli, cufuse.bench.cases, cufuse.bench.runner; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flash_attn', 'quack')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _pretend_torch(monkeypatch, missing=("flash_attn.cute", "quack.softmax", "quack.gemm_interface", "quack")):
    """PyTorch 'importable', the named peer modules not."""
    monkeypatch.setattr(bench_cases.common, "torch_module", lambda: object())
    monkeypatch.setattr(bench_cases.common, "optional_module",
                        lambda name: (None, f"{name} is not importable (ModuleNotFoundError)") if name in missing
                        else (object(), None))


def test_absent_peers_are_skipped_with_one_line_each(monkeypatch):
    _pretend_torch(monkeypatch, missing=("flash_attn.cute",))
    cases = bench_cases.cases_for("attention", quick=True) + bench_cases.cases_for("paged_attention", quick=True)
    assert runner.skipped_peers(cases) == ["skipped FA4: flash_attn.cute is not importable (ModuleNotFoundError)"]
    fa4 = cases[0].impl("FA4")
    assert not fa4.available() and fa4.unavailable().startswith("flash_attn.cute")
    assert cases[0].impl("sdpa cudnn").available()


def test_without_torch_every_torch_based_peer_is_one_line(monkeypatch):
    monkeypatch.setattr(bench_cases.common, "torch_module", lambda: None)
    lines = runner.skipped_peers(bench_cases.cases_for("softmax", quick=True))
    assert lines == ["skipped torch.softmax, QuACK: PyTorch with CUDA is not importable"]


def test_the_table_drops_a_peer_that_ran_nowhere():
    case = bench_cases.prefill_case(2048, 128, "bfloat16", False)
    result = _result(case, {"cufuse": 1.0, "cupy unfused": None, "sdpa flash": 2.0, "sdpa cudnn": 1.5, "FA4": None},
                     {"FA4": "unavailable", "cupy unfused": "failed: no bf16 matmul"})
    table = runner.format_table([result])
    assert "vs FA4" not in table and "vs sdpa cudnn" in table and "sdpa cudnn 1.50x" in table


def _result(case, ms, status=None):
    status = {name: (status or {}).get(name, "ok" if value is not None else "unavailable") for name, value in ms.items()}
    return Result(case=case, ms=ms, status=status, ceiling=700.0)


def _fake_case(*impls):
    return Case(op="fake", label="8x8", dtype="float32", traffic=traffic.Traffic(flops=1, min_bytes=1, unfused_bytes=1),
                metric="TB/s", make_inputs=lambda xp, rng: (np.ones((8, 8), np.float32), None), impls=impls)


def _cpu_timing(monkeypatch):
    """measure() on the CPU: one NumPy input set, a fixed time per implementation."""
    monkeypatch.setattr(runner, "input_sets", lambda case: [case.make_inputs(np, None)])
    monkeypatch.setattr(runner, "time_cuda_budget", lambda fn, arg_sets, budget_ms: fn(*arg_sets[0]) or 1.0)
    monkeypatch.setattr(runner, "host_ms_per_call", lambda fn, arg_sets, calls: 0.0)
    monkeypatch.setattr(runner, "release_memory", lambda: None)
    monkeypatch.setattr(runner, "copy_ceiling_tbps", lambda nbytes: 4.0)


def test_a_peer_that_raises_is_recorded_and_the_run_goes_on(monkeypatch):
    _cpu_timing(monkeypatch)
    called = []

    def boom(x, out):
        raise RuntimeError("compile error: tile shape\nsecond line")

    case = _fake_case(Impl("cufuse", lambda x, out: called.append("cufuse")),
                      Impl("Boom", boom),
                      Impl("Never", lambda x, out: called.append("never"), unsupported="no such layout"),
                      Impl("After", lambda x, out: called.append("after")))
    result = runner.measure(case, runner.Ceilings())
    assert result.status["Boom"] == "failed: RuntimeError: compile error: tile shape"
    assert result.status["Never"] == "unsupported: no such layout"
    assert result.status["After"] == "ok" and called == ["cufuse", "after"]
    assert result.ms["Boom"] is None and result.ms["After"] == 1.0
    assert runner.failures([result]) == ["fake 8x8 float32 Boom: failed: RuntimeError: compile error: tile shape"]
    table = runner.format_table([result])
    assert "failed" in table and "unsupported" in table
    row = result.to_dict()
    assert row["impls"]["Boom"]["status"].startswith("failed") and row["best_peer"] == "After"


def test_best_peer_is_the_fastest_peer_that_ran():
    case = _fake_case(Impl("cufuse", None), Impl("slow", None), Impl("fast", None), Impl("ceiling", None, peer=False),
                      Impl("broken", None))
    result = _result(case, {"cufuse": 2.0, "slow": 3.0, "fast": 1.0, "ceiling": 0.5, "broken": None},
                     {"broken": "failed: boom"})
    assert result.best_peer() == "fast" and result.speedup("fast") == pytest.approx(0.5)
    assert result.to_dict()["best_peer_speedup"] == pytest.approx(0.5)
    nothing = _result(case, {"cufuse": 2.0, "slow": None, "fast": None, "ceiling": 0.5, "broken": None})
    assert nothing.best_peer() is None and "| -" not in runner.format_table([nothing])


def test_class_minima_take_the_worst_case_against_its_best_peer():
    cases = [bench_cases.softmax_case((65536, 1000), "float16", klass="medium"),
             bench_cases.softmax_case((16384, 3000), "float16", klass="medium"),
             bench_cases.softmax_case((671, 100000), "float16", klass="long")]
    results = [_result(cases[0], {"cufuse": 1.0, "QuACK": 0.8, "torch.softmax": 2.0}),
               _result(cases[1], {"cufuse": 1.0, "QuACK": 1.2, "torch.softmax": 0.9}),
               _result(cases[2], {"cufuse": 1.0, "QuACK": None, "torch.softmax": None})]
    rows = runner.class_minima(results)
    assert rows[0][:5] == ("softmax", "medium", "float16", 2, pytest.approx(0.8))
    assert rows[0][5:] == ("medium: 65536x1000", "QuACK")
    assert rows[1] == ("softmax", "long", "float16", 1, None, "-", "-")
    text = runner.format_class_minima(results)
    assert "0.80x" in text and "QuACK" in text


def test_quick_grids_run_each_optional_peer():
    for op, peer in (("softmax", peers.QUACK), ("linear", peers.QUACK), ("linear_epilogues", peers.QUACK),
                     ("attention", peers.FA4), ("paged_attention", peers.FA4), ("attention_varlen", peers.FA4)):
        quick = bench_cases.cases_for(op, quick=True)
        assert any(case.impl(peer) is not None and not case.impl(peer).unsupported for case in quick), op


def test_unsupported_peer_cases():
    assert bench_cases.softmax_case((4096, 8192), "float16", axis=0).impl("QuACK").unsupported
    assert bench_cases.softmax_case((8192, 8192), "float16", view="::2").impl("QuACK").unsupported
    assert not bench_cases.softmax_case((4, 4194304), "float16").impl("QuACK").unsupported  # tried; may fail
    assert bench_cases.linear_act_case(512, 4096, 4096, "bfloat16", "gelu").impl("QuACK").unsupported  # exact erf
    assert not bench_cases.linear_act_case(512, 4096, 4096, "bfloat16", "gelu_tanh").impl("QuACK").unsupported
    assert bench_cases.linear_case(64, 8192, 8192, "float32").impl("QuACK").unsupported
    assert not bench_cases.gated_case(16, 4096, 11008, "bfloat16", "silu", "nk").impl("QuACK").unsupported
    assert bench_cases.attention_case(1, 4, 128, 128, 64, "float32", causal=True).impl("FA4").unsupported


def test_causal_is_bottom_right_for_every_peer():
    # Nq == Nk: SDPA's top-left is_causal is the same mask; one query sees every key.
    prefill = bench_cases.prefill_case(2048, 64, "bfloat16", True)
    assert prefill.impl("sdpa flash") and prefill.impl("sdpa cudnn") and prefill.impl("FA4")
    # Nq < Nk: FLASH (no mask argument) is left out, CUDNN gets the explicit mask.
    few = bench_cases.attention_case(2, 4, 16, 256, 64, "bfloat16", causal=True)
    assert few.impl("sdpa flash") is None and few.impl("sdpa cudnn") is not None
    paged = {case.label: case for case in bench_cases.paged_cases()}
    for label, case in paged.items():
        n_q = int(label.split(" Nq")[1].split()[0])
        if case.impl("cufuse dense") is not None:
            assert (case.impl("sdpa flash") is None) == (n_q > 1), label
        assert case.impl("FA4") is not None


def test_classes_are_named():
    for case in bench_cases.cases_for("all"):
        assert case.klass, case.key
    assert bench_cases.prefill_case(2048, 64, "bfloat16", True).klass == "prefill D64 causal"
    assert {case.klass for case in bench_cases.paged_cases()} >= {"page size", "mixed"}


def test_pytest_bench_skips_an_absent_peer_with_its_reason(monkeypatch):
    _pretend_torch(monkeypatch)
    spec = importlib.util.spec_from_file_location("bench_conftest", os.path.join(REPO, "bench", "conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    case = bench_cases.prefill_case(2048, 128, "bfloat16", False)
    with pytest.raises(pytest.skip.Exception, match="flash_attn.cute is not importable"):
        conftest._calls(case, "FA4")
    gelu = bench_cases.linear_act_case(512, 4096, 4096, "bfloat16", "gelu")
    with pytest.raises(pytest.skip.Exception, match="unsupported: QuACK has no gelu epilogue"):
        conftest._calls(gelu, "QuACK")


def test_results_markdown_shows_the_best_peer_and_class_minima(tmp_path):
    run = {"device": "GPU X", "date": "2026-01-01", "command": "python -m cufuse.bench", "versions": {"cufuse": "0"},
           "ceilings": {}, "results": [
               {"op": "attention", "case": "B16 H16 N2048 D128 causal", "dtype": "bfloat16", "metric": "TFLOP/s",
                "fraction_of_ceiling": 0.6, "class": "prefill D128 causal", "best_peer": "FA4",
                "best_peer_speedup": 0.69,
                "impls": {"cufuse": {"rate": 443.0, "status": "ok"},
                          "FA4": {"rate": 643.0, "speedup": 0.69, "status": "ok"},
                          "sdpa cudnn": {"rate": None, "status": "failed: no kernel"},
                          "QuACK": {"rate": None, "status": "unavailable"}}}]}
    other = {**run, "results": [{**run["results"][0], "case": "B4 H16 N8192 D128 causal", "best_peer_speedup": 0.75,
                                 "impls": {**run["results"][0]["impls"], "FA4": {"rate": 600.0, "speedup": 0.75}}}]}
    (tmp_path / "a.json").write_text(json.dumps(run))
    (tmp_path / "b.json").write_text(json.dumps(other))
    done = subprocess.run([sys.executable, os.path.join(REPO, "bench", "results_markdown.py"),
                           str(tmp_path / "a.json"), str(tmp_path / "b.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "| B16 H16 N2048 D128 causal | bfloat16 | 443.00 | 60 | FA4 0.69x | 0.69x (643.00) | failed |" in done.stdout
    assert "vs QuACK" not in done.stdout
    assert "| attention | prefill D128 causal | bfloat16 | 2 | 0.69x | B16 H16 N2048 D128 causal | FA4 |" in done.stdout


def test_roofline_from_the_json_of_a_split_run(tmp_path):
    pytest.importorskip("matplotlib")
    from cufuse.bench import roofline

    ceilings = {"copy_TBps_read_plus_write": {"1073741824": 3.0}, "cupy_matmul_8192_TFLOPs": {"bfloat16": 700.0}}
    prefill = _result(bench_cases.prefill_case(2048, 128, "bfloat16", True),
                      {"cufuse": 1.0, "cupy unfused": None, "sdpa flash": 2.0, "sdpa cudnn": 1.5, "FA4": 0.8})
    softmax = _result(bench_cases.softmax_case((65536, 1024), "float16"),
                      {"cufuse": 0.1, "cupy unfused": 1.0, "cupyx.scipy": 1.0, "torch.softmax": 0.2, "QuACK": 0.09})
    for name, result in (("a.json", prefill), ("b.json", softmax)):
        (tmp_path / name).write_text(json.dumps({"device": "GPU X (9.0)", "ceilings": ceilings,
                                                 "results": [result.to_dict()]}))
    out = tmp_path / "roofline.png"
    assert roofline.main([str(out), str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
