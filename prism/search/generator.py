"""sGraph generation (paper §3.1–3.3): enumerate block-graph structures with symbolic maps.

A state is an immutable `SGraph` (one loader per kernel input, then block ops). From a state the
generator appends one op at a time from the target's vocabulary (every (op, attrs) in the closure:
matmul, unary, binary, sum(dim), mul_scalar/add_scalar with the target's constants, rms_norm) or an
accumulator, in canonical order (each op's `BOp.key` above the previous op's, so a DAG is built in
one order only). Each candidate op is tested cheapest first: canonical order, expression check
(its d_p = 1 term must be a subterm of the target's closure), loop phase, dimension matching.
A state is emitted when its consumer-less tensors are post-loop, at most `max_outputs`, each a
subterm of the target, and either one of them is a whole form of the target or a few kernel-level
elementwise ops over them complete it (decode attention: numerator and denominator, then a div).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from prism.ir.ops import OPS
from prism.symbolic.closure import Target, vocabulary_ops
from prism.symbolic.dims import UNIT
from prism.symbolic.sgraph import ACCUM, BOp, Labels, SGraph, match_binary
from prism.symbolic.terms import Term, mk, op_of, subterms

__all__ = ["Generator", "Limits", "Structure", "default_max_ops", "split"]


@dataclass(frozen=True)
class Limits:
    """Search limits. `max_block_ops` counts loaders; None picks `default_max_ops(target)`."""

    max_block_ops: int | None = None
    max_accums: int = 3
    max_outputs: int = 2
    max_kernel_ops: int = 1
    max_grid: int = 3
    time_limit: float = 3600.0


@dataclass(frozen=True)
class Structure:
    """An emitted sGraph: the block graph, the tensors it saves, and the kernel-level ops after it.

    Kernel op inputs index the kernel values: the saved outputs 0..m-1, then the kernel ops in order;
    the program's output is the last value. `omaps` fixes output maps in the concrete-omap ablation.
    """

    graph: SGraph
    outputs: tuple[int, ...]
    kernel_ops: tuple[BOp, ...] = ()
    omaps: tuple[tuple[int | None, ...], ...] | None = None

    def key(self) -> tuple:
        """A canonical sort key (op lists, outputs, kernel ops)."""
        return (len(self.graph.ops), [o.key() for o in self.graph.ops], self.outputs,
                [o.key() for o in self.kernel_ops], self.omaps or ())


def default_max_ops(target: Target, max_accums: int = 3, floor: int = 11) -> int:
    """Enough block ops for the smallest whole form of the target that needs no rms_norm op (an
    rms_norm over a loop-split dim cannot be fused), plus the accumulators; at least `floor`."""
    n_in = len(target.space.shapes)
    sizes = [len({s for s in subterms(r) if op_of(s) != "in"}) for r in target.roots
             if not any(op_of(s) == "rms_norm" for s in subterms(r))]
    return max(floor, n_in + (min(sizes) if sizes else 0) + max_accums)


@dataclass
class Generator:
    """Depth-first structure enumeration for one target; `stats` counts what it saw and pruned."""

    target: Target
    limits: Limits
    deadline: float = float("inf")
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.vocab = vocabulary_ops(self.target)
        self.max_ops = self.limits.max_block_ops or default_max_ops(self.target, self.limits.max_accums)
        self.max_outputs = min(self.limits.max_outputs, self.limits.max_kernel_ops + 1)
        self.kernel_vocab = [(o, a) for o, a in self.vocab if OPS[o].kind in ("unary", "binary", "scalar")]

    def start(self, labels: Labels | None = None) -> SGraph:
        return SGraph.start(self.target.space, labels)

    # -- the search ----------------------------------------------------------------------------

    def run(self, state: SGraph) -> Iterator[Structure]:
        """Every structure reachable from `state` (depth first, canonical order)."""
        stack = [state]
        while stack:
            if time.monotonic() > self.deadline:
                self.stats["timed_out"] = 1
                return
            s = stack.pop()
            found, children = self.expand(s)
            yield from found
            stack.extend(reversed(children))

    def expand(self, state: SGraph) -> tuple[list[Structure], list[SGraph]]:
        """The structures `state` emits, and its children (the states one op further)."""
        self.stats["states"] += 1
        found = list(self.emit(state))
        self.stats["emitted"] += len(found)
        if len(state.ops) >= self.max_ops:
            return found, []
        children = []
        for bop in self.candidates(state):
            term = state.term(bop)
            if term not in self.target.subterms:
                self.stats["pruned_expr"] += 1
                continue
            child = state.extend(bop, term)
            if isinstance(child, str):
                self.stats[f"pruned_{child}"] += 1
                continue
            if self._hopeless(child):
                self.stats["pruned_budget"] += 1
                continue
            children.append(child)
        return found, children

    def _hopeless(self, s: SGraph) -> bool:
        """No way to finish: every op lowers the consumer-less count by at most one."""
        unused = sum(1 for u in s.uses if u == 0)
        return unused - (self.max_ops - len(s.ops)) > self.max_outputs

    def candidates(self, s: SGraph) -> Iterator[BOp]:
        """Ops that may follow `s` in canonical order."""
        n = len(s.ops)
        last = s.ops[-1].key() if n > s.n_loaders else None
        accums = s.n_accums
        out: list[BOp] = []
        for op, attrs in self.vocab:
            kind = OPS[op].kind
            if kind in ("binary", "matmul"):
                commutative = op in ("add", "mul")
                for i in range(n):
                    for j in range(i if commutative else 0, n):
                        if i != j or kind == "matmul":
                            out.append(BOp(op, (i, j), attrs))
            else:
                out.extend(BOp(op, (i,), attrs) for i in range(n))
        if accums < self.limits.max_accums:
            out.extend(BOp(ACCUM, (i,), ()) for i in range(n) if not s.post[i])
        for bop in out:
            if last is None or bop.key() > last:
                yield bop
            else:
                self.stats["pruned_order"] += 1

    # -- emission ------------------------------------------------------------------------------

    def emit(self, s: SGraph) -> Iterator[Structure]:
        """The structures `s` completes: its consumer-less tensors saved, plus kernel-level ops."""
        outs = tuple(i for i, u in enumerate(s.uses) if u == 0)
        if not 1 <= len(outs) <= self.max_outputs or not all(s.post[i] for i in outs):
            return
        if any(s.terms[i] not in self.target.subterms for i in outs):
            return
        terms = [s.terms[i] for i in outs]
        dims = [s.dims[i] for i in outs]
        for kops in self._combine(s, terms, dims, [0] * len(outs), (), len(outs)):
            yield Structure(s, outs, kops)

    def _combine(self, s: SGraph, terms: list[Term], dims: list[tuple[int, ...]], uses: list[int],
                 kops: tuple[BOp, ...], m: int) -> Iterator[tuple[BOp, ...]]:
        free = [i for i, u in enumerate(uses) if u == 0]
        if len(free) == 1 and terms[free[0]] in self.target.roots and \
                _full_shape(dims[free[0]], s) == _full_shape(self.target.shape(), s):
            yield kops
        if len(kops) >= self.limits.max_kernel_ops:
            return
        last = kops[-1].key() if kops else None
        n = len(terms)
        for op, attrs in self.kernel_vocab:
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if OPS[op].arity == 2 else \
                [(i,) for i in range(n)]
            for ins in pairs:
                bop = BOp(op, ins, attrs)
                if (last is not None and bop.key() <= last) or (op in ("add", "mul") and ins[0] > ins[1]):
                    continue
                term = mk(op, attrs, *(terms[i] for i in ins))
                if term not in self.target.subterms:
                    continue
                if len(ins) == 2:
                    matched = match_binary(dims[ins[0]], dims[ins[1]], s.uf, s.space)
                    if matched is None:
                        continue
                    d = matched[0]
                else:
                    d = dims[ins[0]]
                u = list(uses)
                for i in ins:
                    u[i] += 1
                yield from self._combine(s, terms + [term], dims + [d], u + [0], kops + (bop,), m)


def _full_shape(dims: Sequence[int], s: SGraph) -> tuple[int, ...]:
    return tuple(1 if a == UNIT else s.space.extent(a) for a in dims)


def split(gen: Generator, state: SGraph, tasks: int) -> tuple[list[Structure], list[SGraph]]:
    """Expand breadth first until there are at least `tasks` states (for worker processes)."""
    found: list[Structure] = []
    frontier = [state]
    while 0 < len(frontier) < tasks:
        nxt: list[SGraph] = []
        for s in frontier:
            f, children = gen.expand(s)
            found.extend(f)
            nxt.extend(children)
        if not nxt:
            return found, []
        frontier = nxt
    return found, frontier

