"""`equivalent(reference, candidate)`: does a candidate compute the same function for all parallel sizes?

Both kernel graphs are encoded as part/comb/red/repl terms (prism.verify.encode) and each pair of
outputs is checked on the e-graph (prism.verify.egraph). Concrete grid sizes and loop ranges are never
looked at, so an accepted candidate is correct at every size (paper Definition 1). "Not equal" means
"no proof found": the axioms are sound but not complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from prism.errors import VerificationError
from prism.ir.graph import KernelGraph
from prism.verify import egraph
from prism.verify import expr as E
from prism.verify.encode import NotEncodable, encode

__all__ = ["Verdict", "equivalent", "equivalent_all"]


@dataclass(frozen=True)
class Verdict:
    """equal: proven equal for all parallel sizes; reason: why (or why not); stats: e-graph figures."""

    equal: bool
    reason: str
    stats: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.equal


def equivalent(reference: KernelGraph, candidate: KernelGraph, *, timeout: float = 2.0, max_iters: int = 40,
               max_nodes: int = 50_000) -> Verdict:
    """Prove `candidate` equal to `reference` for all parallel sizes, within the given bounds.

    Inputs are matched by position (names may differ); shapes and dtypes must agree.
    """
    return equivalent_all(reference, [candidate], timeout=timeout, max_iters=max_iters, max_nodes=max_nodes)[0]


def equivalent_all(reference: KernelGraph, candidates: Sequence[KernelGraph], *, timeout: float = 2.0,
                   max_iters: int = 40, max_nodes: int = 50_000, cache: dict | None = None) -> list[Verdict]:
    """`equivalent(reference, c)` for each candidate c, with the e-graph work shared: the reference is
    encoded once, each output is checked for all candidates still open in one e-graph run
    (`egraph.check_batch`: the bounds stay per candidate, and no proof one check finds is lost), and
    candidates with identical terms are checked once.

    cache: a dict the caller keeps to remember verdicts in, by both sides' terms and the bounds (so a
    candidate whose terms were checked before, in this call or an earlier one, is not checked again).
    """
    _graph("reference", reference)
    ref_terms = None
    out: list[Verdict | None] = []
    open_: dict[tuple, list[int]] = {}  # candidates to prove, by their terms' text and the bounds
    terms: dict[tuple, tuple[E.Term, ...]] = {}
    for i, candidate in enumerate(candidates):
        _graph("candidate", candidate)
        verdict = _mismatch(reference, candidate)
        if verdict is None:
            try:
                ref_terms = ref_terms or encode(reference).outputs
                outs = encode(candidate).outputs
            except NotEncodable as e:
                verdict = Verdict(False, f"not a valid µGraph for all parallel sizes: {e}")
            else:
                key = (tuple(t.text for t in ref_terms), tuple(t.text for t in outs), timeout, max_iters, max_nodes)
                verdict = cache.get(key) if cache is not None else None
                if verdict is None:
                    open_.setdefault(key, []).append(i)
                    terms[key] = outs
        out.append(verdict)
    for key, verdict in _prove(ref_terms or (), terms, timeout, max_iters, max_nodes).items():
        if cache is not None:
            cache[key] = verdict
        for i in open_[key]:
            out[i] = verdict
    return out  # type: ignore[return-value]


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
