"""Readable text for kernel and block graphs (what `str(graph)` prints; pinned by snapshot tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prism.ir.block import BlockGraph
    from prism.ir.graph import GraphBuilder, KernelGraph, Node

__all__ = ["format_graph", "format_block"]


def _attrs(node: Node) -> str:
    return "".join(f", {k}={v}" for k, v in node.attrs.items())


def _lhs(g: GraphBuilder, i: int, node: Node) -> str:
    return ", ".join(f"{g.label((i, k))}: {t}" for k, t in enumerate(node.outputs))


def _args(g: GraphBuilder, node: Node) -> str:
    return ", ".join(g.label(r) for r in node.inputs)


def format_block(b: BlockGraph, indent: str = "") -> str:
    """One line per node; loaders show their maps, savers their omap."""
    lines = [f"{indent}block graph grid={b.grid} loop={b.loop}"]
    for i, node in b.topo():
        if node.op == "loader":
            a = node.attrs
            rhs = f"load in{a['index']} imap={a['imap']} fmap={a['fmap']}"
        elif node.op == "saver":
            rhs = f"save {_args(b, node)} omap={node.attrs['omap']}"
        else:
            rhs = f"{node.op}({_args(b, node)}{_attrs(node)})"
        lines.append(f"{indent}  {_lhs(b, i, node)} = {rhs}")
    return "\n".join(lines)


def format_graph(g: KernelGraph) -> str:
    """One line per node; a custom op is followed by its block graph, indented."""
    lines = ["kernel graph"]
    for i, node in g.topo():
        if node.op == "input":
            lines.append(f"  {_lhs(g, i, node)} = input")
        elif node.op == "custom":
            lines.append(f"  {_lhs(g, i, node)} = custom({_args(g, node)})")
            lines.append(format_block(node.attrs["block"], indent="    "))
        else:
            lines.append(f"  {_lhs(g, i, node)} = {node.op}({_args(g, node)}{_attrs(node)})")
    lines.append("  outputs: " + ", ".join(g.label(r) for r in g.outputs))
    return "\n".join(lines)
