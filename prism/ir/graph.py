"""Tensors, nodes and the kernel graph: a tensor program over full tensors in global memory.

A graph is built by appending nodes, one per op call, so it is acyclic by construction; nodes are
immutable, and a tensor handle belongs to exactly one graph. The op methods (`g.matmul`, `g.exp`, ...)
are generated from the op registry, so the builders never list ops by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from prism.errors import DTypeError, GraphError, ShapeError
from prism.ir.ops import OPS, OpDef, TType, check_dtype, op

if TYPE_CHECKING:
    from prism.ir.block import BlockGraph

__all__ = ["Ref", "Node", "Tensor", "GraphBuilder", "KernelGraph", "check_shape"]

Ref = tuple[int, int]
"""A tensor inside a graph: (node index, output index)."""


@dataclass(frozen=True)
class Node:
    """One op application. `op` is a registry op, or a structural op ("input", "custom", and in block
    graphs "loader", "accum", "saver"); `attrs` never change after construction."""

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
        if ref not in self._handles:
            self._handles[ref] = Tensor(self, *ref)
        return self._handles[ref]

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
        labels = ", ".join(repr(t) for t in tensors)
        try:
            norm = opdef.normalize_attrs(types, attrs or {})
            out = opdef.infer(types, norm)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{e} (operands {labels})") from None
        self._check_operands(name, tensors)
        return self._append(Node(name, tuple(t.ref for t in tensors), norm, (out,)))[0]

    def _check_operands(self, name: str, tensors: Sequence[Tensor]) -> None:
        """Hook: block graphs check that operands sit on the same side of the loop."""

    # -- reading -------------------------------------------------------------------------------

    def topo(self) -> Iterable[tuple[int, Node]]:
        """Nodes in a topological order (the order they were added)."""
        return enumerate(self.nodes)

    # -- JSON and hashing (prism.ir.serialize) -------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """This graph as plain JSON types; `from_json` rebuilds it."""
        from prism.ir import serialize

        return serialize.to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> GraphBuilder:
        """Rebuild a graph from `to_json`'s output, replaying (so re-running) every builder check."""
        from prism.ir import serialize

        return serialize.from_json(data, expect=cls)

    def structural_hash(self, shapes: bool = True) -> str:
        """Hex sha256 of the structure; input names never count, `shapes=False` ignores all sizes."""
        from prism.ir import serialize

        return serialize.structural_hash(self, shapes=shapes)

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


for _def in OPS.values():
    setattr(GraphBuilder, _def.name, _op_method(_def))


