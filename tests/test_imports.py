"""The modules of `prism` import each other without a circle, and the IR imports no pass.

Every import statement counts: a function's lazy one (it hides a circle rather than breaking it) and one under
`if TYPE_CHECKING:` (a circle a type checker walks is one a reader walks too). An import names a module where
it can: `from prism import pool` is prism.pool; `from prism.ir import Tensor` is the package prism.ir."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import prism

ROOT = Path(prism.__file__).parent
IR_MAY_IMPORT = ("prism.ir", "prism.errors")
"""What the IR may import of Prism: itself and its errors, no pass (verify, codegen, tune, interp, search...)."""


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in ROOT.rglob("*.py")}


def _module(name: str) -> str:
    """The module or package `name` is in."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(path: Path) -> set[str]:
    """The Prism modules and packages the file at `path` imports, by any import statement in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("prism"):
            found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else _module(node.module)
                         for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(_module(a.name) for a in node.names if a.name.split(".")[0] == "prism")
    return found - {_name(path) if ROOT in path.parents else None}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of `graph` (module -> the modules it imports) as a path, or None."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n, path + [n])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


def test_prism_has_no_import_circle():
    graph = {m: imports(p) for m, p in MODULES.items()}
    found = circle(graph)
    assert found is None, " -> ".join(found)


def test_the_ir_imports_no_pass():
    outside = {(m, n) for m, p in MODULES.items() if m.startswith("prism.ir") for n in imports(p)
               if not n.startswith(IR_MAY_IMPORT)}
    assert not outside, sorted(outside)


def test_the_ir_holds_no_triton_text():
    """Triton's expressions are code generation's (prism.codegen.templates): no string in prism/ir writes `tl.`."""
    found = [(m, node.lineno) for m, p in MODULES.items() if m.startswith("prism.ir")
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"\btl\.\w+\(", node.value)]
    assert not found, found


def test_every_module_name_is_one_module_and_no_package():
    """A reader who meets `layout.py` or `options.py` finds one module, not one per package; and no module is
    named as a package is (`prism/codegen/runtime.py` beside `prism.runtime`)."""
    modules = [p for p in ROOT.rglob("*.py") if p.name != "__init__.py"]
    packages = {p.parent.name for p in ROOT.rglob("__init__.py")}
    seen: dict[str, list[str]] = {}
    for p in modules:
        seen.setdefault(p.stem, []).append(str(p.relative_to(ROOT)))
    assert not {k: v for k, v in seen.items() if len(v) > 1}
    assert not [p for p in modules if p.stem in packages]


def test_a_circle_is_found():
    assert circle({"target": {"calibration"}, "calibration": {"cost"}, "cost": {"target"}}) == [
        "calibration", "cost", "target", "calibration"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_imports_are_read_as_modules(tmp_path):
    """A typing-only import and a lazy one count; a name from a package is the package, a submodule itself."""
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nfrom prism import pool\nfrom prism.ir import Tensor\n"
                 "if TYPE_CHECKING:\n    from prism.tune.target import Target\n"
                 "def f():\n    import prism.verify.expr\n")
    assert imports(f) == {"prism.pool", "prism.ir", "prism.tune.target", "prism.verify.expr"}
