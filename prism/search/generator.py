"""sGraph generation (paper §3.1–3.3): enumerate block-graph structures with symbolic maps.

A state is an immutable `Draft` (one loader per kernel input, then block ops). From a state the
generator appends one op at a time from the target's vocabulary (every (op, attrs) in the closure:
matmul, unary, binary, sum(dim), mul_scalar/add_scalar with the target's constants, rms_norm) or an
accumulator (a sum; a max or a running max of a max; the online sum of what a running max scales), in
canonical order (each op's `BOp.key` above the previous op's, so a DAG is built in
one order only). Candidates are built from the closure's parent index, so only ops whose d_p = 1
term is a subterm of the target's closure exist (the expression check, §3.3); then the loop phase
and dimension matching (§3.2) are checked.
A state is emitted when its consumer-less tensors are post-loop, at most `max_outputs`, each a
subterm of the target, and either one of them is a whole form of the target or a few kernel-level
elementwise ops over them complete it (decode attention: numerator and denominator, then a div).
A state is dropped when it cannot finish within the op budget (`_hopeless`, an admissible bound).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from prism.ir.kinds import ONLINE
from prism.ir.ops import OPS, REDUCE, RUNNING, SCALED, contracts
from prism.search.concrete import Modes, omap_choices
from prism.symbolic.closure import Target, vocabulary_ops
from prism.symbolic.dims import UNIT
from prism.symbolic.draft import ACCUM_OP, RUNNING_MAX_OP, BOp, Draft, Labels, match_binary
from prism.symbolic.structure import Structure
from prism.symbolic.terms import Term, mk, op_of, subterms

__all__ = ["KERNEL_OPS", "Generator", "Limits", "Modes", "Structure", "chained_contraction", "default_kernel_ops",
           "default_max_ops", "epilogue_operand"]


KERNEL_OPS = 3
"""Kernel-level element-wise ops after the fused kernel for a target that divides a contraction by the root of a
reduction (`default_kernel_ops`): split across blocks, its kernel sums X @ W and sum(X²)/d there, and eps, sqrt
and the division can only come after. A chain of them runs as one kernel (prism.codegen.one_op)."""


def default_kernel_ops(target: Target) -> int:
    """KERNEL_OPS where some whole form of the target is an element-wise op of a contraction and a non-linear
    function of a reduction (a norm applied after its projection: rms_norm(X) @ W = (X @ W) / sqrt(sum(X²)/d + eps)),
    else 1. A split of the reduction's dim can then sum only the reduction across blocks (the function of a sum is
    not the sum of the function), so the function's ops and the combining op come after the kernel. Elsewhere
    more kernel-level ops found no new graph and cost generation work (GPT-2's GELU regions, through
    `examples/hf_decode.py`)."""
    def elementwise(t: Term, arity: int) -> bool:
        return op_of(t) in OPS and OPS[op_of(t)].family.elementwise and OPS[op_of(t)].arity == arity

    def after_reduction(t: Term) -> bool:
        """Whether t is unary element-wise ops, one of them not linear, over a reduction."""
        linear = True
        while elementwise(t, 1):
            linear, t = linear and OPS[op_of(t)].linear, t[2]
        return not linear and op_of(t) in OPS and OPS[op_of(t)].family is REDUCE

    def norm_after(r: Term) -> bool:
        return elementwise(r, 2) and any(contracts(op_of(s)) for s in subterms(r[2]) if op_of(s) in OPS) and \
            after_reduction(r[3])
    return KERNEL_OPS if any(norm_after(r) for r in target.roots) else 1


@dataclass(frozen=True)
class Limits:
    """Search limits. `max_block_ops` counts loaders; None picks `default_max_ops(target)`, as None for
    `max_kernel_ops` picks `default_kernel_ops(target)`."""

    max_block_ops: int | None = None
    max_accums: int = 3
    max_outputs: int = 2
    max_kernel_ops: int | None = None
    max_grid: int = 3
    time_limit: float = 3600.0


def default_max_ops(target: Target, max_accums: int = 3, floor: int = 11) -> int:
    """Room for the smallest whole form of the target that needs no composite op (an rms_norm over a
    loop-split dim cannot fuse; the closure also holds its decomposition), its accumulators, and one
    more op (fused forms often duplicate one, like a normalisation applied to each of two accumulated
    products); at least `floor`."""
    n_in = len(target.space.shapes)
    sizes = [len({s for s in subterms(r) if op_of(s) != "in"}) for r in target.roots
             if not any(op_of(s) != "in" and OPS[op_of(s)].term is None for s in subterms(r))]
    return max(floor, n_in + (min(sizes) if sizes else 0) + max_accums + 1)


def chained_contraction(target: Target) -> bool:
    """Whether some whole form of the target multiplies a matmul's result straight into another matmul
    ((X @ A) @ B in LoRA): the program a loop-invariant loader serves, its tile meeting the first product
    once it is accumulated, after the loop. Elsewhere the generator leaves that move out: allowed
    everywhere, it about doubled QK-Attention's generation (measured while developing it: 268k to 504k
    states at the tests' size) for forms no faster than those it already finds."""
    return any(contracts(op_of(t)) and any(contracts(op_of(c)) for c in t[2:]) for t in target.subterms)


