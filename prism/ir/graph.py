"""The kernel graph: a tensor program over full tensors in global memory, whose ops are table ops or fused
kernels (custom ops, each a block graph), and the size constraints its proof needs (prism.ir.sizes)."""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from prism.errors import ConstraintError, DTypeError, GraphError, ShapeError
from prism.ir.block import BlockGraph
from prism.ir.builder import GraphBuilder, Node, Ref, Tensor, check_shape
from prism.ir.ops import TType, check_dtype
from prism.ir.printer import format_graph
from prism.ir.serialize import KERNEL_FORMAT, Stored
from prism.ir.sizes import Constraint, describe, grid_size_name, kernel_of, loop_size_name, violations

__all__ = ["KernelGraph", "check_sizes", "parallel_sizes"]


class KernelGraph(GraphBuilder, Stored, format=KERNEL_FORMAT):
    """A tensor program over full tensors: inputs, registry ops, fused custom ops, marked outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[Ref] = []
        self._constraints: tuple[Constraint, ...] = ()

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """The size constraints this graph's proof needs (prism.ir.sizes; a verdict's, prism.verify.equiv):
        the graph computes its program only at parallel sizes that satisfy them, and a launch checks that.
        Empty for a graph proved for all sizes. Copies of the graph (replay, map_blocks, cones) keep them."""
        return self._constraints

    @constraints.setter
    def constraints(self, constraints: Sequence[Constraint]) -> None:
        if isinstance(constraints, Constraint) or not isinstance(constraints, (list, tuple)) \
                or not all(isinstance(c, Constraint) for c in constraints):
            raise ConstraintError(f"constraints: expected a list or tuple of prism.ir.sizes.Constraint, got "
                                  f"{constraints!r}")
        have = parallel_sizes(self)
        for c in constraints:
            if not c.names <= have.keys():
                raise ConstraintError(f"constraint {c} names sizes this graph does not have: "
                                      f"{', '.join(sorted(c.names - have.keys()))} (it has {', '.join(have)})")
        self._constraints = tuple(dict.fromkeys(constraints))

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
        args = [out.input(t.shape, t.dtype, t.name) for t in self.inputs]
        out.output(*self.replay(out, args, fn))
        return out

    def replay(self, into: KernelGraph, args: Sequence[Tensor],
               blocks: Callable[[int, BlockGraph], BlockGraph] | None = None) -> list[Tensor]:
        """Append this graph's ops to `into`, its inputs bound to `args` (tensors of `into`, in input order),
        the k-th custom op using `blocks(k, block)` if given; returns its outputs as tensors of `into`. Ops go
        through `into`'s builders, so they are checked as if written there (how graphs are copied and joined)."""
        if len(args) != len(self.input_refs):
            raise GraphError(f"replay: the graph has {len(self.input_refs)} input(s), got {len(args)} tensor(s)")
        refs = {r: into._own(t, "replay").ref for r, t in zip(self.input_refs, args)}
        self._copy_ops(into, refs, blocks=blocks)
        return [into.tensor(refs[r]) for r in self.outputs]

    def output_cone(self, k: int) -> tuple[KernelGraph, list[int]]:
        """Output k as a program of its own: the ops it depends on and the inputs it reads (same names, in
        order), with the indices of those inputs among this graph's. What a program with several outputs
        is searched and tuned by, one output at a time (and joined: prism.search.joint)."""
        return self.outputs_cone([k])

    def outputs_cone(self, ks: Sequence[int]) -> tuple[KernelGraph, list[int]]:
        """Outputs `ks` (in that order) as a program of their own, like `output_cone`: what a joint form of
        several outputs is searched for (prism.search.joint)."""
        for k in ks:
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(self.outputs):
                raise GraphError(f"output_cone: output {k!r} does not exist; the graph has {len(self.outputs)}")
        if not ks:
            raise GraphError("output_cone: no output given")
        refs = [self.outputs[k] for k in ks]
        return self._cone(refs, self._needed(refs))

    def pruned(self) -> tuple[KernelGraph, list[int]]:
        """This graph without the ops and inputs no output depends on, with the indices of the inputs it
        keeps (itself if nothing is dead). A front end that rewrites a value (prism.capture.lower: a slice of a
        matmul as a matmul of a slice) leaves the old one dead."""
        if not self.outputs:
            raise GraphError("pruned: the kernel graph has no output")
        need = self._needed(self.outputs)
        if len(need) == len(self.nodes):
            return self, list(range(len(self.input_refs)))
        return self._cone(self.outputs, need)

    def _needed(self, outputs: list[Ref]) -> set[int]:
        """The nodes `outputs` depend on, themselves included."""
        need: set[int] = set()
        stack = [r[0] for r in outputs]
        while stack:
            i = stack.pop()
            if i not in need:
                need.add(i)
                stack.extend(r[0] for r in self.nodes[i].inputs)
        return need

    def _cone(self, outputs: list[Ref], need: set[int]) -> tuple[KernelGraph, list[int]]:
        """The ops `outputs` depend on (`need`, from `_needed`), as a graph of their own, and the indices of the
        inputs it reads."""
        sub = KernelGraph()
        used = [j for j, r in enumerate(self.input_refs) if r[0] in need]
        refs = {}
        for j in used:
            t = self.inputs[j]
            refs[t.ref] = sub.input(t.shape, t.dtype, t.name).ref
        self._copy_ops(sub, refs, keep=need)
        sub.output(*(sub.tensor(refs[r]) for r in outputs))
        return sub, used

    def _copy_ops(self, into: KernelGraph, refs: dict[Ref, Ref], keep: set[int] | None = None,
                  blocks: Callable[[int, BlockGraph], BlockGraph] | None = None) -> None:
        """Append the non-input ops (those in `keep`, if given) to `into`; `refs` maps this graph's refs to
        `into`'s, inputs first, and gains every ref copied. The size constraints of the kernels copied go
        along, each kernel's sizes renamed by its index in `into`."""
        index = {i: k for k, i in enumerate(i for i, n in self.topo() if n.op == "custom")}
        moved: dict[int, int] = {}   # kernel index here -> in `into`
        for i, node in self.topo():
            if node.op == "input" or (keep is not None and i not in keep):
                continue
            ins = [into.tensor(refs[r]) for r in node.inputs]
            if node.op == "custom":
                block = node.attrs["block"] if blocks is None else blocks(index[i], node.attrs["block"])
                moved[index[i]] = len(into.blocks)
                refs.update(((i, j), t.ref) for j, t in enumerate(into.custom(block, ins)))
            else:
                refs[(i, 0)] = into.apply(node.op, ins, node.attrs).ref
        into.constraints = into.constraints + tuple(c.renamed(moved) for c in self.constraints
                                                    if all(kernel_of(p)[1] in moved for p in c.names))

    @property
    def blocks(self) -> list[BlockGraph]:
        """The block graphs of the custom ops, in order."""
        return [n.attrs["block"] for n in self.nodes if n.op == "custom"]

    def check(self) -> KernelGraph:
        """Raise GraphError if the graph cannot be run (no output, or no input); return self for chaining."""
        missing = "output: call g.output(tensor)" if not self.outputs else "input" if not self.input_refs else None
        if missing is not None:
            raise GraphError(f"the kernel graph has no {missing}")
        return self

    def __str__(self) -> str:
        return format_graph(self)


def parallel_sizes(graph: KernelGraph) -> dict[str, int]:
    """Every parallel size of `graph` by name: each custom op's grid sizes and loop range."""
    out: dict[str, int] = {}
    for k, block in enumerate(graph.blocks):
        out.update((grid_size_name(d, k), block.grid_size(d)) for d in block.grid_dims)
        out[loop_size_name(k)] = block.loop
    return out


def check_sizes(graph: KernelGraph, who: str = "the graph") -> None:
    """ConstraintError unless `graph`'s own parallel sizes satisfy the constraints its proof needs."""
    bad = violations(graph.constraints, parallel_sizes(graph))
    if bad:
        raise ConstraintError(f"{who} was proved equal to its program only for sizes where "
                              f"{'; '.join(map(str, graph.constraints))}, and its own sizes break that: "
                              f"{'; '.join(bad)} ({describe(set().union(*(c.names for c in graph.constraints)))})")
