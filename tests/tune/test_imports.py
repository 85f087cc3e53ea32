"""The modules of prism.tune import each other without a circle (target <- calibration, cost <- fit): every
import statement that runs counts, a function's lazy one included, since a lazy import hides a circle rather
than breaking it (those under `if TYPE_CHECKING:` never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import prism.tune

PACKAGE = Path(prism.tune.__file__).parent


def _imports(path: Path) -> set[str]:
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m.split(".")[2] for m in found if m.startswith("prism.tune.") and m.count(".") == 2}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of `graph` (module -> the modules it imports) as a path, or None."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n] if n in path else [m, n]
            if n not in state and (found := visit(n, path + [n])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


def test_prism_tune_has_no_import_circle():
    graph = {p.stem: _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert _circle(graph) is None, " -> ".join(_circle(graph))


def test_a_circle_is_found():
    assert _circle({"target": {"calibration"}, "calibration": {"cost"}, "cost": {"target"}}) == [
        "calibration", "cost", "target", "calibration"]
    assert _circle({"a": {"b"}, "b": set()}) is None
