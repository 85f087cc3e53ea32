"""Mutants and random maps of a µGraph, and mutants of terms: the adversarial inputs that keep the
verifier honest.

`mutants(graph)` yields small, named edits of a correct fused graph (a wrong imap, fmap or omap,
swapped operands, another unary op, a changed constant or sum dim); `random_maps(graph, rng)` keeps a
graph's structure and draws fresh imaps/fmaps/omaps. Both rebuild through the IR builders, so every
graph they yield is well-formed; whether it is *correct* is what the checker and the numeric test decide.
`mutate(term, rng)` edits a verification term directly (a dim, a parallel dim, an op of the same family,
operand order, a dropped parallel op, a constant), which reaches terms no graph edit does; it returns
only well-formed terms, since an ill-formed one is refused before any proof.
"""

from __future__ import annotations

import random
from typing import Callable, Iterator

from prism.errors import GraphError, IllFormedTerm
from prism.ir.block import BlockGraph
from prism.ir.builder import Node
from prism.ir.graph import KernelGraph
from prism.ir.kinds import LOADER, SAVER, kind_of
from prism.ir.ops import OPS, REDUCE
from prism.verify import expr as E

__all__ = ["Edit", "rebuild", "mutants", "random_maps", "mutate"]

Edit = Callable[[int, int, Node], Node]
"""(kernel index, node index, node) -> the node to build instead (return it unchanged to keep it)."""


def rebuild(graph: KernelGraph, edit: Edit, grid_loop: Callable[[int, BlockGraph], tuple] | None = None) -> KernelGraph:
    """Replay `graph`, letting `edit` replace block-graph nodes; raises GraphError if the result is invalid."""
    def block_fn(k: int, block: BlockGraph) -> BlockGraph:
        grid, loop = grid_loop(k, block) if grid_loop else (block.grid, block.loop)
        return block.rebuilt(grid, loop, edit=lambda i, node: edit(k, i, node))

    return graph.map_blocks(block_fn)


def _with(node: Node, **changes) -> Node:
    from dataclasses import replace

    if "attrs" in changes:
        changes["attrs"] = {**node.attrs, **changes["attrs"]}
    return replace(node, **changes)


def _edits(block: BlockGraph) -> Iterator[tuple[str, int, Node]]:
    """Every single-node edit of one block graph, named."""
    def rank(n: Node) -> int:
        return len(block.input_types[n.attrs["index"]].shape if kind_of(n) is LOADER else n.outputs[0].shape)

    unary = sorted(n for n, d in OPS.items() if d.family.elementwise and d.arity == 1 and not d.attrs)
    for i, node in block.topo():
        kind = kind_of(node)
        if kind in (LOADER, SAVER):
            key = "imap" if kind is LOADER else "omap"
            m = node.attrs[key]
            for g in block.grid_dims:
                for d in [None, *range(rank(node))]:
                    if m.get(g) != d:
                        new = {k: v for k, v in m.items() if k != g} | ({} if d is None else {g: d})
                        yield f"{key}[{g}] {m.get(g)}->{d} at node {i}", i, _with(node, attrs={key: new})
        if kind is LOADER:
            for d in [None, *range(rank(node))]:
                if node.attrs["fmap"] != d:
                    yield f"fmap {node.attrs['fmap']}->{d} at node {i}", i, _with(node, attrs={"fmap": d})
        elif _ordered(node.op) and node.inputs[0] != node.inputs[1]:
            yield f"swap {node.op} operands at node {i}", i, _with(node, inputs=node.inputs[::-1])
        elif node.op in unary:
            other = next(n for n in unary if n != node.op)
            yield f"{node.op}->{other} at node {i}", i, _with(node, op=other)
        elif node.op in OPS and OPS[node.op].family is REDUCE:
            for d in range(len(node.outputs[0].shape)):
                if d != node.attrs["dim"]:
                    yield f"sum dim {node.attrs['dim']}->{d} at node {i}", i, _with(node, attrs={"dim": d})
        elif "value" in node.attrs:
            yield f"{node.op} value x2 at node {i}", i, _with(node, attrs={"value": 2 * node.attrs["value"]})


def _ordered(op: str) -> bool:
    """Is `op` an element-wise or contracting table op whose two operands play different parts (div, sub,
    matmul)?"""
    d = OPS.get(op)
    return d is not None and d.arity == 2 and not d.commutative and (d.family.elementwise or d.family.contraction)


