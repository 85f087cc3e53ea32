"""Passes find ops by their records, not by their names: few files outside the tables dispatch on an op's name.

What a pass needs to know about an op (its family, its traits, its part in the online softmax) is a field of
its record in the op table (prism.ir.ops), so a new op with the same traits is treated alike without a change
anywhere else. Dispatching on a name instead (`op == "matmul"`, `op in ("div", "mul")`, `{"add": ...}`) is
what this test looks for in every module of prism/: a comparison or membership test against a string literal
that is an op's name, a dict literal keyed by one, or a `match` case on one. The op table, the ATen table (the
ATen-to-op mapping) and the axioms are written per op by nature; besides them at most two files may do it, each
named in ALLOWED with the reason, and a failure names each other file, line and op.
"""

from __future__ import annotations

import ast
from pathlib import Path

from prism.ir.ops import OPS

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "prism/ir/ops.py": "the op table",
    "prism/capture/lower.py": "the ATen table: which ATen op is which op of the table",
    "prism/verify/axioms.py": "the axioms, one equation per line over named ops",
    "prism/codegen/templates.py": "the Triton templates, one expression per op",
}
ALLOWED: dict[str, str] = {}
"""Files outside the tables that may dispatch on op names, and why: at most two (today none: the search's
closure states its rewrite rules over op sets derived from the table's traits)."""


def _literals(node: ast.AST) -> list[ast.Constant]:
    """The string constants `node` is, or holds as a tuple, list or set literal."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [x for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)]


def dispatches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, op name) for each dispatch on an op-name literal in Python `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            consts = [c for side in (node.left, *node.comparators) for c in _literals(side)]
        elif isinstance(node, ast.Dict):
            consts = [c for key in node.keys if key is not None for c in _literals(key)]
        elif isinstance(node, ast.MatchValue):
            consts = _literals(node.value)
        else:
            continue
        found += [(c.lineno, c.value) for c in consts if c.value in names]
    return sorted(found)


def offenders() -> dict[str, list[tuple[int, str]]]:
    """Each module of prism/ outside the tables that dispatches on op names, with where and which."""
    out = {}
    for path in sorted((ROOT / "prism").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        hits = dispatches(path.read_text(), set(OPS))
        if rel not in TABLES and hits:
            out[rel] = hits
    return out


def test_at_most_two_files_outside_the_tables_dispatch_on_op_names():
    found = offenders()
    unexpected = {f: hits for f, hits in found.items() if f not in ALLOWED}
    assert not unexpected, ("dispatch on op names outside the op table (read the op's record instead: its family, "
                            f"traits or online-softmax part), as (line, op): {unexpected}")
    assert len(ALLOWED) <= 2
    assert set(ALLOWED) <= set(found), f"ALLOWED names files that no longer need it: {set(ALLOWED) - set(found)}"


def test_the_scan_finds_each_form_of_dispatch():
    source = ('if op == "matmul": pass\n'
              'x = node.op in ("div", "relu", "other")\n'
              'T = {"add": 1, "kept": 2}\n'
              'match op:\n    case "exp": pass\n'
              'g("sum", x)\n')   # building an op by name is no dispatch
    assert dispatches(source, set(OPS)) == [(1, "matmul"), (2, "div"), (2, "relu"), (3, "add"), (5, "exp")]
