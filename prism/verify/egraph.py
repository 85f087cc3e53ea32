"""Equivalence checking of two verification expressions by equality saturation on egglog.

Both sides are added to one e-graph that already holds the rules; rules run one iteration at a time
until the two sides share an e-class, the e-graph saturates (nothing more follows: not provably
equal), or a cap on iterations, nodes or time is hit. Loading the rules costs ~10 ms, so each thread
keeps one e-graph per rule set and brackets every check in push/pop; since pop does not give back all
memory, the e-graph is rebuilt every RECREATE_EVERY checks. egglog starts a thread pool on import: use
spawn or forkserver worker processes, never fork after importing this module.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from egglog import bindings

from prism.errors import VerificationError
from prism.verify.axioms import Rule, rules
from prism.verify.expr import OPS, Term, pdims_of

__all__ = ["CheckResult", "check", "program", "RECREATE_EVERY"]

RECREATE_EVERY = 100
_SORTS = {"dim": "i64", "pdim": "String", "const": "f64", "name": "String"}


class CheckResult(NamedTuple):
    """equal: proven equal. reason: why the check stopped. stats: iterations, nodes, ms, rules."""

    equal: bool
    reason: str
    stats: dict


def program(rule_list: list[Rule]) -> str:
    """The egglog program declaring the term sort (from the op table) and the rules."""
    ctors = " ".join(
        f"({o.egg} {' '.join(['Term'] * o.arity + [_SORTS[k] for k in o.attrs])})" for o in OPS.values())
    return f"(datatype Term {ctors})\n" + "\n".join(r.egglog() for r in rule_list)


class _EGraph:
    """One egglog e-graph with a rule set loaded, and the parsed commands a check reuses."""

    def __init__(self, text: str, n_rules: int) -> None:
        self.eg = bindings.EGraph()
        self.eg.run_program(*self.eg.parse_program(text))
        self.n_rules = n_rules
        self.checks = 0
        self.push = self.eg.parse_program("(push)")
        self.pop = self.eg.parse_program("(pop)")
        self.run1 = self.eg.parse_program("(run 1)")
        self.same = self.eg.parse_program("(check (= $l $r))")
        self.size = self.eg.parse_program("(print-size)")

    def equal(self) -> bool:
        try:
            self.eg.run_program(*self.same)
            return True
        except bindings.EggSmolError:
            return False

    def nodes(self) -> int:
        (out,) = self.eg.run_program(*self.size)
        return sum(n for _, n in out.sizes)


_local = threading.local()


def _egraph(max_pdims: int, shortcuts: bool) -> _EGraph:
    cache: dict = getattr(_local, "cache", None) or {}
    _local.cache = cache
    key = (max_pdims, shortcuts) if shortcuts else (0, False)  # the base rules do not depend on depth
    eg = cache.get(key)
    if eg is None or eg.checks >= RECREATE_EVERY:
        rs = rules(max_pdims, shortcuts=shortcuts)
        eg = cache[key] = _EGraph(program(rs), len(rs))
    return eg


def check(lhs: Term, rhs: Term, *, max_iters: int = 40, max_nodes: int = 50_000, timeout: float = 2.0,
          max_pdims: int | None = None, shortcuts: bool = False) -> CheckResult:
    """Is lhs = rhs derivable from the axioms? Never a false yes; a no may just mean "not found".

    The rules are instantiated for `max_pdims` parallel dims (default: those in the two terms).
    """
    if not isinstance(lhs, Term) or not isinstance(rhs, Term):
        raise VerificationError("check takes two expr.Term values")
    if max_pdims is None:
        max_pdims = len(pdims_of(lhs) | pdims_of(rhs))
    start = time.perf_counter()
    eg = _egraph(max_pdims, shortcuts)
    eg.checks += 1
    eg.eg.run_program(*eg.push)
    try:
        eg.eg.run_program(*eg.eg.parse_program(f"(let $l {lhs.text})\n(let $r {rhs.text})"))
        iters, reason, nodes = 0, "", 0
        while True:
            if eg.equal():
                reason = "equal"
                break
            if iters >= max_iters:
                reason = f"not proven: iteration cap {max_iters}"
                break
            if time.perf_counter() - start > timeout:
                reason = f"not proven: time cap {timeout}s"
                break
            (out,) = eg.eg.run_program(*eg.run1)
            iters += 1
            nodes = eg.nodes()
            if not out.report.updated:
                reason = "equal" if eg.equal() else "not equal under the axioms: saturated"
                break
            if nodes > max_nodes:
                reason = "equal" if eg.equal() else f"not proven: node cap {max_nodes} ({nodes} nodes)"
                break
    finally:
        eg.eg.run_program(*eg.pop)
    stats = {"iterations": iters, "nodes": nodes, "ms": (time.perf_counter() - start) * 1e3,
             "rules": eg.n_rules}
    return CheckResult(reason == "equal", reason, stats)
