"""Equivalence checking of verification expressions by equality saturation on egglog (text interface).

Both sides are added to one e-graph that already holds the rules; the rules run a few iterations at a
time until the two sides share an e-class, the e-graph saturates (nothing more follows: not provably
equal), or a cap on iterations, nodes or time is hit. Loading the rules costs tens of ms, so each
thread keeps one e-graph per rule set and brackets every check in push/pop, which makes checks
independent and deterministic; since pop does not give back all memory, the e-graph is rebuilt every
RECREATE_EVERY checks. egglog starts a thread pool on import: use spawn or forkserver worker processes,
never fork after importing this module, and send terms to workers as text (`expr.parse`).
"""

from __future__ import annotations

import threading
import time
from typing import Iterator, NamedTuple, Sequence

from egglog import bindings

from prism.errors import VerificationError
from prism.verify.axioms import Rule, rules
from prism.ir.ops import revision
from prism.verify.expr import TERMS, Term, pdims_of

__all__ = ["CheckResult", "check", "check_all", "check_batch", "program", "egglog_rules", "RECREATE_EVERY"]

RECREATE_EVERY = 50  # pop leaves residue: a check gets ~0.1 ms slower every 10 checks; a rebuild costs ~12 ms
BATCH_CAPS = ("not proven: node cap", "not proven: time cap")
"""How check_all's reasons start where a batch stopped for all its candidates at once (its size, the clock)."""
_SORTS = {"dim": "i64", "pdim": "String", "const": "f64", "name": "String", "shape": "String"}


class CheckResult(NamedTuple):
    """equal: proven equal. reason: why the check stopped. stats: iterations, nodes, ms, rules."""

    equal: bool
    reason: str
    stats: dict


def program(rule_list: list[Rule]) -> str:
    """The egglog program declaring the term sort (from the term language) and the rules."""
    ctors = dict.fromkeys(
        f"({o.egg} {' '.join(['String'] * o.family + ['Term'] * o.arity + [_SORTS[k] for k in o.attrs])})"
        for o in TERMS.values())
    return f"(datatype Term {' '.join(ctors)})\n" + "\n".join(dict.fromkeys(egglog_rules(rule_list)))


def egglog_rules(rule_list: list[Rule]) -> Iterator[str]:
    """Rules as egglog text; a rule stated for every op of a family becomes one rule over the family.

    Rules with the same `family_key` whose ops cover a whole egglog family constructor are emitted once,
    with the op name a pattern variable; a rule about some of a family's ops keeps its literal.
    """
    groups: dict[str, list[Rule]] = {}
    for r in rule_list:
        groups.setdefault(r.family_key(), []).append(r)
    for key, members in groups.items():
        family = {o.name for o in TERMS.values() if key and o.egg == TERMS[members[0].op].egg}
        if key and len(members) > 1 and {m.op for m in members} == family:
            yield key
        else:
            yield from (m.egglog() for m in members)


class _EGraph:
    """One egglog e-graph with a rule set loaded, and the parsed commands a check reuses."""

    def __init__(self, text: str) -> None:
        self.eg = bindings.EGraph()
        self.eg.run_program(*self.eg.parse_program(text))
        self.n_rules = text.count("(rewrite ") + 2 * text.count("(birewrite ")  # as egglog counts them
        self.checks = 0
        self.push = self.eg.parse_program("(push)")
        self.pop = self.eg.parse_program("(pop)")
        self._cmds: dict[tuple, list] = {}
        self.size = self.eg.parse_program("(print-size)")

    def runs(self, n: int, until: bool) -> list:
        """Parsed `(run n)`, stopping early once $l = $r if `until`."""
        cmd = self._cmds.get((n, until))
        if cmd is None:
            text = f"(run {n} :until (= $l $r))" if until else f"(run {n})"
            cmd = self._cmds[(n, until)] = self.eg.parse_program(text)
        return cmd

    def equal(self, x: str, y: str) -> bool:
        """Are the globals x and y in one e-class?"""
        cmd = self._cmds.get((x, y))
        if cmd is None:
            cmd = self._cmds[(x, y)] = self.eg.parse_program(f"(check (= {x} {y}))")
        try:
            self.eg.run_program(*cmd)
            return True
        except bindings.EggSmolError:
            return False

    def nodes(self) -> int:
        (out,) = self.eg.run_program(*self.size)
        return sum(n for _, n in out.sizes)


_local = threading.local()


def _egraph(max_pdims: int, shortcuts: bool) -> _EGraph:
    if getattr(_local, "revision", None) != revision():  # the tables or the axioms changed: so may the rules
        _local.cache, _local.revision = {}, revision()
    cache: dict = _local.cache
    key = (max_pdims, shortcuts) if shortcuts else (0, False)  # the base rules do not depend on depth
    eg = cache.get(key)
    if eg is None or eg.checks >= RECREATE_EVERY:
        eg = cache[key] = _EGraph(program(rules(max_pdims, shortcuts=shortcuts)))
    return eg


def check(lhs: Term, rhs: Term, *, max_iters: int = 40, max_nodes: int = 50_000, timeout: float = 2.0,
          max_pdims: int | None = None, shortcuts: bool = False, step: int = 8) -> CheckResult:
    """Is lhs = rhs derivable from the axioms? Never a false yes; a no may just mean "not found".

    The rules are instantiated for `max_pdims` parallel dims (default: those in the two terms). Caps
    are checked every `step` iterations (egglog stops a step early once the sides are equal), so a
    check may run up to step - 1 iterations past a node or time cap.
    """
    return check_all(lhs, [rhs], max_iters=max_iters, max_nodes=max_nodes, timeout=timeout,
                     max_pdims=max_pdims, shortcuts=shortcuts, step=step)[0]


