"""Readable text for kernel and block graphs (what `str(graph)` prints; pinned by snapshot tests).

Functions over any graph with `nodes`, `topo()` and `label()`; a block-graph node's right-hand side is its
kind's to write (prism.ir.kinds), so this module needs none of the graph classes.
"""

from __future__ import annotations

from typing import Any

from prism.ir.kinds import kind_of

__all__ = ["format_graph", "format_block"]


def _lhs(g: Any, i: int, node: Any) -> str:
    return ", ".join(f"{g.label((i, k))}: {t}" for k, t in enumerate(node.outputs))


def _args(g: Any, node: Any) -> str:
    return ", ".join(g.label(r) for r in node.inputs)


def format_block(b: Any, indent: str = "") -> str:
    """One line per node; loaders show their maps, savers their omap."""
    launch = f" {b.launch}" if not b.launch.default else ""
    lines = [f"{indent}block graph grid={b.grid} loop={b.loop}{launch}"]
    for i, node in b.topo():
        lines.append(f"{indent}  {_lhs(b, i, node)} = {kind_of(node).show(node, _args(b, node))}")
    return "\n".join(lines)


def format_graph(g: Any) -> str:
    """One line per node; a custom op is followed by its block graph, indented."""
    lines = ["kernel graph"]
    for i, node in g.topo():
        if node.op == "input":
            lines.append(f"  {_lhs(g, i, node)} = input")
        elif node.op == "custom":
            lines.append(f"  {_lhs(g, i, node)} = custom({_args(g, node)})")
            lines.append(format_block(node.attrs["block"], indent="    "))
        else:
            lines.append(f"  {_lhs(g, i, node)} = {kind_of(node).show(node, _args(g, node))}")
    lines.append("  outputs: " + ", ".join(g.label(r) for r in g.outputs))
    return "\n".join(lines)
