"""Same code before and after the restructure: the normalised PTX (``ptx_dump.py``) of every
instantiation the current code lists, against the PTX of the same kernel before the move.

    python experiments/restructure/ptx_compare.py OLD_DIR NEW_DIR OP

New expressions map to old ones through ``renames_<op>.legacy_expression`` (a dead template
flag removed). Names aside, one more thing may differ: NVRTC writes every namespace-scope
constant of a translation unit into the PTX of each kernel compiled from it, read or not (the
old linear_relu.cu put the gemv kernel's four constants into every other kernel's PTX). So two
files that differ are compared again without the ``.global`` declarations no instruction
refers to, their symbols renumbered. Prints each instantiation that still differs or has no
old twin; exit status 1 if any.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


_GLOBAL = re.compile(r"^\.global .* (SYM\d+)(\[\d*\])?( = .*)?;$")
_SYM = re.compile(r"\bSYM\d+\b")


def live(ptx: str) -> str:
    """``ptx`` without the ``.global`` declarations nothing else in it names, symbols renumbered."""
    lines = []
    for line in ptx.splitlines():
        match = _GLOBAL.match(line)
        if match and len(re.findall(rf"\b{match.group(1)}\b", ptx)) == 1:
            continue
        lines.append(line)
    names: dict = {}
    return _SYM.sub(lambda m: names.setdefault(m.group(0), f"SYM{len(names)}"), "\n".join(lines))


def _same_code(old_dir, before, new_dir, after) -> bool:
    with open(os.path.join(old_dir, before + ".ptx")) as a, open(os.path.join(new_dir, after + ".ptx")) as b:
        return live(a.read()) == live(b.read())


def main(old_dir, new_dir, op):
    try:
        legacy = importlib.import_module(f"renames_{op}").legacy_expression
    except ImportError:
        def legacy(expression):
            return expression
    old = json.load(open(os.path.join(old_dir, "index.json")))
    new = json.load(open(os.path.join(new_dir, "index.json")))
    same, live_same, problems = 0, 0, []
    for expression, digest in sorted(new.items()):
        before = old.get(legacy(expression))
        if before is None:
            problems.append(f"NEW   {expression} (no instantiation {legacy(expression)} before)")
        elif before == digest:
            same += 1
        elif _same_code(old_dir, before, new_dir, digest):
            live_same += 1
        else:
            problems.append(f"DIFF  {expression}: diff {old_dir}/{before}.ptx {new_dir}/{digest}.ptx")
    for line in problems:
        print(line)
    print(f"{op}: {same + live_same} of {len(new)} instantiations have the PTX they had before the move "
          f"({same} byte for byte, {live_same} but for constants no instruction reads)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
