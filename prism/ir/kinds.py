"""Block-graph node kinds as data: what a node of each kind is, and where it runs.

A block graph has four kinds of node: loaders (a tile of a kernel input), compute ops (any op of the table,
prism.ir.ops), accumulators (a tile combined over all loop iterations) and savers (a tile written to a
kernel output). Each kind is one record holding what the IR itself needs of it: its phase (which side of the
loop its value is on, what the builder checks), its place in the schedule (before, inside or after the loop),
how the builder appends one and how it prints. What a kind means to a pass is that pass's own rule, in one
table keyed by kind class in the pass's module (the executor's `RUN` and `UPDATE`, prism.interp.executor; the
verification encoding's `ENCODE`, prism.verify.encode; code generation's `EMIT`, prism.codegen.emit; the cost
model's `COUNT`, prism.tune.cost), looked up by `rule_for`, which names the pass and the kind where a rule is
missing. So a pass changes how it works without touching the IR, and the IR imports no pass.

An accumulator's combine is data: the table op merging two partial values (add, for the sum), its identity
(the value before the first iteration: 0, or -inf for a max), the verification term reducing a family over
the loop (red), and whether a matmul can accumulate straight into it. A new accumulator is one record given to
`register` plus the axioms of its reducer (prism.verify.axioms.register): the reducer term (prism.verify.expr)
and its numeric meaning (prism.verify.model, the combine op folded over the members) follow from the record;
its combine op must be in the op table (code generation writes its update from the op's template), and the
search tries it where an op names it as the accumulator of its results (OpDef.accumulator), as a max does.
tests/test_new_accumulator.py shows one.

`schedule(block)` places every node once; the executor, the emitter and the cost model all read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

from prism.errors import GraphError, MappingError
from prism.ir.ops import OPS, RUNNING, SCALED, refresh, runtime_ops

__all__ = [
    "LOOP", "POST", "SAVED", "INVARIANT", "BEFORE", "INSIDE", "AFTER", "joined",
    "Kind", "Loader", "Compute", "Accumulator", "RunningMax", "Online", "Saver", "LOADER", "COMPUTE", "SUM", "MAX",
    "ONLINE", "RUNNING_MAX", "SAVER",
    "ACCUMULATORS", "KINDS", "kind_of", "reducers", "register", "rule_for", "unregister", "runtime_names", "scaling",
    "Schedule", "schedule",
]

LOOP, POST, SAVED, INVARIANT = "loop", "post", "saved", "invariant"
"""Phases: a value that changes every iteration, one that exists once the accumulators are done, a saved output,
and a loop-invariant value (a tile the loop does not walk, and what is computed from such tiles alone): the
same before, in and after the loop, so it meets values of either side (LoRA's B, multiplied into acc(X @ A)
after the loop)."""


def joined(phases: Sequence[str]) -> str | None:
    """The phase of a value computed from operands of these phases: the one side of the loop they are on
    (invariants are on both), or None when they are on different sides."""
    sides = set(phases) - {INVARIANT}
    return None if len(sides) > 1 else next(iter(sides), INVARIANT)
BEFORE, INSIDE, AFTER = "pre", "loop", "post"
"""Places in the schedule: once before the loop, every iteration, once after it."""


class Kind:
    """What every node of one kind is to each pass. `name` is the node's op in the IR and in JSON; `arity`
    the number of its tensor operands."""

    name: str
    arity = 0

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        """The phase of the node's value, given the node and its operands' phases (checked compatible)."""
        raise NotImplementedError

    def place(self, node: Any, operands: Sequence[str], looped: bool) -> str:
        """Where the node runs, given where its operands do and whether the block loops more than once."""
        return AFTER

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        """Append a node like `node` (op and attrs) on tensors `args` to block graph `b` through its builder
        method, so every check runs again (`source`: a loader's kernel-level input type)."""
        raise NotImplementedError

    def show(self, node: Any, args: str) -> str:
        """The right-hand side of the node's line in a printed block graph."""
        return f"{node.op}({args}{''.join(f', {k}={v}' for k, v in node.attrs.items())})"



class Loader(Kind):
    """A tile of kernel input `index`: grid dims in `imap` split its dims, the loop walks dim `fmap`."""

    name = "loader"

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        return INVARIANT if node.attrs["fmap"] is None else LOOP

    def place(self, node: Any, operands: Sequence[str], looped: bool) -> str:
        return INSIDE if looped and node.attrs["fmap"] is not None else BEFORE

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        return b.input(source, imap=node.attrs["imap"], fmap=node.attrs["fmap"])

    def show(self, node: Any, args: str) -> str:
        a = node.attrs
        return f"load in{a['index']} imap={a['imap']} fmap={a['fmap']}"

class Compute(Kind):
    """An op of the table (prism.ir.ops) on tiles; its value is on the side of the loop its operands are."""

    name = "op"

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        phase = joined(operands)
        assert phase is not None, "BlockGraph refuses operands on different sides of the loop"
        return phase

    def place(self, node: Any, operands: Sequence[str], looped: bool) -> str:
        return max(operands, key=(BEFORE, INSIDE, AFTER).index)

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        return b.apply(node.op, args, node.attrs)

@dataclass(frozen=True)
class Accumulator(Kind):
    """A loop tile combined over all iterations: `combine` (a table op) folds each iteration's tile into the
    value, which starts at `identity`. Verification writes it as term `reducer` over the loop's parallel
    dim; `dot` says a matmul can accumulate straight into it (Triton's dot adds its accumulator argument)."""

    name: str
    combine: str
    identity: float
    reducer: str
    dot: bool = False
    arity = 1

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        return POST

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        return b.accum(args[0], self.name)

class RunningMax(Kind):
    """The largest value of a loop tensor so far: after iteration k, the elementwise max over iterations
    0..k of its operand (a row max of logits, say). It is what the online softmax subtracts before exp:
    inside the loop a value derived from it may only be `exp(x - m)` times values that do not depend on it,
    accumulated by an online accumulator bound to it (BlockGraph enforces this), whose rescaling by
    exp(m_before - m_after) makes every iteration's term as if computed with the final max. So verification
    writes it, in every iteration, as its final value: the max over the whole loop (`redmax`)."""

    name = "running_max"
    arity = 1

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        return LOOP

    def place(self, node: Any, operands: Sequence[str], looped: bool) -> str:
        return INSIDE if looped else BEFORE

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        return b.running_max(args[0])

def scaling(op: str, attrs: Any, operands: Sequence[tuple[tuple[int, ...], Any]],
            running: dict[Any, tuple[int, ...]], me: Any = None) -> tuple[str, Any] | None:
    """How a node's value depends on a running max, given each operand's (shape, state), or a GraphError
    where it may not: the one rule BlockGraph and the search's sGraph both apply (prism.symbolic.draft).

    States: None (independent of every running max), or (state, r) for running max r (`me`, the new node's
    reference, when `op` is "running_max"), the state one of prism.ir.ops' RUNNING (r itself), SHIFTED (x - r)
    and SCALED (exp(-r) times a value independent of r, per position: what an online accumulator bound to r can
    rescale). A table op passes them on as its record says (OpDef.online: prism.ir.ops.Passes); `running` gives
    each running max's shape (1 where its dim has extent 1), for a case that adds up positions along a dim.
    Accumulators take independent values, except the online one: a value scaled by its second operand."""
    states = [st for _, st in operands]
    if op == RUNNING_MAX.name:
        if states != [None]:
            raise GraphError("running_max: its operand already depends on a running max")
        return (RUNNING, me)
    if op in ACCUMULATORS:
        if op == ONLINE.name:
            r = states[1][1] if len(states) == 2 and states[1] is not None and states[1][0] == RUNNING else None
            if r is None or states[0] != (SCALED, r):
                raise GraphError("accum: an online accumulator sums exp(x - m) times values that do not depend "
                                 "on m, for m its second operand (a running_max)")
        elif states != [None]:
            raise GraphError(f"accum: {op} cannot take a value that depends on a running max; only an online "
                             "accumulator bound to it may sum it (it rescales as the max grows)")
        return None
    if all(st is None for st in states):
        return None
    refs = {st[1] for st in states if st is not None}
    if len(refs) == 1:
        (r,) = refs
        d = OPS[op]
        kinds = tuple(st[0] if st is not None else None for st in states)
        for case in d.online.passes:
            if case.takes not in (kinds, kinds[::-1] if d.commutative else kinds):
                continue
            along = attrs[case.along] if isinstance(case.along, str) else case.along
            if along is None or running[r][along] == 1:
                return (case.gives, r)
    raise GraphError(f"{op}: an operand depends on a running max; inside the loop that may only be exp(x - m), "
                     "times, divided by or summed with values that do not depend on m, summed over or contracted "
                     "along a dim where m has extent 1, and accumulated by an online accumulator bound to m")


@dataclass(frozen=True)
class Online(Accumulator):
    """A sum over the loop of values scaled by exp(-m) for a running max m (its second operand, a RunningMax
    node): before each iteration's tile is added, the sum so far is multiplied by exp(m_before - m_after),
    so the result is the sum of every tile as if computed with the final max (the online softmax's
    numerator and denominator). Verification writes it as a plain sum (`red`) of tiles that use the final
    max, which is what RunningMax's encoding gives them."""

    arity = 2

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        return b.accum(args[0], self.name, running=args[1])

class Saver(Kind):
    """Writes a post-loop tile to kernel output `index`; grid dims in `omap` concatenate along a data dim,
    those in `once` (blocks that compute the same tile) write it from their first block only, and the others
    (of size > 1) sum their blocks' tiles."""

    name = "saver"
    arity = 1

    def phase(self, node: Any, operands: Sequence[str]) -> str:
        return SAVED

    def build(self, b: Any, node: Any, args: list[Any], source: Any) -> Any:
        """The stored output shape where it still splits into the new tile (a ragged split's extent survives a
        replay and other sizes), else tile × blocks (new maps: a mutant's)."""
        maps = {"omap": node.attrs["omap"], "once": node.attrs.get("once", ())}
        if len(node.outputs) == 1:   # else the replay's comparison says what is wrong
            try:
                return b.output(args[0], shape=node.outputs[0].shape, **maps)
            except MappingError:
                pass
        return b.output(args[0], **maps)

    def show(self, node: Any, args: str) -> str:
        once = node.attrs.get("once")
        return f"save {args} omap={node.attrs['omap']}" + (f" once={','.join(once)}" if once else "")

LOADER, COMPUTE, SAVER, RUNNING_MAX = Loader(), Compute(), Saver(), RunningMax()
SUM = Accumulator("accum", combine="add", identity=0.0, reducer="red", dot=True)
MAX = Accumulator("accum_max", combine="maximum", identity=-math.inf, reducer="redmax")
ONLINE = Online("accum_online", combine="add", identity=0.0, reducer="red", dot=True)
ACCUMULATORS: dict[str, Accumulator] = {a.name: a for a in (SUM, MAX, ONLINE)}
KINDS: dict[str, Kind] = {k.name: k for k in (LOADER, *ACCUMULATORS.values(), RUNNING_MAX, SAVER)}
"""The structural kinds by node op; every other node is a COMPUTE node (its op is a table op)."""
_BUILTIN = frozenset(ACCUMULATORS)


def register(kind: Accumulator) -> Accumulator:
    """Add accumulator kind `kind`; what is derived from the node kinds (the term language's reducers, the
    search's op order) follows at once, as for an op (prism.ir.ops.register)."""
    if not isinstance(kind, Accumulator):
        raise GraphError(f"register: expected an Accumulator, got {type(kind).__name__}")
    if kind.name in KINDS or kind.name in OPS:
        raise GraphError(f"register: a node kind or op named {kind.name!r} already exists")
    if kind.combine not in OPS:
        raise GraphError(f"register: {kind.name}'s combine op {kind.combine!r} is not in the op table")
    ACCUMULATORS[kind.name] = KINDS[kind.name] = kind
    refresh()
    return kind


def unregister(name: str) -> None:
    """Remove accumulator kind `name`, registered at run time (tests that define one of their own)."""
    if name not in ACCUMULATORS or name in _BUILTIN:
        raise GraphError(f"unregister: {name!r} is no accumulator registered at run time")
    del ACCUMULATORS[name], KINDS[name]
    refresh()


def runtime_names() -> list[str]:
    """The ops and accumulator kinds registered after import: a spawned process, which builds both tables by
    importing Prism, does not have them."""
    return runtime_ops() + sorted(set(ACCUMULATORS) - _BUILTIN)


def reducers() -> dict[str, str]:
    """Each accumulator's reducer term, with the combine op that folds the members it reduces (red: add, redmax:
    maximum), in the order of ACCUMULATORS."""
    return {a.reducer: a.combine for a in ACCUMULATORS.values()}


def kind_of(node: Any) -> Kind:
    """The kind of a block-graph node."""
    return KINDS.get(node.op, COMPUTE)


Rule = TypeVar("Rule")


def rule_for(table: Mapping[type, Rule], kind: Kind, pass_name: str) -> Rule:
    """A pass's rule for node kind `kind`, from its table keyed by kind class: the class's own, else its nearest
    base's (an accumulator registered at run time takes Accumulator's). Where there is none, a GraphError names
    the pass and the kind."""
    for cls in type(kind).__mro__:
        if cls in table:
            return table[cls]
    raise GraphError(f"{pass_name} has no rule for node kind {kind.name!r} ({type(kind).__name__})")


@dataclass(frozen=True)
class Schedule:
    """Where each node of a block graph runs: BEFORE the loop (once per block), INSIDE it (every iteration)
    or AFTER it. An accumulator is AFTER (its value exists after the loop); it starts before the loop and
    its update runs at the end of every iteration. With a loop of one, nothing is INSIDE."""

    looped: bool
    places: tuple[str, ...]

    def __getitem__(self, i: int) -> str:
        return self.places[i]

    def at(self, place: str) -> list[int]:
        """The nodes placed at `place`, in topological order."""
        return [i for i, p in enumerate(self.places) if p == place]


def schedule(block: Any) -> Schedule:
    """Place every node of `block` (a BlockGraph) by its kind, in one pass over its nodes."""
    looped = block.loop > 1
    places: list[str] = []
    for node in block.nodes:
        places.append(kind_of(node).place(node, [places[r[0]] for r in node.inputs], looped))
    return Schedule(looped, tuple(places))
