"""Kernel graphs as verification terms: one term per output, over the graph's inputs, sizes left out.

A loader becomes `part`/`repl` per grid dim and the loop, an accumulator `red` over the loop, a saver
`comb`/`red` per grid dim (paper §4). Sizes never enter a term, so a proof holds for all parallel
sizes (paper Definition 1). What the terms cannot express, that a tile shape agrees with another only
for some sizes, shows in the terms' types (prism.verify.types): each extent is the full extent over the
sizes of the parallel dims that split it, and a term whose extents agree only for some sizes is ill
formed (NotEncodable here). Broadcasting is made explicit with `bcast`, against extents of 1 only.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism.errors import IllFormedTerm
from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph, Node, Ref
from prism.ir.ops import OPS
from prism.verify import expr as E
from prism.verify.types import ONE

__all__ = ["Encoding", "NotEncodable", "encode", "loop_dim", "grid_pdim"]


class NotEncodable(Exception):
    """The graph computes a well-defined function only for some parallel sizes (a shape coincidence)."""


@dataclass(frozen=True)
class Encoding:
    """The terms of a graph's outputs, and the parallel dims that occur in them."""

    outputs: tuple[E.Term, ...]
    pdims: frozenset[str]


def grid_pdim(dim: str, kernel: int) -> str:
    return f"{dim}{kernel}"


def loop_dim(kernel: int) -> str:
    return f"i{kernel}"


def encode(graph: KernelGraph) -> Encoding:
    """Encode every output of `graph`; raises NotEncodable on a size-dependent shape match."""
    graph.check()
    values: dict[Ref, E.Term] = {}
    for k, ref in enumerate(graph.input_refs):
        values[ref] = E.Var(f"in{k}", graph.type_of(ref).shape)
    kernels = 0
    try:
        for i, node in graph.topo():
            args = [values[r] for r in node.inputs]
            if node.op == "custom":
                outs = _encode_block(node.attrs["block"], args, kernels)
                kernels += 1
                values.update(((i, j), o) for j, o in enumerate(outs))
            elif node.op != "input":
                values[(i, 0)] = _apply(node, args)
    except IllFormedTerm as e:
        raise NotEncodable(str(e)) from None
    outputs = tuple(values[r] for r in graph.outputs)
    return Encoding(outputs, frozenset().union(*(E.pdims_of(t) for t in outputs)))


def _axis(rank: int, d: int) -> int:
    """IR dims count from the front; term dims count from the last axis (0 = columns, 1 = rows)."""
    return rank - 1 - d


def _encode_block(block: BlockGraph, args: list[E.Term], kernel: int) -> list[E.Term]:
    pdims = {g: grid_pdim(g, kernel) for g in block.grid_dims}
    has_loop = any(block.nodes[i].attrs["fmap"] is not None for i in block.loaders) or block.loop > 1
    loop = loop_dim(kernel)
    env: dict[Ref, E.Term] = {}
    outs = []
    for i, node in block.topo():
        if node.op == "loader":
            env[(i, 0)] = _load(node, args[node.attrs["index"]], pdims, loop if has_loop else None)
        elif node.op == "accum":
            term = env[node.inputs[0]]
            env[(i, 0)] = E.red(term, loop) if has_loop else term
        elif node.op == "saver":
            outs.append(_save(node, env[node.inputs[0]], pdims))
        else:
            env[(i, 0)] = _apply(node, [env[r] for r in node.inputs])
    return outs


def _load(node: Node, term: E.Term, pdims: dict[str, str], loop: str | None) -> E.Term:
    rank = term.type.rank
    splits = [(pdims[g], node.attrs["imap"].get(g)) for g in pdims]
    if loop is not None:
        splits.append((loop, node.attrs["fmap"]))
    for p, d in splits:
        term = E.repl(term, p) if d is None else E.part(term, _axis(rank, d), p)
    return term


def _save(node: Node, term: E.Term, pdims: dict[str, str]) -> E.Term:
    rank = term.type.rank
    for g, p in pdims.items():
        d = node.attrs["omap"].get(g)
        term = E.red(term, p) if d is None else E.comb(term, _axis(rank, d), p)
    if term.type.live or any(e.mono for e in term.type.extents):
        raise NotEncodable(f"output {node.attrs['index']} has type {term.type}: its extents depend on parallel "
                           "sizes (a grid dim concatenates along a dim it does not split, or a split dim is "
                           "never combined)")
    return term


def _apply(node: Node, args: list[E.Term]) -> E.Term:
    """A registry op on term operands, dispatched on the op's kind."""
    opdef = OPS[node.op]
    if opdef.kind == "matmul":
        return E.make(opdef.term, *args)
    if opdef.kind == "binary":
        return _broadcast(opdef.term, *args)
    (t,) = args
    if opdef.kind == "unary":
        return E.make(opdef.term, t)
    if opdef.kind == "scalar":
        return E.make(opdef.term, t, attrs=(node.attrs["value"],))
    if opdef.kind == "reduce":
        return E.make(opdef.term, t, attrs=(_axis(t.type.rank, node.attrs["dim"]),))
    if opdef.kind == "norm":  # rms_norm(x) = x / bcast(sqrt(sum(x*x over the last dim) / N + eps))
        last = t.type.extents[0]
        if last.mono or last == ONE:
            raise NotEncodable(f"rms_norm over a last dim of extent {last} depends on parallel sizes")
        ms = E.scale(E.sum_(E.square(t), 0), 1.0 / last.coef)
        if node.attrs["eps"]:
            ms = E.shift(ms, node.attrs["eps"])
        return E.make(opdef.term, t, E.bcast(E.sqrt(ms), 0))
    raise NotEncodable(f"op {node.op} of kind {opdef.kind} has no verification term")


def _broadcast(op: str, a: E.Term, b: E.Term) -> E.Term:
    """Binary op: where one operand has extent 1 and the other not, the first is an explicit bcast."""
    for d, (x, y) in enumerate(zip(a.type.extents, b.type.extents)):
        if x == ONE and y != ONE:
            a = E.bcast(a, d)
        elif y == ONE and x != ONE:
            b = E.bcast(b, d)
    return E.make(op, a, b)
