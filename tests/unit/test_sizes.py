"""The house's sizes: every module of s3q at most 700 lines, every class 400, every function 80.

What is over today is listed in :data:`OVER` with its size now: the list may only shrink (a
listed piece that grows, or a new piece over a limit, fails), so each split lands for good.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "s3q"
LIMITS = {"module": 700, "class": 400, "function": 80}

#: what is over a limit now, by kind and ``path[:name]``, with its lines
OVER: dict[str, int] = {}


def sizes(src: Path = SRC) -> dict[str, int]:
    """Every module, class and function of s3q over its limit: ``kind path[:name]`` -> lines."""
    over: dict[str, int] = {}
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > LIMITS["module"]:
            over[f"module {where}"] = lines
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.ClassDef):
                kind = "class"
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "function"
            else:
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > LIMITS[kind]:
                over[f"{kind} {where}:{node.name}"] = size
    return over


def test_nothing_new_is_over_the_house_sizes() -> None:
    found = sizes()
    new = {name: n for name, n in found.items() if name not in OVER}
    assert not new, f"over the house's sizes {LIMITS}: {new}"


def test_nothing_over_the_sizes_grows() -> None:
    found = sizes()
    grown = {name: (OVER[name], n) for name, n in found.items() if name in OVER and n > OVER[name]}
    assert not grown, f"grown past what OVER allows (allowed, now): {grown}"


def test_the_list_of_what_is_over_is_kept_short() -> None:
    """A piece split below its limit leaves OVER, so the list says what is still to split."""
    found = sizes()
    settled = sorted(set(OVER) - set(found))
    assert not settled, f"no longer over a limit, drop from OVER: {settled}"


def test_sizes_are_counted_as_the_limits_mean(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    (tmp_path / "a.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    assert sizes(tmp_path) == {"function a.py:long": 82}
