"""attention: template parameters removed in the restructure because only one value was
reachable (issue 17). Maps a new instantiation's text to the one it had before the move.

- ``attention_fwd_mma``: PIPELINE_QK (last parameter) was always false.
- ``attention_fwd_wgmma``: OVERLAP (always true; it stood before WG_RANGES), ORDERED and
  PERSISTENT (both always false; the last two) went.
"""
from __future__ import annotations

import re

_INSTANTIATION = re.compile(r"^(\w+)<(.*)>$")


def legacy_expression(expression: str) -> str:
    match = _INSTANTIATION.match(expression)
    if match is None:
        return expression
    name, args = match.group(1), [a.strip() for a in match.group(2).split(",")]
    if name == "attention_fwd_mma" and len(args) == 9:
        args = args + ["false"]
    elif name == "attention_fwd_wgmma" and len(args) == 7:
        args = args[:6] + ["true", args[6], "false", "false"]
    else:
        return expression
    return f"{name}<{', '.join(args)}>"
