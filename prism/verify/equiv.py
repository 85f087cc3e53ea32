"""`equivalent(reference, candidate)`: does a candidate compute the same function for all parallel sizes?

Both kernel graphs are encoded as part/comb/red/repl terms (prism.verify.encode) and each pair of
outputs is checked on the e-graph (prism.verify.egraph). Concrete grid sizes and loop ranges are never
looked at, so an accepted candidate is correct at every size (paper Definition 1). "Not equal" means
"no proof found": the axioms are sound but not complete.

With `constrained=True`, a candidate that is a valid µGraph only for some sizes is proved, where it can be,
under size constraints derived from why it is not valid for all (prism.verify.size_constraints): the verdict's
`constraints` then say for which sizes it is equal, and whoever runs it must keep to them (prism.ir.sizes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from prism.errors import VerificationError
from prism.ir.graph import KernelGraph
from prism.ir.sizes import Constraint, describe
from prism.verify import egraph
from prism.verify import expr as E
from prism.verify.encode import NotEncodable, encode
from prism.verify.size_constraints import Assumed, Need, options

__all__ = ["Verdict", "equivalent", "equivalent_all"]


MAX_ASSUMPTIONS = 3
"""Assumptions a proof under size constraints makes at most (each lifts one refusal)."""
MAX_ENCODINGS = 16
"""Sets of assumptions a candidate is encoded under at most, looking for one its proof holds under."""


@dataclass(frozen=True)
class Verdict:
    """equal: proven equal for all parallel sizes that satisfy `constraints` (none: all sizes); reason: why
    (or why not), the constraints in words; stats: e-graph figures."""

    equal: bool
    reason: str
    stats: dict = field(default_factory=dict)
    constraints: tuple[Constraint, ...] = ()

    def __bool__(self) -> bool:
        return self.equal


def equivalent(reference: KernelGraph, candidate: KernelGraph, *, timeout: float = 2.0, max_iters: int = 40,
               max_nodes: int = 50_000, constrained: bool = False) -> Verdict:
    """Prove `candidate` equal to `reference` for all parallel sizes, within the given bounds; with
    `constrained`, for the sizes that satisfy the verdict's constraints where it is not valid for all.

    Inputs are matched by position (names may differ); shapes and dtypes must agree.
    """
    return equivalent_all(reference, [candidate], timeout=timeout, max_iters=max_iters, max_nodes=max_nodes,
                          constrained=constrained)[0]


def equivalent_all(reference: KernelGraph, candidates: Sequence[KernelGraph], *, timeout: float = 2.0,
                   max_iters: int = 40, max_nodes: int = 50_000, cache: dict | None = None,
                   constrained: bool = False) -> list[Verdict]:
    """`equivalent(reference, c)` for each candidate c, with the e-graph work shared: the reference is
    encoded once, each output is checked for all candidates still open in one e-graph run
    (`egraph.check_batch`: the bounds stay per candidate, and no proof one check finds is lost), and
    candidates with identical terms are checked once.

    cache: a dict the caller keeps to remember verdicts in, by both sides' terms and the bounds (so a
    candidate whose terms were checked before, in this call or an earlier one, is not checked again).
    constrained: prove a candidate that is valid only for some sizes under size constraints (`_constrained`, all
    such candidates in one batch per round), where the reference has no parallel dims of its own.
    """
    _graph("reference", reference)
    ref = None
    out: list[Verdict | None] = []
    open_: dict[tuple, list[int]] = {}  # candidates to prove, by their terms' text and the bounds
    terms: dict[tuple, tuple[E.Term, ...]] = {}
    sized: dict[int, tuple[Verdict, Iterator[tuple[Assumed, tuple[E.Term, ...]]]]] = {}  # to prove under constraints
    for i, candidate in enumerate(candidates):
        _graph("candidate", candidate)
        verdict = _mismatch(reference, candidate)
        if verdict is None:
            try:
                ref = ref or encode(reference)
                outs = encode(candidate).outputs
            except NotEncodable as e:
                verdict = Verdict(False, f"not a valid µGraph for all parallel sizes: {e}")
                if constrained and e.need is not None and ref is not None and not ref.pdims:
                    sized[i] = (verdict, _encodings(candidate, e.need))
            else:
                key = (tuple(t.text for t in ref.outputs), tuple(t.text for t in outs), timeout, max_iters, max_nodes)
                verdict = cache.get(key) if cache is not None else None
                if verdict is None:
                    open_.setdefault(key, []).append(i)
                    terms[key] = outs
        out.append(verdict)
    for key, verdict in _prove(ref.outputs if ref else (), terms, timeout, max_iters, max_nodes).items():
        if cache is not None:
            cache[key] = verdict
        for i in open_[key]:
            out[i] = verdict
    for i, verdict in _constrained(ref.outputs if ref else (), sized, timeout, max_iters, max_nodes).items():
        out[i] = verdict
    return out  # type: ignore[return-value]


def _encodings(candidate: KernelGraph, need: Need) -> Iterator[tuple[Assumed, tuple[E.Term, ...]]]:
    """The candidate's encodings under sets of assumptions (prism.verify.size_constraints), in the order they are
    tried: sets grow one assumption at a time from the refusals, breadth first, each refusal's options weakest
    first, so that fewer and weaker constraints come before more and stronger ones (at most MAX_ENCODINGS sets
    tried)."""
    queue: deque[tuple[Assumed, Need]] = deque([(Assumed(), need)])
    encodings = 0
    while queue and encodings < MAX_ENCODINGS:
        assumed, need = queue.popleft()
        for a in options(need, assumed)[:MAX_ENCODINGS - encodings]:
            tried = assumed.plus(a)
            encodings += 1
            try:
                yield tried, encode(candidate, tried).outputs
            except NotEncodable as e:
                if e.need is not None and len(tried) < MAX_ASSUMPTIONS:
                    queue.append((tried, e.need))


def _constrained(ref_terms: Sequence[E.Term], sized: dict[int, tuple[Verdict, Iterator]], timeout: float,
                 max_iters: int, max_nodes: int) -> dict[int, Verdict]:
    """Each candidate proved under the first of its encodings (`_encodings`) whose proof holds, or refused (its
    verdict for all sizes) saying what was tried. Round by round: every candidate's next encoding, all proved in
    one batch (`_prove`), so a candidate's verdict is the one proving them one at a time would give."""
    out: dict[int, Verdict] = {}
    unproved: dict[int, list[str]] = {i: [] for i in sized}
    live = dict(sized)
    while live:
        batch: dict[int, tuple[E.Term, ...]] = {}
        tried: dict[int, Assumed] = {}
        for i, (refused, encodings) in list(live.items()):
            nxt = next(encodings, None)
            if nxt is None:
                out[i] = Verdict(False, f"{refused.reason}; nor under size constraints: " + (
                    " / ".join(unproved[i]) if unproved[i] else "none that sizes could satisfy makes it valid"))
                del live[i]
            else:
                tried[i], batch[i] = nxt
        for i, verdict in _prove(ref_terms, batch, timeout, max_iters, max_nodes).items():
            where = "; ".join(map(str, tried[i].constraints))
            if verdict.equal:
                names = set().union(*(c.names for c in tried[i].constraints))
                out[i] = Verdict(True, f"equal for all parallel sizes where {where} ({describe(names)})",
                                 verdict.stats, tried[i].constraints)
                del live[i]
            else:
                unproved[i].append(f"where {where}, {verdict.reason}")
    return out


