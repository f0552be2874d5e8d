"""The kernel loader: NVRTC compilation (no GPU needed), the disk cache, and on a GPU the
launch of a templated kernel at two tile sizes, thread safety and cross-process reuse."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from cufuse._core import loader
from cufuse._core import registry
from cufuse._core.device import A100, H200
from cufuse._core.loader import KernelSpec

from ..conftest import requires_nvrtc

SELFTEST = KernelSpec("common/selftest.cu", "scaled_copy", ("float", 128, 4))


def test_expression_formats_template_arguments():
    assert KernelSpec("a.cu", "k", ("__half", 128, True, False)).expression == "k<__half, 128, true, false>"
    assert KernelSpec("a.cu", "plain").expression == "plain"


def test_arch_for_uses_sm_90a_only_on_hopper():
    assert loader.arch_for(90) == "sm_90a"
    assert loader.arch_for(80) == "sm_80"
    assert loader.arch_for(89) == "sm_89"
    assert loader.arch_for(100) == "sm_100"


def test_resource_usage_parses_ptxas_report():
    log = textwrap.dedent("""\
        ptxas info    : Function properties for _Z1kv
        ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
        ptxas info    : Used 72 registers, used 1 barriers
        """)
    assert loader.resource_usage(log) == {"registers": 72, "stack": 24, "spill_stores": 8, "spill_loads": 12}


@requires_nvrtc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_compile_without_gpu_reports_resources(arch):
    compiled = loader.compile_spec(SELFTEST, arch)
    assert compiled.lowered_name.startswith("_Z11scaled_copyIfLi128ELi4E")
    assert f"for '{arch}'" in compiled.log
    usage = loader.resource_usage(compiled.log)
    assert usage["registers"] > 0 and usage["spill_stores"] == 0


@pytest.fixture
def kernels_dir(tmp_path, monkeypatch):
    """An empty kernels/ folder for the loader (its source hashes forgotten before and after)."""
    monkeypatch.setattr(loader, "KERNELS_DIR", tmp_path)
    loader.source_hash.cache_clear()
    yield tmp_path
    loader.source_hash.cache_clear()


@requires_nvrtc
def test_compile_error_names_kernel_and_shows_log(kernels_dir):
    (kernels_dir / "broken.cu").write_text("__global__ void broken() { undeclared_thing(); }\n")
    with pytest.raises(loader.KernelCompileError, match=r"(?s)broken.cu broken for sm_90a.*undeclared_thing"):
        loader.compile_spec(KernelSpec("broken.cu", "broken"), "sm_90a")


@requires_nvrtc
def test_sm_90a_unlocks_wgmma(kernels_dir):
    (kernels_dir / "fence.cu").write_text('__global__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }\n')
    loader.compile_spec(KernelSpec("fence.cu", "fence"), "sm_90a")
    with pytest.raises(loader.KernelCompileError):
        loader.compile_spec(KernelSpec("fence.cu", "fence"), "sm_90")


@requires_nvrtc
def test_header_edit_recompiles_only_what_includes_it(kernels_dir, monkeypatch):
    """The cache key hashes an entry file and the headers it includes, by their paths under
    kernels/: editing one op's header recompiles that op's kernels and no others."""
    (kernels_dir / "op_a").mkdir()
    (kernels_dir / "op_b").mkdir()
    (kernels_dir / "op_a" / "k.cu").write_text('#include "op_a/h.cuh"\n__global__ void k(float* x) { x[0] = VALUE; }\n')
    (kernels_dir / "op_a" / "h.cuh").write_text("#pragma once\n#define VALUE 1.0f\n")
    (kernels_dir / "op_b" / "j.cu").write_text("__global__ void j(float* x) { x[0] = 3.0f; }\n")
    monkeypatch.setenv("CUFUSE_CACHE_DIR", str(kernels_dir / "cache"))
    a, b = KernelSpec("op_a/k.cu", "k"), KernelSpec("op_b/j.cu", "j")
    assert loader.included_sources("op_a/k.cu") == ("op_a/h.cuh", "op_a/k.cu")
    first_a = loader.ensure_compiled(a, "sm_80")
    assert first_a.compiled_now and loader.ensure_compiled(b, "sm_80").compiled_now
    assert not loader.ensure_compiled(a, "sm_80").compiled_now
    hash_a, hash_b = loader.source_hash("op_a/k.cu"), loader.source_hash("op_b/j.cu")
    (kernels_dir / "op_a" / "h.cuh").write_text("#pragma once\n#define VALUE 2.0f\n")
    loader.source_hash.cache_clear()
    assert loader.source_hash("op_a/k.cu") != hash_a and loader.source_hash("op_b/j.cu") == hash_b
    second_a = loader.ensure_compiled(a, "sm_80")
    assert second_a.compiled_now and second_a.path != first_a.path
    assert not loader.ensure_compiled(b, "sm_80").compiled_now
    assert loader.source_hash("op_a/k.cu") in loader._source_text(a)


def test_every_config_instantiation_names_an_existing_source():
    for dev in (H200, A100):
        specs = registry.all_instantiations(dev)
        assert SELFTEST in specs
        for spec in specs:
            assert (loader.KERNELS_DIR / spec.source).is_file(), spec


@requires_nvrtc
def test_precompile_in_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("CUFUSE_CACHE_DIR", str(tmp_path))
    specs = registry.selftest_instantiations()
    results = loader.precompile(specs, "sm_90a", jobs=2)
    assert [spec for spec, _, _ in results] == specs
    assert all(error is None and entry.compiled_now for _, entry, error in results)
    again = loader.precompile(specs, "sm_90a", jobs=1)
    assert not any(entry.compiled_now for _, entry, _ in again)


# ---- GPU -------------------------------------------------------------------------------

def _launch_selftest(cp, block, items, n=10_007):
    kernel = loader.get_kernel(KernelSpec("common/selftest.cu", "scaled_copy", ("float", block, items)))
    x = cp.asarray(np.random.default_rng().standard_normal(n).astype(np.float32))
    y = cp.full(n, np.nan, np.float32)
    grid = (n + block * items - 1) // (block * items)
    kernel((grid,), (block,), (x, y, np.int64(n), np.float32(2.5)))
    return kernel, x, y


@pytest.mark.parametrize("block,items", [(128, 4), (256, 2)])
def test_templated_kernel_launches_at_two_tile_sizes(cp, block, items):
    kernel, x, y = _launch_selftest(cp, block, items)
    np.testing.assert_array_equal(cp.asnumpy(y), cp.asnumpy(x) * np.float32(2.5))
    assert kernel is loader.get_kernel(KernelSpec("common/selftest.cu", "scaled_copy", ("float", block, items)))


def test_concurrent_requests_compile_once(cp, tmp_path, monkeypatch):
    monkeypatch.setenv("CUFUSE_CACHE_DIR", str(tmp_path))
    spec = KernelSpec("common/selftest.cu", "scaled_copy", ("double", 64, 3))
    results, barrier = [], threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(loader.get_kernel(spec))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert len(list(tmp_path.glob("scaled_copy-*.bin"))) == 1


def test_disk_cache_is_reused_by_a_second_process(cp, tmp_path):
    script = textwrap.dedent("""
        import cupy, numpy as np
        from cufuse._core.loader import KernelSpec, get_kernel
        k = get_kernel(KernelSpec("common/selftest.cu", "scaled_copy", ("__half", 32, 1)))
        x = cupy.arange(40, dtype=cupy.float16); y = cupy.zeros(40, dtype=cupy.float16)
        k((2,), (32,), (x, y, np.int64(40), np.float32(1.0)))
        assert bool((x == y).all())
    """)
    env = dict(os.environ, CUFUSE_CACHE_DIR=str(tmp_path), CUFUSE_DEBUG="1")
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "compiled common/selftest.cu scaled_copy<__half, 32, 1>" in first.stderr
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "compiled" not in second.stderr


def test_dynamic_shared_memory_limit_is_raised(cp):
    kernel = loader.get_kernel(KernelSpec("common/selftest.cu", "scaled_copy", ("float", 128, 4)), dynamic_smem=100 * 1024)
    assert kernel.max_dynamic_shared_size_bytes >= 100 * 1024
