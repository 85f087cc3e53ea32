"""Shared helpers for the search tests: closure targets and d=1 terms of µGraphs (configs: tests/configs.py)."""

from __future__ import annotations

from prism.ir import KernelGraph
from prism.ir.ops import OPS
from prism.symbolic.closure import closure
from prism.symbolic.dims import AtomSpace
from prism.symbolic.terms import Term, from_graph, leaf, mk


def target_for(graph: KernelGraph):
    space = AtomSpace(tuple(t.shape for t in graph.inputs))
    (root,) = from_graph(graph)
    return closure(root, space)


def d1_terms(graph: KernelGraph, constants: dict | None = None) -> tuple[list[Term], list[Term]]:
    """Every block tensor's term with all parallel sizes 1 (loaders are their inputs, accum and savers
    identities), and the terms of the outputs, for a kernel graph of custom and registry ops.
    `constants` maps a float attribute (a hand-written 1/N) to the symbolic constant it stands for."""
    constants = constants or {}

    def attrs_of(n):
        return tuple(constants.get(n.attrs[a], n.attrs[a]) if isinstance(n.attrs[a], float) else n.attrs[a]
                     for a in OPS[n.op].attrs)

    values: dict = {ref: leaf(k) for k, ref in enumerate(graph.input_refs)}
    block_terms: list[Term] = []
    for i, node in graph.topo():
        if node.op == "custom":
            b = node.attrs["block"]
            env: dict = {}
            outs = []
            for j, n in b.topo():
                if n.op == "loader":
                    env[(j, 0)] = values[node.inputs[n.attrs["index"]]]
                elif n.op in ("accum", "saver"):
                    env[(j, 0)] = env[n.inputs[0]]
                    if n.op == "saver":
                        outs.append(env[(j, 0)])
                else:
                    env[(j, 0)] = mk(n.op, attrs_of(n), *(env[r] for r in n.inputs))
                block_terms.append(env[(j, 0)])
            values.update(((i, k), t) for k, t in enumerate(outs))
        elif node.op in OPS:
            values[(i, 0)] = mk(node.op, attrs_of(node), *(values[r] for r in node.inputs))
    return block_terms, [values[r] for r in graph.outputs]
