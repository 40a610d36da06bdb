"""The harness's modules import each other without circles (issue 40: `check` <-> `memo` over the seed
offset, `sandbox` <-> `student` over the CUDA probe). Imports inside functions count: a deferred import
hides a circle, it does not remove it."""
from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "autograder" / "harness"
PACKAGE = "autograder.harness"


def imports(path: Path) -> set[str]:
    """The harness modules `path` imports, wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith(PACKAGE + ".")}
    modules = {p.stem for p in HARNESS.glob("*.py")}
    return (found & modules) - {path.stem}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle, as the path that closes it."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_harness_has_no_import_circles():
    graph = {p.stem: imports(p) for p in HARNESS.glob("*.py")}
    assert graph["memo"] and graph["student"], graph  # the finder sees imports
    assert circles(graph) == [], circles(graph)
