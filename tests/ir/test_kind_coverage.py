"""Every node kind has a rule in every pass's table, and a missing one is named by pass and kind.

The IR holds node kinds as data (prism.ir.kinds); what a kind means to a pass is a rule in that pass's own
table, keyed by kind class (prism.ir.kinds.rule_for: the class's rule, else its nearest base's). A kind without
one would fail only on the first graph that uses it, so `gaps` lists what is missing as (kind, pass) pairs. An
accumulator's data is read by passes too: its combine op by the executor (the op table) and by code generation
(the op's template writes the update), its reducer by verification (a term)."""

from __future__ import annotations

import math
from typing import Any, Iterable

import pytest

from prism.codegen.emit import EMIT, update
from prism.errors import CodegenError, GraphError
from prism.interp.executor import RUN, UPDATE
from prism.ir.kinds import ACCUMULATORS, COMPUTE, KINDS, Accumulator, Kind, rule_for
from prism.ir.ops import OPS
from prism.tune.cost import COUNT
from prism.verify.encode import ENCODE
from prism.verify.expr import TERMS

TABLES: dict[str, dict[type, Any]] = {"executor": RUN, "verify encoding": ENCODE, "codegen emission": EMIT,
                                      "cost": COUNT}
"""Each pass's table of rules by kind (the executor's accumulator updates are checked beside it)."""


def _updates(acc: Accumulator) -> bool:
    try:
        update(acc, "acc", "acc", "x")
        return True
    except CodegenError:
        return False


def _has(table: dict[type, Any], kind: Kind, name: str) -> bool:
    try:
        rule_for(table, kind, name)
        return True
    except GraphError:
        return False


def gaps(kinds: Iterable[Kind], tables: dict[str, dict[type, Any]] = TABLES) -> list[tuple[str, str]]:
    """(kind, pass) for every pass a kind has no part in: no rule in the pass's table, or, for an accumulator, no
    update in the executor or data the pass cannot read."""
    out = []
    for kind in kinds:
        out += [(kind.name, name) for name, table in tables.items() if not _has(table, kind, name)]
        if isinstance(kind, Accumulator):
            known = {"executor": kind.combine in OPS and _has(UPDATE, kind, "executor"),
                     "verify encoding": kind.reducer in TERMS, "codegen emission": _updates(kind)}
            out += [(kind.name, p) for p, ok in known.items() if not ok and (kind.name, p) not in out]
    return out


def test_every_kind_has_every_pass():
    assert set(ACCUMULATORS) <= set(KINDS)
    missing = gaps([*KINDS.values(), COMPUTE])
    assert not missing, f"(kind, pass) pairs with no rule: {missing}"


class _Forgetful(Kind):
    """A kind no pass has a rule for."""

    name = "forgetful"


def test_gaps_name_a_kind_a_pass_has_no_rule_for():
    assert gaps([_Forgetful()]) == [("forgetful", name) for name in TABLES]
    with_all_but_codegen = {name: table | ({} if name == "codegen emission" else {_Forgetful: None})
                            for name, table in TABLES.items()}
    assert gaps([_Forgetful()], with_all_but_codegen) == [("forgetful", "codegen emission")]


def test_a_missing_rule_fails_by_pass_and_kind():
    with pytest.raises(GraphError, match=r"code generation has no rule for node kind 'forgetful' \(_Forgetful\)"):
        rule_for(EMIT, _Forgetful(), "code generation")


def test_an_accumulator_made_at_run_time_takes_the_accumulator_rules():
    """A new accumulator is data (a combine op, an identity, a reducer), so every pass's accumulator rule serves it."""
    acc = Accumulator("accum_prod", combine="mul", identity=1.0, reducer="red")
    assert [rule_for(t, acc, name) for name, t in TABLES.items()] == [t[Accumulator] for t in TABLES.values()]
    assert rule_for(UPDATE, acc, "executor") is UPDATE[Accumulator]


def test_gaps_name_an_accumulator_no_pass_can_read():
    """A min accumulator whose combine op and reducer term exist nowhere: every pass that reads them says so."""
    acc = Accumulator("accum_min", combine="minimum", identity=math.inf, reducer="redmin")
    assert gaps([acc]) == [("accum_min", p) for p in ("executor", "verify encoding", "codegen emission")]


def test_every_op_with_a_term_has_its_familys_constructor_and_a_missing_one_is_named():
    """The egglog constructor of each op family is the verifier's table (prism.verify.expr.FAMILY_TERMS), not
    the IR's: every op with a term finds its family there, and a family missing from it is named."""
    import dataclasses

    from prism.errors import VerificationError
    from prism.verify.expr import family_terms

    with_terms = [d for d in OPS.values() if d.term is not None]
    assert with_terms and all(family_terms(d).egg for d in with_terms)
    stray = dataclasses.replace(OPS["exp"], family=dataclasses.replace(OPS["exp"].family, name="new_family"))
    with pytest.raises(VerificationError, match="family new_family has no term constructor"):
        family_terms(stray)
