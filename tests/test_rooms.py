"""The top-level rooms of ``c4forge/`` form a DAG, and the engines import no stage room.

A room is a top-level package or module of ``c4forge`` (``clean/``, ``engines/``, ``io/``,
``errors.py`` …). Every import is counted, the lazy ones inside functions too: a lazy import
still ties the two rooms together (it only defers the cost), and a cycle of rooms is what keeps
a newcomer from reading the code bottom-up or drawing it (docs/ARCHITECTURE.md, "The layers").
Base types and data definitions live in rooms below every room that uses them (``corpus/``:
documents, counters, drop samples, the stage kinds; ``glue/``: the GLUE task data).
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "c4forge")

# What an engine may import: the base room of counters and samples, storage and the
# foundations. Every other room defines or runs stages (clean, rules, dedup, langid, readers,
# contamination, shards, vocab, objectives, formats …) or drives commands; an engine runs any
# stage through its primitives, so it imports none of them (a new stage needs no engine change).
ENGINE_ROOMS_ALLOWED = frozenset(
    {"corpus", "io", "errors", "faults", "progress", "proctree", "cliconfig", "optional"}
)

Edges = dict[str, dict[str, list[str]]]


def room_names(package: str = PACKAGE) -> set[str]:
    """The top-level rooms: packages and modules (``__init__``/``__main__`` are no room)."""
    names = set()
    for entry in os.listdir(package):
        path = os.path.join(package, entry)
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            names.add(entry)
        elif entry.endswith(".py") and not entry.startswith("__"):
            names.add(entry[:-3])
    return names


def _module_of(path: str, package: str) -> list[str]:
    rel = os.path.relpath(path, os.path.dirname(package))[:-3].split(os.sep)
    return rel[:-1] if rel[-1] == "__init__" else rel


def imported_modules(tree: ast.AST, module: list[str], is_package: bool) -> list[tuple[str, int]]:
    """Every ``c4forge…`` name an import statement of ``tree`` reaches, with its line (lazy
    imports inside functions included; relative imports resolved against ``module``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module if is_package else module[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def room_edges(package: str = PACKAGE) -> Edges:
    """``{room: {imported room: ["file:line", …]}}`` over every module of ``package``."""
    rooms = room_names(package)
    edges: Edges = defaultdict(lambda: defaultdict(list))
    for directory, _, files in os.walk(package):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            module = _module_of(path, package)
            if len(module) < 2 or module[1] not in rooms:
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for target, line in imported_modules(tree, module, name == "__init__.py"):
                parts = target.split(".")
                if parts[0] == "c4forge" and len(parts) > 1 and parts[1] in rooms:
                    if parts[1] != module[1]:
                        where = f"{os.path.relpath(path, REPO)}:{line} imports {target}"
                        edges[module[1]][parts[1]].append(where)
    return edges


def find_cycle(edges: Edges) -> list[str] | None:
    """One cycle of rooms (``[a, b, …, a]``), or None when the graph is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(room: str) -> list[str] | None:
        state[room] = 1
        path.append(room)
        for nxt in sorted(edges.get(room, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[room] = 2
        return None

    for room in sorted(edges):
        if room not in state and (cycle := visit(room)):
            return cycle
    return None


def layers(edges: Edges, rooms: set[str]) -> list[list[str]]:
    """The rooms by layer, lowest first: a room's layer is one above the highest it imports."""
    level: dict[str, int] = {}

    def of(room: str) -> int:
        if room not in level:
            level[room] = 1 + max((of(r) for r in edges.get(room, {})), default=-1)
        return level[room]

    out: list[list[str]] = []
    for room in sorted(rooms):
        while len(out) <= of(room):
            out.append([])
        out[of(room)].append(room)
    return out


def _describe(cycle: list[str], edges: Edges) -> str:
    steps = [f"{a} -> {b} ({edges[a][b][0]})" for a, b in zip(cycle, cycle[1:])]
    return "the rooms import each other in a cycle: " + "; ".join(steps)


def test_rooms_form_a_dag() -> None:
    edges = room_edges()
    cycle = find_cycle(edges)
    assert cycle is None, _describe(cycle, edges)


def test_engines_import_no_stage_room() -> None:
    found = {r: w for r, w in room_edges()["engines"].items() if r not in ENGINE_ROOMS_ALLOWED}
    assert not found, f"engines/ imports rooms beyond the base ones: {found}"


def _write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


@pytest.fixture
def toy_package(tmp_path) -> str:
    """A three-room package: ``low`` (a module), ``mid`` and ``high`` (packages)."""
    root = str(tmp_path / "c4forge")
    _write(root, "__init__.py", "")
    _write(root, "low.py", "X = 1\n")
    _write(root, "mid/__init__.py", "from c4forge.low import X\n")
    _write(root, "high/__init__.py", "")
    _write(root, "high/top.py", "import c4forge.mid\n")
    return root


def test_checker_sees_a_lazy_import_cycle(toy_package) -> None:
    """The checker itself: a cycle closed only by an import inside a function is found, and
    the message names each edge's file and line."""
    assert find_cycle(room_edges(toy_package)) is None
    _write(toy_package, "low.py", "X = 1\n\n\ndef late():\n    from c4forge.high import top\n")
    edges = room_edges(toy_package)
    cycle = find_cycle(edges)
    assert cycle == ["high", "mid", "low", "high"]
    assert "low.py:5 imports c4forge.high.top" in _describe(cycle, edges)


def test_checker_resolves_relative_and_package_imports(toy_package) -> None:
    _write(toy_package, "mid/inner.py", "from ..high import top\nfrom c4forge import low\n")
    edges = room_edges(toy_package)
    assert sorted(edges["mid"]) == ["high", "low"]
    assert find_cycle(edges) == ["high", "mid", "high"]
    assert layers({"a": {"b": []}}, {"a", "b", "c"}) == [["b", "c"], ["a"]]


if __name__ == "__main__":  # print the layers (docs/ARCHITECTURE.md draws them) or the cycle
    graph = room_edges()
    loop = find_cycle(graph)
    if loop:
        print(_describe(loop, graph))
    else:
        for i, names in enumerate(layers(graph, room_names())):
            print(i, " ".join(names))
