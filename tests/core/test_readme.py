"""The README's examples run as written: the NumPy one everywhere, the GPU one on a GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks():
    text = README.read_text()
    section = text[text.index("## Examples"):text.index("## Semantics")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_numpy_example_runs():
    numpy_block = _python_blocks()[0]
    assert "import cupy" not in numpy_block
    exec(compile(numpy_block, "README.md (NumPy example)", "exec"), {})


def test_the_gpu_example_runs(cp):
    gpu_block = _python_blocks()[1]
    assert "import cupy as cp" in gpu_block
    scope: dict = {}
    exec(compile(gpu_block, "README.md (GPU example)", "exec"), scope)
    assert scope["o"].shape == (1, 32, 4096, 128) and scope["lse"].shape == (1, 32, 4096)


def test_the_install_commands_name_existing_extras():
    text = README.read_text()
    pyproject = (README.parent / "pyproject.toml").read_text()
    for extra in set(re.findall(r'\[([a-z0-9,]+)\]"?`', text)):
        for name in extra.split(","):
            assert re.search(rf"^{name} = \[", pyproject, re.M), name
    with pytest.raises(ValueError):
        text.index("bench/NOTES.md")


def test_no_command_installs_the_unrelated_pypi_project():
    """The PyPI name cufuse belongs to another project: every install is from a clone."""
    text = README.read_text()
    assert not re.search(r"pip install (-U )?\"?cufuse\b", text)
