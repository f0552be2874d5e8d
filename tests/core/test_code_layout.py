"""The package's shape (CPU): no module of ``cufuse/`` over 400 lines, so that each one reads
in a sitting; split a growing module by what its parts do."""
from __future__ import annotations

import re
from pathlib import Path

import cufuse
from cufuse._core.loader import KERNELS_DIR

MAX_LINES = 400


def test_no_module_over_400_lines():
    root = Path(cufuse.__file__).resolve().parent
    long = {str(path.relative_to(root)): n for path in root.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


OPS = ("softmax", "logsumexp", "linear", "attention", "paged_attention")


def test_no_op_imports_or_includes_another_ops_files():
    # shared pieces live in cufuse/_core/ and kernels/common/
    root = Path(cufuse.__file__).resolve().parent
    kernels = KERNELS_DIR
    assert all((kernels / op).is_dir() for op in OPS), kernels
    crossings = []
    for op in OPS:
        others = [other for other in OPS if other != op]
        for path in (root / "ops" / op).glob("*.py"):
            text = path.read_text()
            crossings += [f"{path.name} imports {other}" for other in others
                          if re.search(rf"from \.\.{other}\b|cufuse\.ops\.{other}\b", text)]
        for path in (kernels / op).glob("*.cu*"):
            text = path.read_text()
            crossings += [f"{op}/{path.name} includes {other}" for other in others if f'#include "{other}/' in text]
    assert not crossings, crossings


def test_core_imports_no_op():
    # ops hand _core what it runs (the driver's hooks): _core serves every op without importing one
    core = Path(cufuse.__file__).resolve().parent / "_core"
    imports = [f"{path.name}: {line.strip()}" for path in core.glob("*.py") for line in path.read_text().splitlines()
               if re.match(r"\s*(from|import)\s+(\.\.ops|cufuse\.ops)\b", line)]
    assert not imports, imports
