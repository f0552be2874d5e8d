"""The wheel ships kernels/ and the installed package reads its kernel sources from
site-packages, not from the source tree."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (path,) = out.glob("cufuse-*.whl")
    return path


def test_wheel_contains_kernel_sources(wheel):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(p.relative_to(REPO / "kernels").as_posix() for p in (REPO / "kernels").rglob("*")
                     if p.suffix in (".cu", ".cuh"))
    assert any(s.startswith("common/") for s in sources) and any("/" in s and not s.startswith("common/") for s in sources)
    for source in sources:
        assert f"cufuse/kernels/{source}" in names
    for package in ("cufuse/_core/loader.py", "cufuse/ops/__init__.py", "cufuse/ops/softmax/__init__.py",
                    "cufuse/ops/linear/__init__.py", "cufuse/ops/attention/__init__.py", "cufuse/bench/cli.py",
                    "cufuse/bench/cases/__init__.py", "cufuse/bench/cases/attention.py"):
        assert package in names


def test_installed_wheel_reads_its_own_kernels(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # numpy, ml_dtypes (and cupy) come from the running environment without a network: a
    # .pth line appends its site-packages after the new venv's own (which holds the wheel),
    # without running that environment's .pth files (so no editable-install finder).
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_cufuse_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    probe = (
        "import cufuse, cufuse._core.loader as L; "
        "print(L.KERNELS_DIR); print((L.KERNELS_DIR / 'common' / 'common.cuh').read_text()[:40]); print(cufuse.__file__)"
    )
    # run from an empty folder so the source tree is not importable
    result = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    kernels_dir, header, package_file = result.stdout.splitlines()[0], result.stdout.splitlines()[1], result.stdout.splitlines()[-1]
    assert str(env_dir) in kernels_dir and str(REPO) not in kernels_dir
    assert str(env_dir) in package_file
    assert "cufuse" in header or "Device helpers" in header


def test_the_dask_extra_installs_no_cuda_package():
    """``cufuse[dask]`` on a machine without a GPU: Dask and distributed only (dask-cuda pulls
    CUDA packages and pins Dask back), dask-cuda an extra of its own."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = [req.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip() for req in extras["dask"]]
    assert names == ["dask", "distributed"], extras["dask"]
    assert any(req.startswith("dask-cuda") for req in extras["dask-cuda"])
