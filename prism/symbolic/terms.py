"""Abstract expressions: hashable terms over kernel inputs, what a tensor computes when every d_p = 1.

A term is a tuple `(op, attrs, *children)`; an input is `("in", (i,))`. `attrs` are the op's registry
attributes in order (a scalar may be an `InvExtent`). Commutative ops keep their children sorted, so
`mul(a, b)` and `mul(b, a)` are one term. Shapes of terms are tuples of atoms (`dims.UNIT` for a
structural size-1 dim) computed by the same rules the generator uses for block tensors.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable, Sequence

from prism.ir.ops import OPS, Shape
from prism.symbolic.dims import UNIT, AtomSpace

__all__ = ["Term", "attrs_of", "broadcast_dims", "evaluate", "flatten", "from_graph", "kids", "leaf", "mk",
           "op_of", "render", "subterms", "term_shape"]

Term = tuple


def leaf(index: int) -> Term:
    return ("in", (index,))


@lru_cache(maxsize=None)
def _key(t: Term) -> str:
    return repr(t)


def mk(op: str, attrs: tuple, *children: Term) -> Term:
    """The term op(children; attrs), with commutative children in canonical order."""
    if OPS[op].commutative:
        children = tuple(sorted(children, key=_key))
    return (op, attrs, *children)


def op_of(t: Term) -> str:
    return t[0]


def attrs_of(t: Term) -> tuple:
    return t[1]


def kids(t: Term) -> tuple[Term, ...]:
    return t[2:]


def subterms(t: Term, into: set[Term] | None = None) -> set[Term]:
    """Every subterm of `t`, itself included."""
    out = set() if into is None else into
    stack = [t]
    while stack:
        s = stack.pop()
        if s not in out:
            out.add(s)
            stack.extend(kids(s))
    return out


def broadcast_dims(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """Elementwise broadcast of two atom shapes, position by position (None if ranks differ)."""
    if len(a) != len(b):
        return None
    return tuple(y if x == UNIT else x for x, y in zip(a, b))


def term_shape(t: Term, space: AtomSpace) -> tuple[int, ...] | None:
    """The shape of a term in atoms (None if ill-shaped under the rank rules)."""
    return _shape(t, space)


@lru_cache(maxsize=None)
def _shape(t: Term, space: AtomSpace) -> tuple[int, ...] | None:
    op, attrs = t[0], t[1]
    if op == "in":
        return space.input_dims(attrs[0])
    shapes = [_shape(c, space) for c in kids(t)]
    if any(s is None for s in shapes):
        return None
    return _SHAPES[OPS[op].family.rule](shapes, attrs)


def _reduced(shapes: list, attrs: tuple) -> tuple[int, ...]:
    s = list(shapes[0])
    s[attrs[0]] = UNIT
    return tuple(s)


def _contracted(shapes: list, attrs: tuple) -> tuple[int, ...] | None:
    a, b = shapes
    return a[:-1] + b[-1:] if len(a) >= 2 and len(a) == len(b) else None


_SHAPES = {  # keyed by the op family's shape rule (prism.ir.ops.Family.rule); group ops have no terms
    Shape.SAME: lambda shapes, attrs: shapes[0],
    Shape.BROADCAST: lambda shapes, attrs: broadcast_dims(shapes[0], shapes[1]),
    Shape.REDUCE: _reduced,
    Shape.CONTRACT: _contracted,
}


def render(t: Term, names: Sequence[str] | None = None) -> str:
    """Readable text: `matmul(X, W)`, `sum(square(X), 1)`."""
    op, attrs = t[0], t[1]
    if op == "in":
        return names[attrs[0]] if names else f"in{attrs[0]}"
    args = [render(c, names) for c in kids(t)] + [repr(a) for a in attrs]
    return f"{op}({', '.join(args)})"


def from_graph(graph: Any) -> list[Term]:
    """The term of each output of a KernelGraph made of inputs and registry ops only."""
    from prism.errors import GraphError

    values: dict[tuple[int, int], Term] = {}
    for k, ref in enumerate(graph.input_refs):
        values[ref] = leaf(k)
    for i, node in graph.topo():
        if node.op == "input":
            continue
        if node.op not in OPS:
            raise GraphError(f"search: the program to optimize must use registry ops only, found {node.op!r}")
        args = [values[r] for r in node.inputs]
        attrs = tuple(node.attrs[a] for a in OPS[node.op].attrs)
        values[(i, 0)] = mk(node.op, attrs, *args)
    return [values[r] for r in graph.outputs]


def evaluate(t: Term, tensors: Sequence[Any]) -> Any:
    """The value of a term on concrete input tensors (InvExtent scalars take the inputs' extents)."""
    from prism.symbolic.dims import InvExtent

    shapes = [tuple(x.shape) for x in tensors]
    memo: dict[Term, Any] = {}

    def ev(u: Term) -> Any:
        if u not in memo:
            if u[0] == "in":
                memo[u] = tensors[u[1][0]]
            else:
                attrs = [a.value(shapes) if isinstance(a, InvExtent) else a for a in u[1]]
                memo[u] = OPS[u[0]].torch_fn(*(ev(c) for c in kids(u)), **dict(zip(OPS[u[0]].attrs, attrs)))
        return memo[u]
    return ev(t)


def flatten(terms: Iterable[Term]) -> set[Term]:
    out: set[Term] = set()
    for t in terms:
        subterms(t, out)
    return out