def mutants(graph: KernelGraph) -> Iterator[tuple[str, KernelGraph]]:
    """Each well-formed single-node edit of each custom op of `graph`, with a name saying what changed."""
    for k, block in enumerate(graph.blocks):
        for name, i, new in _edits(block):
            edit = lambda kk, j, n, k=k, i=i, new=new: new if (kk, j) == (k, i) else n
            try:
                yield f"kernel {k}: {name}", rebuild(graph, edit)
            except GraphError:
                continue


def random_maps(graph: KernelGraph, rng: random.Random, keep: float = 0.0, tries: int = 100,
                keep_sizes: bool = False) -> KernelGraph:
    """`graph` with its imaps, fmaps and omaps redrawn at random; each grid dim's entry (and each fmap)
    keeps its current value with probability `keep`, so keep > 0 samples near a known-good graph.
    Grid sizes and the loop become 1, which always divide: the checker ignores sizes and the numeric
    test picks its own. With `keep_sizes` they stay (a kernel whose outputs' shapes depend on its sizes, as
    split-KV partials do, feeds a second kernel that expects those shapes). A draw the builder refuses (a
    loop-invariant tile the loop would now walk, used after it: LoRA's B; a tile that does not divide its
    extent) is drawn again, up to `tries` times."""
    for _ in range(tries - 1):
        try:
            return _random_maps(graph, rng, keep, keep_sizes)
        except GraphError:
            continue
    return _random_maps(graph, rng, keep, keep_sizes)


def _random_maps(graph: KernelGraph, rng: random.Random, keep: float, keep_sizes: bool) -> KernelGraph:
    def draw(kernel: int, i: int, node: Node) -> Node:
        kind = kind_of(node)
        if kind not in (LOADER, SAVER):
            return node
        block = blocks[kernel]
        key = "imap" if kind is LOADER else "omap"
        rank = len(block.input_types[node.attrs["index"]].shape) if kind is LOADER else len(node.outputs[0].shape)
        m = {}
        for g in block.grid_dims:
            d = node.attrs[key].get(g) if rng.random() < keep else rng.choice([None, *range(rank)])
            if d is not None and d not in m.values():
                m[g] = d
        if kind is SAVER:
            return _with(node, attrs={"omap": m})
        fmap = node.attrs["fmap"] if rng.random() < keep else rng.choice([None, *range(rank)])
        return _with(node, attrs={"imap": m, "fmap": fmap})

    blocks = graph.blocks
    return rebuild(graph, draw, grid_loop=None if keep_sizes else lambda k, b: ((1,) * len(b.grid), 1))


_CONSTS = (0.5, 2.0, 1 / 64)


def mutate(term: E.Term, rng: random.Random, tries: int = 50) -> E.Term | None:
    """One random local edit of a typed `term` that is still well formed, or None if `tries` draws
    all made ill-formed terms. Deterministic for a given `rng` state."""
    pdims = sorted(E.pdims_of(term))
    nodes = [n for n in E.subterms(term) if n.op != "var"]
    for _ in range(tries):
        n = rng.choice(nodes)
        try:
            new = _edit(n, rng, pdims)
            if new != n:  # an edit that changes nothing (the same dim drawn again) is no mutant
                return _replace(term, n, new)
        except IllFormedTerm:
            continue
    return None


def _edit(n: E.Term, rng: random.Random, pdims: list[str]) -> E.Term:
    kinds = E.TERMS[n.op].attrs
    choices = ["swap"] if len(n.args) == 2 else []
    choices += [k for k in ("dim", "pdim", "const") if k in kinds and (k != "pdim" or pdims)]
    families = (E.UNARY, E.BINARY)
    choices += ["family"] * any(n.op in f for f in families) + ["drop"] * (n.op in E.PARALLEL)
    if not choices:
        raise IllFormedTerm(f"no edit of {n.op}")
    how = rng.choice(choices)
    if how == "swap":
        return E.Term(n.op, n.args[::-1], n.attrs)
    if how == "family":
        return E.Term(rng.choice(next(f for f in families if n.op in f)), n.args, n.attrs)
    if how == "drop":
        return n.args[0]
    i = kinds.index(how)
    value = {"dim": lambda: rng.randrange(3), "pdim": lambda: rng.choice(pdims),
             "const": lambda: rng.choice(_CONSTS)}[how]()
    return E.Term(n.op, n.args, n.attrs[:i] + (value,) + n.attrs[i + 1:])


def _replace(t: E.Term, old: E.Term, new: E.Term) -> E.Term:
    """t with every occurrence of `old` replaced by `new` (rebuilt, so re-typed)."""
    if t == old:
        return new
    if not t.args:
        return t
    return E.Term(t.op, tuple(_replace(a, old, new) for a in t.args), t.attrs)