def _graph(name: str, g: object) -> None:
    if not isinstance(g, KernelGraph):
        raise VerificationError(f"equivalent: {name} must be a KernelGraph, got {type(g).__name__}")
    g.check()


def _mismatch(reference: KernelGraph, candidate: KernelGraph) -> Verdict | None:
    """"Not equal" for graphs whose input or output types already differ, else None."""
    ref_in = [t.type for t in reference.inputs]
    cand_in = [t.type for t in candidate.inputs]
    if ref_in != cand_in:
        return Verdict(False, f"input signatures differ: {_types(ref_in)} vs {_types(cand_in)}")
    ref_out = [t.type for t in reference.output_tensors]
    cand_out = [t.type for t in candidate.output_tensors]
    if [t.shape for t in ref_out] != [t.shape for t in cand_out]:
        return Verdict(False, f"output shapes differ: {_types(ref_out)} vs {_types(cand_out)}")
    return None


def _prove(ref_terms: Sequence[E.Term], candidates: dict[Any, tuple[E.Term, ...]], timeout: float,
           max_iters: int, max_nodes: int) -> dict[Any, Verdict]:
    """Each candidate's verdict, output by output: the candidates equal so far, in one batch per output."""
    stats = {key: {"iterations": 0, "nodes": 0, "ms": 0.0} for key in candidates}
    verdicts: dict[Any, Verdict] = {}
    open_ = list(candidates)
    for k, lhs in enumerate(ref_terms):
        results = egraph.check_batch(lhs, [candidates[key][k] for key in open_], timeout=timeout,
                                     max_iters=max_iters, max_nodes=max_nodes) if open_ else []
        for key, res in zip(list(open_), results):
            stats[key] = {s: stats[key][s] + res.stats.get(s, 0) for s in stats[key]} | \
                {"rules": res.stats.get("rules")}
            if not res.equal:
                verdicts[key] = Verdict(False, f"output {k}: {res.reason}", stats[key])
                open_.remove(key)
    return verdicts | {key: Verdict(True, "equal for all parallel sizes", stats[key]) for key in open_}


def _types(types: list) -> str:
    return "(" + ", ".join(map(str, types)) + ")"
