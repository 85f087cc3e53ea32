"""`equivalent(reference, candidate)`: does a candidate compute the same function for all parallel sizes?

Both kernel graphs are encoded as part/comb/red/repl terms (prism.verify.encode) and each pair of
outputs is checked on the e-graph (prism.verify.egraph). Concrete grid sizes and loop ranges are never
looked at, so an accepted candidate is correct at every size (paper Definition 1). "Not equal" means
"no proof found": the axioms are sound but not complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prism.errors import VerificationError
from prism.ir.graph import KernelGraph
from prism.verify import egraph
from prism.verify.encode import NotEncodable, encode

__all__ = ["Verdict", "equivalent"]


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
    for name, g in (("reference", reference), ("candidate", candidate)):
        if not isinstance(g, KernelGraph):
            raise VerificationError(f"equivalent: {name} must be a KernelGraph, got {type(g).__name__}")
        g.check()
    ref_in = [t.type for t in reference.inputs]
    cand_in = [t.type for t in candidate.inputs]
    if ref_in != cand_in:
        return Verdict(False, f"input signatures differ: {_types(ref_in)} vs {_types(cand_in)}")
    ref_out = [t.type for t in reference.output_tensors]
    cand_out = [t.type for t in candidate.output_tensors]
    if [t.shape for t in ref_out] != [t.shape for t in cand_out]:
        return Verdict(False, f"output shapes differ: {_types(ref_out)} vs {_types(cand_out)}")
    try:
        ref_terms, cand_terms = encode(reference), encode(candidate)
    except NotEncodable as e:
        return Verdict(False, f"not a valid µGraph for all parallel sizes: {e}")
    stats = {"iterations": 0, "nodes": 0, "ms": 0.0}
    for k, (lhs, rhs) in enumerate(zip(ref_terms.outputs, cand_terms.outputs)):
        res = egraph.check(lhs, rhs, timeout=timeout, max_iters=max_iters, max_nodes=max_nodes)
        stats = {key: stats[key] + res.stats.get(key, 0) for key in stats} | {"rules": res.stats.get("rules")}
        if not res.equal:
            return Verdict(False, f"output {k}: {res.reason}", stats)
    return Verdict(True, "equal for all parallel sizes", stats)


def _types(types: list) -> str:
    return "(" + ", ".join(map(str, types)) + ")"
