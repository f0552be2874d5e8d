"""Every public function's docstring: numpydoc sections, examples that run as doctests on the
NumPy path, and docs/api.md generated from them (``scripts/api_reference.py``) as it is today.

``cufuse.dask``'s names come from its ``__all__`` read as text, so that the page's listing is
checked without Dask; its doctests and the page's equality with the script skip without Dask."""
from __future__ import annotations

import ast
import doctest
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import cufuse

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
SECTIONS = ("Parameters", "Returns", "Raises", "Notes", "Examples")  # numpydoc's order; every public function
# validates its arguments, so every one raises and says so
OPTIONFLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS

EAGER = [name for name in cufuse.__all__ if inspect.isfunction(getattr(cufuse, name))]


def _dask_names() -> list:
    tree = ast.parse((ROOT / "cufuse" / "dask" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("cufuse/dask/__init__.py has no __all__")


DASK = _dask_names()


@pytest.fixture
def dask_api():
    """cufuse.dask on the synchronous scheduler; the test skips where Dask is not installed."""
    dask = pytest.importorskip("dask")
    pytest.importorskip("dask.array")
    import cufuse.dask

    with dask.config.set(scheduler="synchronous"):
        yield cufuse.dask


def _run_doctests(fn, name: str) -> None:
    tests = doctest.DocTestFinder(exclude_empty=True).find(fn, name, globs={})
    assert tests, f"{name} has no examples"
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted > 0 and results.failed == 0, f"{name}: {results.failed} of {results.attempted} failed"


def _sections(fn) -> dict:
    """The numpydoc sections of fn's docstring, title -> body, in order."""
    parts = re.split(r"^(\w[\w ]*)\n-{3,}\n", inspect.cleandoc(fn.__doc__ or ""), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _check_numpydoc(fn, name: str) -> None:
    sections = _sections(fn)
    assert tuple(title for title in sections if title in SECTIONS) == SECTIONS, f"{name}: {list(sections)}"
    documented = set()
    for line in sections["Parameters"].splitlines():
        if line and not line.startswith(" "):
            documented.update(part.strip().lstrip("*") for part in line.partition(" : ")[0].split(","))
    assert documented == set(inspect.signature(fn).parameters), f"{name}: documented {sorted(documented)}"
    assert re.search(r"^\S", sections["Raises"], re.M), f"{name}: Raises names no exception"


@pytest.mark.parametrize("name", EAGER)
def test_public_docstring_has_numpydoc_sections(name):
    _check_numpydoc(getattr(cufuse, name), f"cufuse.{name}")


@pytest.mark.parametrize("name", EAGER)
def test_public_examples_run_on_the_numpy_path(name):
    _run_doctests(getattr(cufuse, name), f"cufuse.{name}")


@pytest.mark.parametrize("name", DASK)
def test_dask_docstring_has_numpydoc_sections(name, dask_api):
    _check_numpydoc(getattr(dask_api, name), f"cufuse.dask.{name}")


@pytest.mark.parametrize("name", DASK)
def test_dask_examples_run_on_numpy_chunks(name, dask_api):
    _run_doctests(getattr(dask_api, name), f"cufuse.dask.{name}")


def test_api_reference_lists_every_public_function():
    text = API_MD.read_text()
    headings = set(re.findall(r"^### (\S+)$", text, re.M))
    expected = {f"cufuse.{name}" for name in EAGER} | {f"cufuse.dask.{name}" for name in DASK}
    assert expected <= headings, sorted(expected - headings)
    assert "docs/api.md" in (ROOT / "README.md").read_text()


def test_api_reference_is_what_the_script_writes(dask_api):
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.render() == API_MD.read_text(), "docs/api.md is stale: run python scripts/api_reference.py"
