"""No import cycle among the modules of s3q, type-only ones included, nor among its rooms; and
every import runs down the layers of :data:`LAYERS`.

The graph is read from the source with ``ast``: every ``import`` and ``from … import`` of a
module, at its top, under ``if TYPE_CHECKING:`` and inside functions, relative and absolute.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
Importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first; those implicit edges are
left out (every module would otherwise depend on ``s3q/__init__``), only what a module names.

A *room* is a sub-package (``s3q.writer``, ``s3q.broker``: everything below it) or a module at
the package's root (``s3q.api``, ``s3q.errors``); ``s3q`` itself is the package's ``__init__``.

Run as a script (``python tests/unit/test_import_cycles.py [SRC_DIR]``) to print the cycles of
a tree, each marked ``runtime`` (top-level or in a function) or ``type-only`` (one of its edges
is only under TYPE_CHECKING), then the rooms layer by layer with what each imports.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

RUNTIME, TYPE_ONLY = "runtime", "type-only"

#: The rooms of s3q from the bottom up. A room imports only rooms of the layers below its own:
#: never one beside it, never one above (the index never reaches the writer, the writer never
#: the broker, no front end the writer). A new room must be given a layer here.
LAYERS: list[tuple[str, frozenset[str]]] = [
    ("shapes", frozenset({"s3q.errors", "s3q.message", "s3q.blocking"})),
    ("the store", frozenset({"s3q.store", "s3q.prices"})),
    ("on the store", frozenset({"s3q.log", "s3q.lease", "s3q.tracing", "s3q.faults"})),
    ("settings", frozenset({"s3q.config"})),
    ("the fold and the checks", frozenset({"s3q.index", "s3q.validate", "s3q.surface"})),
    ("read without a writer", frozenset({"s3q.snapshot", "s3q.wire"})),
    (
        "the writer and the readers",
        frozenset({"s3q.writer", "s3q.history", "s3q.partitions", "s3q.client"}),
    ),
    ("the embedded queue", frozenset({"s3q.api"})),
    ("front ends", frozenset({"s3q.broker", "s3q.worker", "s3q.spark", "s3q.celery"})),
    ("the package", frozenset({"s3q"})),
    ("the command line", frozenset({"s3q.cli"})),
]


def modules(src: Path, package: str = "s3q") -> dict[str, Path]:
    """The modules of ``package`` under ``src``, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement below ``tree``, and whether it is only under TYPE_CHECKING."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def graph(src: Path = SRC) -> dict[str, dict[str, str]]:
    """``{module: {imported module: RUNTIME or TYPE_ONLY}}`` over the modules of s3q."""
    known = modules(src)
    edges: dict[str, dict[str, str]] = {name: {} for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node, type_only in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                assert isinstance(node, ast.ImportFrom)
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    targets.append(submodule if submodule in known else origin)
            for target in targets:
                while target and target not in known:  # ``import s3q.x.y as z`` of a name
                    target = target.rpartition(".")[0]
                if not target or target == name:
                    continue
                kind = TYPE_ONLY if type_only else RUNTIME
                if edges[name].get(target) != RUNTIME:
                    edges[name][target] = kind
    return edges


def room(module: str) -> str:
    """The room a module is in: its sub-package, or itself at the package's root."""
    return ".".join(module.split(".")[:2])


def rooms(edges: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The import graph between rooms (an edge is ``runtime`` if any module edge under it is)."""
    between: dict[str, dict[str, str]] = {}
    for a, targets in edges.items():
        between.setdefault(room(a), {})
        for b, kind in targets.items():
            ra, rb = room(a), room(b)
            if ra != rb and between[ra].get(rb) != RUNTIME:
                between[ra][rb] = kind
    return between


def floors(edges: dict[str, dict[str, str]]) -> int:
    """How many floors the graph has: the modules on its longest chain of imports."""
    depth: dict[str, int] = {}

    def down(node: str) -> int:
        if node not in depth:
            depth[node] = 0  # (no cycles: asserted apart)
            depth[node] = 1 + max((down(t) for t in edges[node]), default=0)
        return depth[node]

    return max((down(node) for node in edges), default=0)


def layer_of() -> dict[str, int]:
    return {name: i for i, (_, members) in enumerate(LAYERS) for name in members}


Cycle = tuple[list[str], str, list[str]]


def cycles(edges: dict[str, dict[str, str]]) -> list[Cycle]:
    """For each strongly connected component of more than one module (Tarjan): the shortest
    cycle from its first module, whether it is ``runtime`` (a loop of imports that run) or
    ``type-only`` (it closes only through imports under TYPE_CHECKING), and its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)

    found = []
    for component in sorted(components):
        members = set(component)
        runtime = {
            a: {b for b, kind in edges[a].items() if kind == RUNTIME and b in members}
            for a in component
        }
        kind = RUNTIME if _loop(component[0], runtime) else TYPE_ONLY
        inside = {a: {b for b in edges[a] if b in members} for a in component}
        loop = _loop(component[0], runtime) or _loop(component[0], inside)
        assert loop is not None
        found.append((loop, kind, component))
    return found


def _loop(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    """The shortest path from ``start`` back to it along ``edges`` (breadth first), or None."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(edges[node]):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if target not in came:
                    came[target] = node
                    following.append(target)
        frontier = following
    return None


def describe(found: list[Cycle]) -> str:
    return "\n".join(
        f"{kind}: {' -> '.join(loop)}"
        + (f" (a component of {', '.join(members)})" if len(members) > len(loop) - 1 else "")
        for loop, kind, members in found
    )


def test_no_import_cycle() -> None:
    found = cycles(graph())
    assert not found, "import cycles among the modules of s3q:\n" + describe(found)


def test_no_import_cycle_between_rooms() -> None:
    found = cycles(rooms(graph()))
    assert not found, "import cycles between the rooms of s3q:\n" + describe(found)


def test_every_import_runs_down_the_layers() -> None:
    between = rooms(graph())
    layer = layer_of()
    unplaced = sorted(set(between) - set(layer))
    assert not unplaced, f"rooms with no layer in LAYERS: {unplaced}"
    gone = sorted(set(layer) - set(between))
    assert not gone, f"LAYERS names rooms that do not exist: {gone}"
    wrong = [
        f"{a} ({LAYERS[layer[a]][0]}) imports {b} ({LAYERS[layer[b]][0]}), {kind}"
        for a, targets in sorted(between.items())
        for b, kind in sorted(targets.items())
        if layer[b] >= layer[a]
    ]
    assert not wrong, "imports that do not run down the layers:\n" + "\n".join(wrong)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Relative and absolute, top-level, TYPE_CHECKING and function-level imports all count."""
    package = tmp_path / "s3q"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    import s3q.sub.c\n")
    (package / "sub" / "__init__.py").write_text("from .c import thing\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import x\n"
    )
    edges = graph(tmp_path)
    assert edges["s3q.a"] == {"s3q.b": RUNTIME}
    assert edges["s3q.b"] == {"s3q.sub.c": RUNTIME}
    assert edges["s3q.sub"] == {"s3q.sub.c": RUNTIME}
    assert edges["s3q.sub.c"] == {"s3q.a": TYPE_ONLY}
    loop = ["s3q.a", "s3q.b", "s3q.sub.c", "s3q.a"]
    assert cycles(edges) == [(loop, TYPE_ONLY, sorted(loop[:-1]))]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    edges = graph(root)
    print(describe(cycles(edges)) or "no import cycle")
    between = rooms(edges)
    print(
        f"{len(edges)} modules on {floors(edges)} floors; {len(between)} rooms on "
        f"{floors(between)} floors"
    )
    layer = layer_of()
    for i, (name, _) in reversed(list(enumerate(LAYERS))):
        print(f"{i} {name}")
        for r in sorted(n for n in between if layer.get(n) == i):
            print(f"    {r} -> {' '.join(sorted(between[r]))}")