def epilogue_operand(target: Target) -> bool:
    """Whether some whole form of the target is an element-wise op of a contraction and a tensor computed
    element-wise from inputs (a residual or a bias added to a projection: r + X @ W): with the contraction's dim
    split by the loop, that tensor's loop-invariant loader meets the accumulated product after the loop, the
    one form of such a program with a loop (inputs accumulated by the loop would be added once per
    iteration). Only whole forms: an element-wise op inside a later contraction (attention's mask) needs none."""
    def elementwise(t: Term) -> bool:
        return all(op_of(s) == "in" or OPS[op_of(s)].family.elementwise for s in subterms(t))
    return any(op_of(r) in OPS and OPS[op_of(r)].family.elementwise and OPS[op_of(r)].arity == 2
               and any(contracts(op_of(x)) for x in r[2:]) and any(elementwise(x) for x in r[2:])
               for r in target.roots)


PAIRS_KEPT = 1 << 18
"""Sequences of chains whose pair bound `Generator._hopeless` keeps at most (tens of MB)."""


@dataclass
class Generator:
    """Depth-first structure enumeration for one target; `stats` counts what it saw and pruned."""

    target: Target
    limits: Limits
    deadline: float = float("inf")
    stats: Counter = field(default_factory=Counter)
    modes: Modes | None = None

    def __post_init__(self) -> None:
        self.vocab = vocabulary_ops(self.target)
        self.max_ops = self.limits.max_block_ops or default_max_ops(self.target, self.limits.max_accums)
        self.max_kernel_ops = self.limits.max_kernel_ops or default_kernel_ops(self.target)
        self.max_outputs = min(self.limits.max_outputs, self.max_kernel_ops + 1)
        self.kernel_vocab = [(o, a) for o, a in self.vocab if OPS[o].family.elementwise]
        self.parents: dict[Term, list[Term]] = {}
        for t in sorted(self.target.subterms, key=repr):
            for c in set(t[2:]):
                self.parents.setdefault(c, []).append(t)
        self.index = {t: k for k, t in enumerate(self.target.subterms)}
        """Subterm -> number: the bound's tables are keyed by these (hashing a deep term costs its size)."""
        self.made_from = [[(self.index[p], p, tuple(self.index[c] for c in p[2:])) for p in self.parents.get(t, ())]
                          for t in self.index]
        """Per subterm: the terms with it as an operand (number, term, its operands' numbers)."""
        self.kernel_operand_of: dict[int, list[int]] = {}
        """Per term a block output may have: the roots it may become (itself, or an operand of up to
        `max_kernel_ops` kernel-level elementwise ops above that root)."""
        kernel_ops = {o for o, _ in self.kernel_vocab}
        for r in self.target.roots:
            cone = frontier = {r}
            for _ in range(self.max_kernel_ops):
                frontier = {c for t in frontier if t[0] in kernel_ops for c in t[2:]}
                cone = cone | frontier
            for t in cone:
                self.kernel_operand_of.setdefault(self.index[t], []).append(self.index[r])
        self.distance = self._distances()
        self.distance_by_pair = [min((self.distance[p] + 1 for p, _, operands in made if len(operands) == 2
                                      and p in self.distance), default=float("inf")) for made in self.made_from]
        """Per subterm: the fewest ops from it up to a term a block output may have whose first op takes it with
        another operand (a tensor the canonical order has passed can no longer take a one-input op: `_hopeless`)."""
        self._ups: dict[int, dict[int, int]] = {}
        self._nears: dict[int, dict[int, int]] = {}
        self._joint: dict[tuple[int, int], tuple[float, float]] = {}
        self._pairs: dict[tuple[tuple[int, bool], ...], float] = {}
        """Per sequence of consumer-less chains (subterm, needs an accumulator): the most ops a pair of them needs
        (`_hopeless`: many states have the same sequence; emptied at PAIRS_KEPT entries, to bound its memory)."""
        self._n_structural: dict[tuple[Any, ...], int] = {}
        """How many accumulators and running maxes may take a loop tensor, per what decides it (`_structural`)."""
        self.operand_kinds: Counter = Counter()
        """The vocabulary by how its ops pick operands: "unary"; "pairwise" (elementwise binary: two different
        tensors, counted twice unless commutative); "ordered" (a matmul: any two tensors, in order)."""
        for op, _ in self.vocab:
            d = OPS[op]
            kind = "unary" if d.arity == 1 else "pairwise" if d.family.elementwise else "ordered"
            self.operand_kinds[kind] += 2 if kind == "pairwise" and not d.commutative else 1

    def _distances(self) -> dict[int, int]:
        """Fewest ops from each subterm up to a term a block output may have (`kernel_operand_of`)."""
        dist = dict.fromkeys(self.kernel_operand_of, 0)
        order = sorted(self.index.items(), key=lambda tk: -len(repr(tk[0])))
        changed = True
        while changed:
            changed = False
            for _, k in order:
                best = min((dist[p] + 1 for p, _, _ in self.made_from[k] if p in dist), default=None)
                if best is not None and best < dist.get(k, best + 1):
                    dist[k] = best
                    changed = True
        return dist

    def _up(self, k: int) -> dict[int, int]:
        """The subterms above subterm k (k included), each with the fewest parent steps from k."""
        if k not in self._ups:
            seen, frontier, n = {k: 0}, [k], 0
            while frontier:
                n += 1
                frontier = [p for c in frontier for p, _, _ in self.made_from[c] if p not in seen]
                for p in frontier:
                    seen.setdefault(p, n)
            self._ups[k] = seen
        return self._ups[k]

    def _near(self, k: int) -> dict[int, int]:
        """Per root: the fewest parent steps from subterm k to a term that root's kernel-level ops take."""
        if k not in self._nears:
            near: dict[int, int] = {}
            for x, n in self._up(k).items():
                for r in self.kernel_operand_of.get(x, ()):
                    near[r] = min(n, near.get(r, n))
            self._nears[k] = near
        return self._nears[k]

    def joint(self, a: int, b: int) -> tuple[float, float]:
        """The fewest ops that finish chains from both subterms a and b, (apart, met); inf: no way.
        Apart: each climbs to a term that one root's kernel-level ops take together with the other's
        (two block outputs feed one value). Met: the chains first meet at an op computing a common
        ancestor c (steps(a, c) + steps(b, c) - 1 + distance(c), the meeting op counted once)."""
        if (a, b) not in self._joint:
            near_a, near_b, up_b = self._near(a), self._near(b), self._up(b)
            apart = min((n + near_b[r] for r, n in near_a.items() if r in near_b), default=float("inf"))
            met = min((n + up_b[c] - 1 + self.distance[c] for c, n in self._up(a).items()
                       if n and up_b.get(c) and c in self.distance), default=float("inf"))
            self._joint[a, b] = (apart, met)
        return self._joint[a, b]

    def start(self, labels: Labels | None = None) -> Draft:
        return Draft.start(self.target.space, labels,
                            pinning=chained_contraction(self.target) or epilogue_operand(self.target))

    # -- the search ----------------------------------------------------------------------------

    def run(self, state: Draft) -> Iterator[Structure]:
        """Every structure reachable from `state` (depth first, canonical order)."""
        found, _ = self.explore([state])
        yield from found

    def explore(self, stack: list[Draft], budget: float = float("inf")) -> tuple[list[Structure], list[Draft]]:
        """Depth first from `stack` (its last state first) for at most `budget` states; returns what
        was emitted and the states left unexplored (empty when done or past the deadline)."""
        stack = list(stack)
        found: list[Structure] = []
        done = 0
        while stack and done < budget:
            if time.time() > self.deadline:
                self.stats["timed_out"] = 1
                return found, []
            s = stack.pop()
            f, children = self.expand(s)
            found.extend(f)
            stack.extend(reversed(children))
            done += 1
        return found, stack

    def expand(self, state: Draft) -> tuple[list[Structure], list[Draft]]:
        """The structures `state` emits, and its children (the states one op further)."""
        self.stats["states"] += 1
        found = list(self.emit(state))
        self.stats["emitted"] += len(found)
        if len(state.ops) >= self.max_ops:
            return found, []
        children = []
        for bop, term in self.candidates(state):
            child = state.extend(bop, term)
            if isinstance(child, str):
                self.stats[f"pruned_{child}"] += 1
                continue
            if self._hopeless(child):
                self.stats["pruned_budget"] += 1
                continue
            children.append(child)
        return found, children

    def _hopeless(self, s: Draft) -> bool:
        """No way to finish within the op budget (an admissible bound: it never drops a state that
        has a finished descendant; tests/search/test_search_generator.py).

        Every op lowers the consumer-less count by at most one. A consumer-less tensor needs a fresh
        chain of ops up to an output-able term (one more, an accum, if it is inside the loop), since
        outputs are post-loop and nothing is dead; its ops climb the target's terms one parent at a time
        (every op's term is a subterm, accumulators keep their input's), so a chain from term t to u has at
        least steps(t, u) ops. Two consumer-less tensors need both chains: apart, each to an output that
        one kernel-level op combines with the other's; or meeting at a first shared op, whose ops before
        it are disjoint (`joint`). Each chain from inside the loop holds an accumulator of its own, but
        two chains that meet inside the loop may share one. A running max is left out of the pairs: the
        online accumulator that takes it computes no parent of its term.

        The canonical order bounds a chain too: every later op's newest input is at or after `lo`, the newest
        input of the last op (`candidates`). A consumer-less tensor before `lo` that must be consumed (its
        chain needs an op) can no longer take a one-input op (a unary op, an accumulator); its chain's first
        op takes it with another operand, a tensor at or after `lo` or a new one (`distance_by_pair`). A
        tensor with a running-max state is left out: the online accumulator takes it with the running max.
        Pruned so, a state also counts as `pruned_late` (RMSNorm-MLP at a Llama layer's shapes: half its states)."""
        left = self.max_ops - len(s.ops)
        unused = [i for i, u in enumerate(s.uses) if u == 0]
        if len(unused) - left > self.max_outputs:
            return True
        late = s.pinning and any(s.post)   # a loop-invariant tensor can meet a post-loop one, no accumulator needed
        extra = {i: not s.post[i] and not (late and s.inv[i] is not None) for i in unused}
        ids = {i: self.index.get(s.terms[i]) for i in unused}
        own = {i: self.distance.get(ids[i], left + 1) + extra[i] for i in unused}
        if max(own.values(), default=0) > left:
            return True
        lo = max(s.ops[-1].inputs) if len(s.ops) > s.n_loaders else 0
        if any(own[i] and s.scale[i] is None and self.distance_by_pair[ids[i]] + extra[i] > left
               for i in unused if i < lo):
            self.stats["pruned_late"] += 1
            return True
        chains = tuple((ids[i], extra[i]) for i in unused if s.scale[i] != (RUNNING, i))
        worst = self._pairs.get(chains)
        if worst is None:
            if len(self._pairs) >= PAIRS_KEPT:
                self._pairs.clear()
            worst = self._pairs[chains] = max((self._pair(a, b) for k, a in enumerate(chains) for b in chains[k + 1:]),
                                              default=float("-inf"))
        return worst > left

    def _pair(self, a: tuple[int, bool], b: tuple[int, bool]) -> float:
        """The fewest ops that finish chains from both (subterm, needs an accumulator) a and b (`_hopeless`)."""
        (ta, ea), (tb, eb) = a, b
        apart, met = self.joint(ta, tb)
        return min(apart + ea + eb, met + (ea or eb))

    def candidates(self, s: Draft) -> Iterator[tuple[BOp, Term]]:
        """Ops that may follow `s` in canonical order and pass the expression check, with their terms.

        Only ops whose newest input is at or after the previous op's newest input `lo` can follow it
        in canonical order; the rest are counted as `pruned_order` without being built. Among those,
        ops are built from the closure's parent index (only the ones whose term is a subterm), and the
        others are counted as `pruned_expr`.
        """
        n = len(s.ops)
        last = s.ops[-1].key() if n > s.n_loaders else None
        lo = last[0][0] if last is not None else 0
        structural = {i: self._structural(s, i) for i in range(lo, n)}
        window = self._syntactic(n, lo) + sum(len(b) for b in structural.values())
        self.stats["pruned_order"] += (self._syntactic(n, 0) - self._syntactic(n, lo)
                                       + sum(self._structural_count(s, i) for i in range(lo)))
        built = 0
        ids = [self.index.get(t) for t in s.terms]
        by_id: dict[int | None, list[int]] = {}
        for i, k in enumerate(ids):
            by_id.setdefault(k, []).append(i)
        for i in range(lo, n):
            ops = [(bop, s.terms[i]) for bop in structural[i]]
            for _, parent, operands in self.made_from[ids[i]] if ids[i] is not None else ():
                ops.extend(self._instances(parent, operands, i, by_id))
            for bop, term in ops:
                built += 1
                if last is not None and max(bop.inputs) <= lo and bop.key() <= last:  # a newer input: after it
                    self.stats["pruned_order"] += 1
                    continue
                yield bop, term
        self.stats["pruned_expr"] += window - built

    def _instances(self, parent: Term, operands: tuple[int, ...], i: int,
                   by_id: dict[int | None, list[int]]) -> Iterator[tuple[BOp, Term]]:
        """BOps computing `parent` (its operands' subterm numbers given) whose newest input is tensor i
        (each exactly once); `by_id` lists the tensors of each subterm."""
        op, attrs = parent[0], parent[1]
        if len(operands) == 1:
            yield BOp(op, (i,), attrs), parent
            return
        a, b = operands
        options_a = [j for j in by_id.get(a, ()) if j <= i]
        options_b = [j for j in by_id.get(b, ()) if j <= i]
        seen = set()
        for x in options_a:
            for y in options_b:
                if max(x, y) != i or (x == y and OPS[op].family.elementwise):  # mul(x, x) is square(x)
                    continue
                ins = (min(x, y), max(x, y)) if OPS[op].commutative else (x, y)
                if ins not in seen:
                    seen.add(ins)
                    yield BOp(op, ins, attrs), parent

    def _syntactic(self, n: int, lo: int) -> int:
        """How many table ops of the vocabulary over n tensors have their newest input at index >= lo (what
        the stats count as pruned by the canonical order or the expression check; accumulators aside)."""
        def pairs(k: int) -> int:
            return k * (k - 1) // 2
        c = self.operand_kinds
        return c["unary"] * (n - lo) + c["pairwise"] * (pairs(n) - pairs(lo)) + c["ordered"] * (n * n - lo * lo)

    def _structural_count(self, s: Draft, i: int) -> int:
        """len(self._structural(s, i)), from what decides it, without building the ops."""
        state = s.scale[i]
        key = (s.post[i], state and state[0], op_of(s.terms[i]), s.n_accums < self.limits.max_accums)
        if key not in self._n_structural:
            self._n_structural[key] = len(self._structural(s, i))
        return self._n_structural[key]

    def _structural(self, s: Draft, i: int) -> list[BOp]:
        """The accumulators and running max that may take loop tensor i (their term is i's): a sum of a
        value independent of every running max, and the accumulator of the op computing it (OpDef.accumulator: a
        max's), a running max of a bound (OpDef.online: a max), an online sum of a value scaled by a running max
        r (prism.ir.kinds.scaling)."""
        if s.post[i]:
            return []
        state, d = s.scale[i], OPS.get(op_of(s.terms[i]))
        own = d.accumulator if d is not None and d.accumulator != ACCUM_OP else None
        out = []
        if s.n_accums < self.limits.max_accums:
            if state is None:
                out += [BOp(ACCUM_OP, (i,))] + ([BOp(own, (i,))] if own else [])
            elif state[0] == SCALED:
                out.append(BOp(ONLINE.name, (i, state[1])))
        if d is not None and d.online.bound and state is None:
            out.append(BOp(RUNNING_MAX_OP, (i,)))
        return out

    # -- emission ------------------------------------------------------------------------------

    def emit(self, s: Draft) -> Iterator[Structure]:
        """The structures `s` completes: its consumer-less tensors saved, plus kernel-level ops."""
        outs = tuple(i for i, u in enumerate(s.uses) if u == 0)
        if not 1 <= len(outs) <= self.max_outputs or not all(s.post[i] for i in outs):
            return
        if any(s.terms[i] not in self.target.subterms for i in outs):
            return
        terms = [s.terms[i] for i in outs]
        dims = [s.dims[i] for i in outs]
        for kops in self._combine(s, terms, dims, [0] * len(outs), ()):
            if self.modes is None or self.modes.omap:
                yield Structure(s, outs, kops)
            else:
                for rows in omap_choices(s, outs, self.limits.max_grid):
                    yield Structure(s, outs, kops, rows)

    def _combine(self, s: Draft, terms: list[Term], dims: list[tuple[int, ...]], uses: list[int],
                 kops: tuple[BOp, ...]) -> Iterator[tuple[BOp, ...]]:
        """Kernel-level elementwise ops over the saved tensors that complete the target (canonical
        order, each op's term a subterm, full shapes matching), ending with one value left."""
        free = [i for i, u in enumerate(uses) if u == 0]
        if len(free) == 1 and terms[free[0]] in self.target.roots and \
                _full_shape(dims[free[0]], s) == _full_shape(self.target.shape(), s):
            yield kops
        if len(kops) >= self.max_kernel_ops:
            return
        last = kops[-1].key() if kops else None
        n = len(terms)
        for op, attrs in self.kernel_vocab:
            pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if OPS[op].arity == 2 else \
                [(i,) for i in range(n)]
            for ins in pairs:
                bop = BOp(op, ins, attrs)
                if (last is not None and bop.key() <= last) or (OPS[op].commutative and ins[0] > ins[1]):
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
                yield from self._combine(s, terms + [term], dims + [d], u + [0], kops + (bop,))


def _full_shape(dims: Sequence[int], s: Draft) -> tuple[int, ...]:
    return tuple(1 if a == UNIT else s.space.extent(a) for a in dims)
