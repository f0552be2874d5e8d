"""Write docs/api.md, the API reference, from the public functions' numpydoc docstrings.

One section a public function: every function of ``cufuse.__all__``, then every function of
``cufuse.dask`` (which needs Dask: ``pip install -e ".[dask]"``). Each gives the signature
(``inspect.signature``) and the docstring as Markdown: the numpydoc sections as headings, their
entries as lists, the examples as code blocks. ``tests/core/test_docstrings.py`` checks that the
page equals what this script writes today.

    python scripts/api_reference.py           # rewrite docs/api.md
    python scripts/api_reference.py --check   # exit 1 where docs/api.md differs
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API_MD = ROOT / "docs" / "api.md"
LISTED_SECTIONS = ("Parameters", "Returns", "Raises")  # entries ``name : type`` over indented text
DOCTEST_DIRECTIVE = re.compile(r"\s*# doctest:.*$")


def public_functions(module) -> list:
    """The functions of ``module.__all__``, in its order (modules and constants left out)."""
    return [name for name in module.__all__ if inspect.isfunction(getattr(module, name))]


def render() -> str:
    """The text of docs/api.md."""
    sys.path.insert(0, str(ROOT))  # this checkout's cufuse, not an installed one
    cufuse = importlib.import_module("cufuse")
    cufuse_dask = importlib.import_module("cufuse.dask")
    others = [name for name in cufuse.__all__ if name not in public_functions(cufuse) and not name.startswith("_")]
    # the modules (``cufuse.reference``, ``cufuse.traffic``): not functions, no signature
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python scripts/api_reference.py`: edit the docstrings, then run it.",
        "Every function takes NumPy arrays and array-likes (the NumPy path, returning NumPy) or GPU arrays (the",
        "CUDA kernels, returning CuPy); the examples run as doctests on the NumPy path.",
        "Also public, described in their own docstrings: "
        + ", ".join(f"`cufuse.{name}`" for name in others) + ".",
        "",
        "## cufuse",
        "",
    ]
    lines += [line for name in public_functions(cufuse) for line in section("cufuse", name, getattr(cufuse, name))]
    lines += ["## cufuse.dask", "", *_paragraphs(inspect.cleandoc(cufuse_dask.__doc__)), ""]
    lines += [line for name in public_functions(cufuse_dask)
              for line in section("cufuse.dask", name, getattr(cufuse_dask, name))]
    return "\n".join(lines).rstrip("\n") + "\n"


def section(prefix: str, name: str, fn) -> list:
    """The Markdown lines of one function: heading, signature, docstring."""
    signature = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
    lines = [f"### {prefix}.{name}", "", "```python", f"{prefix}.{name}{signature}", "```", ""]
    return lines + docstring_markdown(inspect.cleandoc(fn.__doc__)) + [""]


def docstring_markdown(doc: str) -> list:
    """A cleaned numpydoc docstring as Markdown lines."""
    parts = re.split(r"^(\w[\w ]*)\n-{3,}\n", doc, flags=re.M)
    lines = _paragraphs(parts[0].strip())
    for title, body in zip(parts[1::2], parts[2::2]):
        lines += ["", f"#### {title}", ""]
        body = body.strip("\n")
        if title in LISTED_SECTIONS:
            lines += _entries(body)
        elif title == "Examples":
            lines += _examples(body)
        else:
            lines += _paragraphs(body)
    return lines


def _paragraphs(text: str) -> list:
    return text.strip("\n").splitlines()


def _entries(body: str) -> list:
    """``name : type`` lines over indented descriptions as a list: the names in code spans."""
    lines = []
    for line in body.splitlines():
        if not line.strip():
            continue
        if line.startswith(" "):
            lines.append("  " + line.strip())
            continue
        name, _, kind = line.partition(" : ")
        lines.append(f"- `{name.strip()}`" + (f" : {kind.strip()}" if kind else ""))
    return lines


def _examples(body: str) -> list:
    """Doctest paragraphs as ``pycon`` code blocks (directives dropped), prose as it is."""
    lines = []
    for paragraph in re.split(r"\n\s*\n", body):
        text = [DOCTEST_DIRECTIVE.sub("", line) for line in paragraph.splitlines()]
        if text and text[0].startswith(">>>"):
            lines += ["```pycon", *text, "```", ""]
        else:
            lines += [*text, ""]
    return lines[:-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where docs/api.md differs, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = API_MD.read_text() if API_MD.exists() else ""
        if current != text:
            print(f"{API_MD.relative_to(ROOT)} differs from the docstrings: run python scripts/api_reference.py")
            return 1
        return 0
    API_MD.write_text(text)
    print(f"wrote {API_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
