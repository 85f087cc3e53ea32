"""A size-free signature of a concrete µGraph, equal for graphs that differ only in op order and sizes.

Each kernel output becomes a term over the kernel inputs in which every block tensor is described by
what it is made of (loaders with their imap/fmap, ops, accumulators, savers with their omap), so op
order, tensor numbering, grid/loop sizes and tile shapes drop out; grid dim names are canonicalised
by taking the smallest rendering over their permutations. Scalar attributes are rounded, so 1/d
computed two ways compares equal. `elementwise_kernels=True` also reads a custom op that only loads
tiles, accumulates them once and combines them elementwise (a loop of range 1, as in a hand-written
second kernel) as the kernel-level ops it stands for.
"""

from __future__ import annotations

import itertools
from typing import Any

from prism.ir import BlockGraph, KernelGraph
from prism.ir.kinds import LOADER, SAVER, Accumulator, kind_of
from prism.ir.ops import OPS

__all__ = ["signature"]


def _attrs(attrs: Any) -> tuple:
    return tuple((k, round(v, 9) if isinstance(v, float) else v) for k, v in sorted(dict(attrs).items()))


def _node(op: str, attrs: tuple, kids: list[str]) -> str:
    if op in OPS and OPS[op].commutative:
        kids = sorted(kids)
    return f"{op}{list(attrs) if attrs else ''}({', '.join(kids)})"


def _block_terms(b: BlockGraph, args: list[str], rename: dict[str, str]) -> list[str]:
    terms: dict[tuple[int, int], str] = {}
    outs = []
    for i, n in b.topo():
        kind = kind_of(n)
        if kind is LOADER:
            imap = sorted((rename[g], d) for g, d in n.attrs["imap"].items())
            terms[(i, 0)] = f"load({args[n.attrs['index']]}, imap={imap}, fmap={n.attrs['fmap']})"
        elif kind is SAVER:
            omap = sorted((rename[g], d) for g, d in n.attrs["omap"].items())
            once = sorted(rename[g] for g in n.attrs.get("once", ()))
            outs.append(f"save({terms[n.inputs[0]]}, omap={omap}" + (f", once={once})" if once else ")"))
        else:  # an accumulator or a table op: the op applied to its operands
            terms[(i, 0)] = _node(n.op, _attrs(n.attrs), [terms[r] for r in n.inputs])
    return outs


def _as_elementwise(b: BlockGraph, args: list[str]) -> list[str] | None:
    """The kernel-level terms of a 'loop of one, load, accumulate once, combine elementwise' kernel."""
    if b.loop != 1:
        return None
    terms: dict[tuple[int, int], str] = {}
    maps: set = set()
    outs = []
    for i, n in b.topo():
        kind = kind_of(n)
        if kind is LOADER:
            if n.attrs["fmap"] is not None:
                return None
            maps.add(tuple(sorted(n.attrs["imap"].items())))
            terms[(i, 0)] = args[n.attrs["index"]]
        elif isinstance(kind, Accumulator):  # over a loop of one: the tile it is given
            if kind_of(b.nodes[n.inputs[0][0]]) is not LOADER:
                return None
            terms[(i, 0)] = terms[n.inputs[0]]
        elif kind is SAVER:
            if n.attrs.get("once"):   # not the same map as its loaders': only its first block writes
                return None
            maps.add(tuple(sorted(n.attrs["omap"].items())))
            outs.append(terms[n.inputs[0]])
        elif OPS[n.op].family.elementwise:
            terms[(i, 0)] = _node(n.op, _attrs(n.attrs), [terms[r] for r in n.inputs])
        else:
            return None
    return outs if len(maps) == 1 else None


def signature(graph: KernelGraph, elementwise_kernels: bool = False) -> str:
    """The canonical text of `graph`'s outputs (see the module docstring)."""
    best = None
    customs = [n.attrs["block"] for _, n in graph.topo() if n.op == "custom"]
    perms = [list(itertools.permutations(b.grid_dims)) for b in customs]
    for choice in itertools.product(*perms):
        renames = [dict(zip(b.grid_dims, p)) for b, p in zip(customs, choice)]
        terms: dict[tuple[int, int], str] = {}
        k = 0
        for i, n in graph.topo():
            if n.op == "input":
                terms[(i, 0)] = n.attrs["name"]
            elif n.op == "custom":
                args = [terms[r] for r in n.inputs]
                outs = _as_elementwise(n.attrs["block"], args) if elementwise_kernels else None
                if outs is None:
                    outs = _block_terms(n.attrs["block"], args, renames[k])
                terms.update(((i, j), t) for j, t in enumerate(outs))
                k += 1
            elif n.op in OPS:
                terms[(i, 0)] = _node(n.op, _attrs(n.attrs), [terms[r] for r in n.inputs])
        text = " ; ".join(terms[r] for r in graph.outputs)
        best = text if best is None or text < best else best
    return best or ""
