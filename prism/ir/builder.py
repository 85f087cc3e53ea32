"""Graph building blocks: tensors, nodes and the builder that kernel graphs and block graphs share.

A graph is built by appending nodes, one per op call, so it is acyclic by construction; nodes are
immutable, and a tensor handle belongs to exactly one graph. The op methods (`g.matmul`, `g.exp`, ...)
are generated from the op table, so the builders never list ops by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from prism.errors import DTypeError, GraphError, ShapeError
from prism.ir.ops import OPS, OpDef, TType, op, watch

__all__ = ["Ref", "Node", "Tensor", "GraphBuilder", "check_shape"]

Ref = tuple[int, int]
"""A tensor inside a graph: (node index, output index)."""


@dataclass(frozen=True)
class Node:
    """One op application. `op` is a registry op, or a structural op ("input", "custom", and in block
    graphs the node kinds of prism.ir.kinds); `attrs` never change after construction."""

    op: str
    inputs: tuple[Ref, ...]
    attrs: Mapping[str, Any]
    outputs: tuple[TType, ...]


@dataclass(frozen=True, eq=False)
class Tensor:
    """A handle on one output of one node of one graph."""

    graph: GraphBuilder
    node: int
    index: int

    @property
    def ref(self) -> Ref:
        return (self.node, self.index)

    @property
    def type(self) -> TType:
        return self.graph.nodes[self.node].outputs[self.index]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def name(self) -> str:
        return self.graph.label(self.ref)

    def __repr__(self) -> str:
        return f"{self.name}: {self.type}"


class GraphBuilder:
    """What kernel and block graphs share: node storage, ownership checks and the op methods."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._handles: dict[Ref, Tensor] = {}

    # -- node storage ------------------------------------------------------------------------

    def tensor(self, ref: Ref) -> Tensor:
        """The handle for `ref` (one handle per tensor, so handles compare by identity)."""
        handle = self._handles.get(ref)
        if handle is None:
            handle = self._handles[ref] = Tensor(self, *ref)
        return handle

    def type_of(self, ref: Ref) -> TType:
        return self.nodes[ref[0]].outputs[ref[1]]

    def label(self, ref: Ref) -> str:
        """A short human name for a tensor, used in printouts and error messages."""
        node = self.nodes[ref[0]]
        if node.op == "input":
            return node.attrs["name"]
        return f"t{ref[0]}" if len(node.outputs) == 1 else f"t{ref[0]}.{ref[1]}"

    def _append(self, node: Node) -> tuple[Tensor, ...]:
        self._before_append(node)
        self.nodes.append(node)
        index = len(self.nodes) - 1
        if len(node.outputs) == 1:     # nearly every node: no generator (instantiation appends millions)
            return (self.tensor((index, 0)),)
        return tuple(self.tensor((index, i)) for i in range(len(node.outputs)))

    def _before_append(self, node: Node) -> None:
        """Hook for builders that can be frozen."""

    def _own(self, t: Any, where: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphError(f"{where}: expected a Tensor of this graph, got {type(t).__name__}")
        if t.graph is not self:
            raise GraphError(f"{where}: tensor {t.name} belongs to another graph")
        return t

    # -- ops -----------------------------------------------------------------------------------

    def apply(self, name: str, tensors: Sequence[Tensor], attrs: Mapping[str, Any] | None = None) -> Tensor:
        """Append registry op `name` applied to `tensors`; every op method goes through here."""
        opdef = op(name)
        tensors = [self._own(t, name) for t in tensors]
        types = tuple(t.type for t in tensors)
        if len(types) != opdef.arity:
            raise GraphError(f"{name}: expected {opdef.arity} tensor operand(s), got {len(types)}")
        try:
            norm = opdef.normalize_attrs(types, attrs or {})
            out = opdef.infer(types, norm)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{e} (operands {', '.join(repr(t) for t in tensors)})") from None
        self._check_operands(name, tensors, norm)
        return self._append(Node(name, tuple(t.ref for t in tensors), norm, (out,)))[0]

    def __call__(self, name: str, *tensors: Tensor, **attrs: Any) -> Tensor:
        """`apply` as a decomposition writes ops (prism.ir.ops.Builder): appended to this graph."""
        return self.apply(name, tensors, attrs)

    def rank(self, t: Tensor) -> int:
        """The number of dims of `t` (prism.ir.ops.Builder)."""
        return len(t.shape)

    def inv_extent(self, t: Tensor, dim: int) -> float:
        """1/N for the extent N of dim `dim` of `t`, a constant of the graph (prism.ir.ops.Builder)."""
        return 1.0 / t.shape[dim]

    def _check_operands(self, name: str, tensors: Sequence[Tensor], attrs: Mapping[str, Any]) -> None:
        """Hook: block graphs check that operands sit on the same side of the loop, and how a result depends
        on a running max."""

    # -- reading -------------------------------------------------------------------------------

    def topo(self) -> Iterable[tuple[int, Node]]:
        """Nodes in a topological order (the order they were added)."""
        return enumerate(self.nodes)

    def consumers(self) -> dict[Ref, list[int]]:
        uses: dict[Ref, list[int]] = {}
        for i, node in self.topo():
            for r in node.inputs:
                uses.setdefault(r, []).append(i)
        return uses


def _op_method(opdef: OpDef):
    """Build `g.<op>(*tensors, *attrs)`; attributes may also be given by keyword."""

    def method(self: GraphBuilder, *args: Any, **kwargs: Any) -> Tensor:
        tensors, rest = args[: opdef.arity], args[opdef.arity:]
        if len(rest) > len(opdef.attrs):
            raise GraphError(f"{opdef.name}: too many arguments")
        attrs = dict(zip(opdef.attrs, rest))
        for k, v in kwargs.items():
            if k in attrs:
                raise GraphError(f"{opdef.name}: attribute {k!r} given twice")
            attrs[k] = v
        return self.apply(opdef.name, tensors, attrs)

    method.__name__ = opdef.name
    method.__doc__ = f"{opdef.doc}. Operands: {opdef.arity} tensor(s); attributes: {opdef.attrs or 'none'}."
    return method


_METHODS: set[str] = set()


@watch
def _op_methods() -> None:
    """One method per table op (`g.matmul`, `b.exp`, ...), kept in step with the op table."""
    for name in _METHODS - set(OPS):
        delattr(GraphBuilder, name)
    for d in OPS.values():
        setattr(GraphBuilder, d.name, _op_method(d))
    _METHODS.clear()
    _METHODS.update(OPS)



def check_shape(shape: Any, where: str) -> tuple[int, ...]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{where}: shape must be a sequence of positive ints, got {shape!r}") from None
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ShapeError(f"{where}: shape must be a non-empty sequence of positive ints, got {shape!r}")
    return dims
