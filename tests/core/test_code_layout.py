"""The package's shape (CPU): no module of ``cufuse/`` over 400 lines, so that each one reads
in a sitting; split a growing module by what its parts do."""
from __future__ import annotations

from pathlib import Path

import cufuse

MAX_LINES = 400


def test_no_module_over_400_lines():
    root = Path(cufuse.__file__).resolve().parent
    long = {str(path.relative_to(root)): n for path in root.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long
