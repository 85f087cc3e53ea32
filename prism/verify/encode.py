"""Kernel graphs as verification terms: one term per output, over the graph's inputs, sizes left out.

A loader becomes `part`/`repl` per grid dim and the loop, an accumulator `red` over the loop, a saver
`comb`/`red` per grid dim (paper §4). Sizes never enter a term, so a proof holds for all parallel
sizes (paper Definition 1). What the terms cannot express, that a tile shape agrees with another only
for some sizes, is checked here on symbolic tile dims: each tile dim is its full extent D together with
the parallel dims that split it, or a structural unit (extent 1 for every size, as a `sum` leaves).
Broadcasting is made explicit with `bcast`, and only against structural units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prism.ir.block import BlockGraph
from prism.ir.graph import KernelGraph, Node, Ref
from prism.ir.ops import OPS
from prism.verify import expr as E

__all__ = ["Encoding", "NotEncodable", "encode", "loop_dim", "grid_pdim"]

UNIT = None
"""A structural unit dim: extent 1 whatever the parallel sizes."""


@dataclass(frozen=True)
class SDim:
    """A tile dim of full extent `extent`, split by the parallel dims in `split` (in split order)."""

    extent: int
    split: tuple[str, ...] = ()


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
    values: dict[Ref, tuple[E.Term, tuple[SDim | None, ...]]] = {}
    for k, ref in enumerate(graph.input_refs):
        values[ref] = (E.Var(f"in{k}"), tuple(_full(graph.type_of(ref).shape)))
    kernels = 0
    for i, node in graph.topo():
        args = [values[r] for r in node.inputs]
        if node.op == "custom":
            outs = _encode_block(node.attrs["block"], args, kernels)
            kernels += 1
            values.update(((i, j), o) for j, o in enumerate(outs))
        elif node.op != "input":
            values[(i, 0)] = _apply(node, args)
    outputs = tuple(values[r][0] for r in graph.outputs)
    return Encoding(outputs, frozenset().union(*(E.pdims_of(t) for t in outputs)))


def _full(shape: Sequence[int]) -> list[SDim | None]:
    return [UNIT if n == 1 else SDim(n) for n in shape]


def _axis(rank: int, d: int) -> int:
    """IR dims count from the front; term dims count from the last axis (0 = columns, 1 = rows)."""
    return rank - 1 - d


def _encode_block(block: BlockGraph, args: list, kernel: int) -> list:
    pdims = {g: grid_pdim(g, kernel) for g in block.grid_dims}
    has_loop = any(block.nodes[i].attrs["fmap"] is not None for i in block.loaders) or block.loop > 1
    loop = loop_dim(kernel)
    env: dict[Ref, tuple[E.Term, tuple]] = {}
    outs = []
    for i, node in block.topo():
        if node.op == "loader":
            env[(i, 0)] = _load(node, args[node.attrs["index"]], pdims, loop if has_loop else None)
        elif node.op == "accum":
            term, dims = env[node.inputs[0]]
            env[(i, 0)] = (E.red(term, loop) if has_loop else term, dims)
        elif node.op == "saver":
            outs.append(_save(node, env[node.inputs[0]], pdims))
        else:
            env[(i, 0)] = _apply(node, [env[r] for r in node.inputs])
    return outs


def _load(node: Node, arg: tuple, pdims: dict[str, str], loop: str | None) -> tuple:
    term, dims = arg
    dims = list(dims)
    rank = len(dims)
    splits = [(g, node.attrs["imap"].get(g)) for g in pdims]
    if loop is not None:
        splits.append((None, node.attrs["fmap"]))
    for g, d in splits:
        p = pdims[g] if g is not None else loop
        if d is None:
            term = E.repl(term, p)
            continue
        if dims[d] is UNIT:
            raise NotEncodable(f"loader {node.attrs['index']}: splits dim {d} of extent 1")
        term = E.part(term, _axis(rank, d), p)
        dims[d] = SDim(dims[d].extent, dims[d].split + (p,))
    return term, tuple(dims)


def _save(node: Node, arg: tuple, pdims: dict[str, str]) -> tuple:
    term, dims = arg
    dims = list(dims)
    rank = len(dims)
    for g, p in pdims.items():
        d = node.attrs["omap"].get(g)
        if d is None:
            term = E.red(term, p)
            continue
        if dims[d] is UNIT or p not in dims[d].split:
            raise NotEncodable(f"output {node.attrs['index']}: grid dim {g} concatenates along dim {d}, "
                               "which it does not split, so the output extent depends on the grid size")
        term = E.comb(term, _axis(rank, d), p)
        dims[d] = SDim(dims[d].extent, tuple(q for q in dims[d].split if q != p))
    for d, sd in enumerate(dims):
        if sd is not UNIT and sd.split:
            raise NotEncodable(f"output {node.attrs['index']}: dim {d} stays split by {', '.join(sd.split)}, "
                               "so its extent depends on parallel sizes")
    return term, tuple(dims)


def _apply(node: Node, args: list) -> tuple:
    """A registry op on (term, symbolic dims) operands, dispatched on the op's kind."""
    opdef = OPS[node.op]
    terms, dims = [a[0] for a in args], [a[1] for a in args]
    rank = len(dims[0])
    if opdef.kind == "matmul":
        (a, b) = dims
        _match(node.op, a[:-2] + a[-1:], b[:-2] + b[-2:-1])
        return E.make(opdef.term, *terms), a[:-1] + b[-1:]
    if opdef.kind == "binary":
        return _broadcast(node.op, opdef.term, terms, dims)
    (t,), (a,) = terms, dims
    if opdef.kind == "unary":
        return E.make(opdef.term, t), a
    if opdef.kind == "scalar":
        return E.make(opdef.term, t, attrs=(node.attrs["value"],)), a
    if opdef.kind == "reduce":
        d = node.attrs["dim"]
        return E.make(opdef.term, t, attrs=(_axis(rank, d),)), a[:d] + (UNIT,) + a[d + 1:]
    if opdef.kind == "norm":  # rms_norm(x) = x / bcast(sqrt(sum(x*x over the last dim) / N + eps))
        last = a[-1]
        if last is UNIT or last.split:
            raise NotEncodable("rms_norm over a split or unit last dim depends on parallel sizes")
        ms = E.scale(E.sum_(E.square(t), 0), 1.0 / last.extent)
        if node.attrs["eps"]:
            ms = E.shift(ms, node.attrs["eps"])
        return E.make(opdef.term, t, E.bcast(E.sqrt(ms), 0)), a
    raise NotEncodable(f"op {node.op} of kind {opdef.kind} has no verification term")


def _broadcast(name: str, term: str, terms: list, dims: list) -> tuple:
    """Binary op: equal dims pass, a structural unit against a dim is an explicit bcast."""
    (ta, tb), (a, b) = terms, dims
    rank, out = len(a), []
    for d, (x, y) in enumerate(zip(a, b)):
        if x == y:
            out.append(x)
        elif x is UNIT:
            ta = E.bcast(ta, _axis(rank, d))
            out.append(y)
        elif y is UNIT:
            tb = E.bcast(tb, _axis(rank, d))
            out.append(x)
        else:
            raise NotEncodable(f"{name}: dim {d} is {_show(x)} vs {_show(y)}; they agree only for some sizes")
    return E.make(term, ta, tb), tuple(out)


def _match(op: str, a: tuple, b: tuple) -> None:
    for x, y in zip(a, b):
        if x != y:
            raise NotEncodable(f"{op}: dims {_show(x)} and {_show(y)} agree only for some parallel sizes")


def _show(d: SDim | None) -> str:
    return "1" if d is UNIT else f"{d.extent}/{'*'.join(d.split) or '1'}"