def check_all(reference: Term, candidates: Sequence[Term], *, max_iters: int = 40, max_nodes: int = 50_000,
              timeout: float = 2.0, max_pdims: int | None = None, shortcuts: bool = False,
              step: int = 8) -> list[CheckResult]:
    """Check many candidates against one reference in one e-graph run.

    Rewriting is sound, so candidates in one e-graph cannot make each other falsely equal; sharing it
    shares the fixed costs (push/pop, one iteration over all rules) that dominate a single small check.
    The caps are for the whole batch: a candidate that blows up the e-graph stops the others too.
    """
    terms = [reference, *candidates]
    for t in terms:
        if not isinstance(t, Term) or t.type is None:
            raise VerificationError(f"check takes typed terms (no pattern variables, every input Var with its "
                                    f"shape), got {t!r}")
    if not candidates:
        return []
    # a rewrite keeps a term's type, so terms of different types are never equal: no e-graph work for them
    mistyped = {i: f"not equal: {reference.type} vs {c.type}" for i, c in enumerate(candidates)
                if c.type != reference.type}
    if len(mistyped) == len(candidates):
        return [CheckResult(False, mistyped[i], {"iterations": 0, "nodes": 0, "ms": 0.0, "rules": 0,
                                                 "batch": len(candidates)}) for i in range(len(candidates))]
    if max_pdims is None:
        max_pdims = len(set().union(*(pdims_of(t) for t in terms)))
    start = time.perf_counter()
    eg = _egraph(max_pdims, shortcuts)
    eg.checks += 1
    eg.eg.run_program(*eg.push)
    names = ["$l"] + (["$r"] if len(candidates) == 1 else [f"$c{i}" for i in range(len(candidates))])
    open_ = [i for i in range(len(candidates)) if i not in mistyped]
    done: dict[int, int] = {}  # candidate -> iterations it took
    iters, nodes, reason = 0, 0, ""
    try:
        eg.eg.run_program(*eg.eg.parse_program("\n".join(f"(let {n} {t.text})" for n, t in zip(names, terms))))
        while True:
            for i in list(open_):
                if eg.equal(names[0], names[i + 1]):
                    done[i] = iters
                    open_.remove(i)
            if not open_:
                break
            if iters >= max_iters:
                reason = f"not proven: iteration cap {max_iters}"
                break
            if time.perf_counter() - start > timeout:
                reason = f"{BATCH_CAPS[1]} {timeout}s"
                break
            (out,) = eg.eg.run_program(*eg.runs(min(step, max_iters - iters), until=len(candidates) == 1))
            iters += len(out.report.iterations)
            nodes = eg.nodes()
            if not out.report.updated:
                reason = "not equal under the axioms: saturated"
            elif nodes > max_nodes:
                reason = f"{BATCH_CAPS[0]} {max_nodes} ({nodes} nodes)"
            if reason:
                done.update({i: iters for i in open_ if eg.equal(names[0], names[i + 1])})
                break
    except bindings.EggSmolError as err:  # a term egglog cannot read: a bug here, not a "no"
        raise VerificationError(f"egglog rejected the check: {err}") from err
    finally:
        eg.eg.run_program(*eg.pop)
    ms = (time.perf_counter() - start) * 1e3
    return [CheckResult(i in done, "equal" if i in done else mistyped.get(i, reason),
                        {"iterations": done.get(i, iters), "nodes": nodes, "ms": ms, "rules": eg.n_rules,
                         "batch": len(candidates)})
            for i in range(len(candidates))]


def check_batch(reference: Term, candidates: Sequence[Term], *, max_iters: int = 40, max_nodes: int = 50_000,
                timeout: float = 2.0, max_pdims: int | None = None, shortcuts: bool = False,
                step: int = 8) -> list[CheckResult]:
    """`check` of each candidate against `reference` (same caps), most of them in one check_all run.

    A candidate the batch proves equal, or leaves unproven once it saturates or reaches max_iters, keeps
    that answer: after k iterations the batch's e-graph holds everything the candidate's own e-graph
    would (rewriting only adds), so `check` could not prove it either. A candidate left open when the
    batch hits its node cap (max_nodes per candidate) or its time cap (`timeout`, as for one check) is
    checked again alone, so batching never turns a proof `check` finds into "not proven". (The other
    way, a batch may prove a candidate that `check` would leave at a cap, through terms another
    candidate brought; rewriting is sound, so such a proof holds all the same.) With `shortcuts` the
    rules depend on the parallel dims, so candidates are batched by the count `check` would use.
    """
    caps = {"max_iters": max_iters, "timeout": timeout, "shortcuts": shortcuts, "step": step}
    groups: dict[int | None, list[int]] = {}
    for i, c in enumerate(candidates):
        depth = max_pdims if max_pdims is not None or not shortcuts else len(pdims_of(reference) | pdims_of(c))
        groups.setdefault(depth, []).append(i)
    out: list[CheckResult] = [None] * len(candidates)  # type: ignore[list-item]
    for depth, members in groups.items():
        batch = check_all(reference, [candidates[i] for i in members], max_nodes=max_nodes * len(members),
                          max_pdims=depth, **caps)
        for i, r in zip(members, batch):
            again = not r.equal and r.reason.startswith(BATCH_CAPS) and len(members) > 1
            out[i] = check(reference, candidates[i], max_nodes=max_nodes, max_pdims=depth, **caps) if again else r
    return out