class KernelGraph(GraphBuilder):
    """A tensor program over full tensors: inputs, registry ops, fused custom ops, marked outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[Ref] = []

    def input(self, shape: Sequence[int], dtype: Any = "float16", name: str | None = None) -> Tensor:
        """Declare an input tensor of `shape` and `dtype`; names default to in0, in1, ..."""
        name = name if name is not None else f"in{len(self.input_refs)}"
        if not isinstance(name, str) or not name.isidentifier():
            raise GraphError(f"input: name {name!r} must be an identifier")
        if re.fullmatch(r"t\d+", name):
            raise GraphError(f"input: name {name!r} is reserved for computed tensors (t<node>)")
        if any(self.nodes[r[0]].attrs["name"] == name for r in self.input_refs):
            raise GraphError(f"input: a tensor named {name!r} already exists")
        shape = check_shape(shape, f"input {name}")
        t = TType(shape, check_dtype(dtype, f"input {name}"))
        return self._append(Node("input", (), {"name": name}, (t,)))[0]

    def custom(self, block: BlockGraph, inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
        """Apply a fused kernel (a block graph) to `inputs`; returns one tensor per output saver."""
        from prism.ir.block import BlockGraph

        if not isinstance(block, BlockGraph):
            raise GraphError(f"custom: expected a BlockGraph, got {type(block).__name__}")
        inputs = [self._own(t, "custom") for t in inputs]
        block.check()
        expected = block.input_types
        if len(inputs) != len(expected):
            raise GraphError(f"custom: the block graph loads {len(expected)} input(s), got {len(inputs)}")
        for k, (t, want) in enumerate(zip(inputs, expected)):
            if t.shape != want.shape:
                raise ShapeError(f"custom: input {k} ({t!r}) should have shape {list(want.shape)}")
            if t.dtype != want.dtype:
                raise DTypeError(f"custom: input {k} ({t!r}) should have dtype {want.dtype}")
        block.freeze()
        node = Node("custom", tuple(t.ref for t in inputs), {"block": block}, tuple(block.output_types))
        return self._append(node)

    def output(self, *tensors: Tensor) -> None:
        """Mark tensors as outputs of the program, in order."""
        if not tensors:
            raise GraphError("output: give at least one tensor")
        for t in tensors:
            ref = self._own(t, "output").ref
            if ref in self.outputs:
                raise GraphError(f"output: {t.name} is already an output")
            self.outputs.append(ref)

    # -- reading -------------------------------------------------------------------------------

    @property
    def input_refs(self) -> list[Ref]:
        return [(i, 0) for i, n in enumerate(self.nodes) if n.op == "input"]

    @property
    def inputs(self) -> list[Tensor]:
        return [self.tensor(r) for r in self.input_refs]

    @property
    def output_tensors(self) -> list[Tensor]:
        return [self.tensor(r) for r in self.outputs]

    def map_blocks(self, fn: Callable[[int, BlockGraph], BlockGraph]) -> KernelGraph:
        """A copy of this graph whose k-th custom op uses `fn(k, block)` instead (e.g. other sizes);
        everything is replayed through the builders, so the copy is checked like a new graph."""
        out = KernelGraph()
        refs: dict[Ref, Ref] = {}
        kernel = 0
        for i, node in self.topo():
            args = [out.tensor(refs[r]) for r in node.inputs]
            if node.op == "input":
                t = node.outputs[0]
                refs[(i, 0)] = out.input(t.shape, t.dtype, node.attrs["name"]).ref
            elif node.op == "custom":
                outs = out.custom(fn(kernel, node.attrs["block"]), args)
                kernel += 1
                refs.update(((i, k), t.ref) for k, t in enumerate(outs))
            else:
                refs[(i, 0)] = out.apply(node.op, args, node.attrs).ref
        out.output(*(out.tensor(refs[r]) for r in self.outputs))
        return out

    @property
    def blocks(self) -> list[BlockGraph]:
        """The block graphs of the custom ops, in order."""
        return [n.attrs["block"] for n in self.nodes if n.op == "custom"]

    def check_call(self, tensors: Sequence[Any], who: str,
                   device_rule: Callable[[Any], str | None] | None = None) -> Any:
        """The torch.device of `tensors` if they fit the declared inputs exactly (count, torch.Tensor,
        shape, dtype, one device, no gradient wanted), else an InputError naming `who` ("the compiled
        graph", ...). `device_rule(device)` says why an input's device is wrong (None: it is fine). The
        generated kernels are inference-only: an input that requires grad while autograd is on is refused
        (its gradient would silently be lost); under torch.no_grad() it is fine. The reference executor,
        which accepts wider floats, has its own check."""
        import torch

        from prism.errors import InputError
        from prism.ir.ops import TORCH_DTYPES

        expected = self.inputs
        if len(tensors) != len(expected):
            names = ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in expected)
            raise InputError(f"{who} takes {len(expected)} tensor(s) ({names}), got {len(tensors)}")
        for t, want in zip(tensors, expected):
            if not isinstance(t, torch.Tensor):
                raise InputError(f"input {want.name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != want.shape:
                raise InputError(f"input {want.name} should have shape {list(want.shape)}, got {list(t.shape)}")
            if t.dtype != TORCH_DTYPES[want.dtype]:
                raise InputError(f"input {want.name} should have dtype {want.dtype}, got {t.dtype}")
            why = device_rule(t.device) if device_rule else None
            if why:
                raise InputError(f"input {want.name} is on {t.device}; {why}")
            if t.requires_grad and torch.is_grad_enabled():
                raise InputError(f"input {want.name} requires grad, but {who} is inference-only (autograd cannot "
                                 "differentiate through it): call it under torch.no_grad(), or pass .detach()")
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise InputError(f"inputs are on different devices: {', '.join(sorted(map(str, devices)))}")
        return next(iter(devices)) if devices else None

    def check(self) -> KernelGraph:
        """Raise GraphError if the graph cannot be run (no output); return self for chaining."""
        if not self.outputs:
            raise GraphError("the kernel graph has no output: call g.output(tensor)")
        if not self.input_refs:
            raise GraphError("the kernel graph has no input")
        return self

    def __str__(self) -> str:
        from prism.ir.printer import format_graph

        return format_graph(self)


def check_shape(shape: Any, where: str) -> tuple[int, ...]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{where}: shape must be a sequence of positive ints, got {shape!r}") from None
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ShapeError(f"{where}: shape must be a non-empty sequence of positive ints, got {shape!r}")
    return dims
