"""Every op family has an entry in every pass's per-family table, and the online-softmax rule is one table.

A pass that treats the families of the op table (prism.ir.ops) differently keys its own table by the family's
shape rule (`Family.rule`, a `Shape`) or by the family itself; a family with no entry would fail only on the first
graph that uses one of its ops. `gaps` lists what is missing as (table, family) pairs, so a failure names both.
A table covers the families whose ops its pass can meet: the search sees ops with a term or a decomposition,
verification terms only ops with a term, inline Triton only ops with a template (a contraction is `tl.dot`,
written by the emitter), the parallel forms only ops with neither a term nor a decomposition.

The online-softmax rule (how an op passes on a value's dependence on a running max, what bounds what) is each
op's `online` record; the checks below keep its cases well formed and sound, and keep its readers (BlockGraph's
and the sGraph's `scaling`, the closure's shift, the tuner's overflow check) reading it.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from prism.codegen import one_op
from prism.codegen import render
from prism.codegen.templates import template
from prism.errors import GraphError
from prism.ir import kinds, ops
from prism.ir.ops import FAMILIES, OPS, RUNNING, SCALED, SHIFTED, Family, OpDef, Shape
from prism.symbolic import draft, terms
from prism.verify import encode, model, types


def _has(keep: Callable[[OpDef], bool]) -> Callable[[Family], bool]:
    return lambda family: any(d.family is family and keep(d) for d in OPS.values())


SEARCHED = _has(lambda d: d.term is not None or d.decompose is not None)
TERMED = _has(lambda d: d.term is not None)
TEMPLATED = _has(lambda d: bool(template(d.name)) and not d.family.contraction)
PARALLEL = _has(lambda d: d.term is None and d.decompose is None)

BY_RULE: dict[str, tuple[dict[Shape, Any], Callable[[Family], bool]]] = {
    "prism.ir.ops shapes": (ops._SHAPES, lambda family: True),
    "prism.symbolic.terms shapes": (terms._SHAPES, SEARCHED),
    "prism.symbolic.draft dims": (draft._DIMS, SEARCHED),
    "prism.verify.types typing": (types.RULES, TERMED),
    "prism.verify.model meanings": (model._MEANINGS, TERMED),
    "prism.codegen.render result dims": (render._RESULT_DIMS, TEMPLATED),
}
"""Tables keyed by a family's shape rule, and which families each must cover."""
BY_FAMILY: dict[str, tuple[dict[Family, Any], Callable[[Family], bool]]] = {
    "prism.codegen.one_op kernel-level lowering": (one_op._LOWERING, lambda family: not family.elementwise),
    "prism.verify.encode parallel forms": (encode._FORMS, PARALLEL),
}
"""Tables keyed by the family itself."""


def gaps(by_rule: dict = BY_RULE, by_family: dict = BY_FAMILY) -> list[tuple[str, str]]:
    """(table, family) for every family a table should cover and does not."""
    out = [(table, f"{family.name} (shape rule {family.rule.value})") for table, (entries, needs) in by_rule.items()
           for family in FAMILIES if needs(family) and family.rule not in entries]
    return out + [(table, family.name) for table, (entries, needs) in by_family.items()
                  for family in FAMILIES if needs(family) and family not in entries]


def test_every_family_has_an_entry_in_every_table():
    assert set(FAMILIES) == {d.family for d in OPS.values()}, "a family of the table is missing from FAMILIES"
    missing = gaps()
    assert not missing, f"(table, family) pairs with no entry: {missing}"


def test_a_missing_entry_is_named():
    entries, needs = BY_RULE["prism.symbolic.terms shapes"]
    shortened = {rule: f for rule, f in entries.items() if rule is not Shape.REDUCE}
    assert gaps({"prism.symbolic.terms shapes": (shortened, needs)}, {}) == [
        ("prism.symbolic.terms shapes", "reduce (shape rule reduce)"),
        ("prism.symbolic.terms shapes", "max_reduce (shape rule reduce)")]
    lowering, needs = BY_FAMILY["prism.codegen.one_op kernel-level lowering"]
    shortened = {f: low for f, low in lowering.items() if not f.contraction}
    assert gaps({}, {"lowering": (shortened, needs)}) == [("lowering", "matmul")]


def test_matmul_is_found_by_its_family_alone():
    """`contracts` (Family.contraction) is the one way a pass finds a matmul."""
    assert [name for name in OPS if ops.contracts(name)] == ["matmul"]
    assert not ops.contracts(kinds.SUM.name) and not ops.contracts("in")


# ---- the online-softmax rule -----------------------------------------------------------------------------


def _operand_linear(d: OpDef, k: int, along: Any) -> bool:
    """Is op d linear in operand k, so a factor exp(-m) on it comes out (a sum or contraction only where m is
    constant along what it adds up)?"""
    return (d.linear or (d.linear_first and (k == 0 or d.commutative))
            or (along is not None and (d.family.rule is Shape.REDUCE or d.family.contraction)))


def test_every_online_case_is_well_formed_and_sound():
    bad = []
    for name, d in OPS.items():
        for case in d.online.passes:
            if len(case.takes) != d.arity or case.gives not in (RUNNING, SHIFTED, SCALED) or \
                    not set(case.takes) <= {None, RUNNING, SHIFTED, SCALED}:
                bad.append(f"{name}: {case} does not fit its {d.arity} operand(s)")
            if isinstance(case.along, str) and case.along not in d.attrs:
                bad.append(f"{name}: {case} names no attribute of the op")
            if case.gives == SCALED and SHIFTED not in case.takes and not all(
                    _operand_linear(d, k, case.along) for k, s in enumerate(case.takes) if s == SCALED):
                bad.append(f"{name}: {case} passes a scaled operand on, but the op is not linear in it")
        if d.online.bound and d.pad != float("-inf"):
            bad.append(f"{name}: a bound (a max) pads with its identity -inf, not {d.pad}")
    assert not bad, bad


def test_the_parts_the_readers_look_up_exist():
    """The shift (x - m), an exponential, a ratio, and for each sum a bound of its shape rule (the closure writes
    exp(x - max(x, d)) for a sum over d)."""
    online = {name: d.online for name, d in OPS.items()}
    assert [n for n, o in online.items() if o.shift is not None] == ["sub"]
    assert [n for n, o in online.items() if o.exponential] == ["exp"]
    assert [n for n, o in online.items() if o.ratio] == ["div"]
    assert [n for n, o in online.items() if o.bound] == ["max", "group_max"]
    for name, o in online.items():
        if o.summing:
            rule = OPS[name].family.rule
            assert any(b.online.bound and b.family.rule is rule for b in OPS.values()), f"{name}: no bound"


def _scaled(op: str, states: list, shapes: list | None = None, attrs: dict | None = None) -> Any:
    """kinds.scaling of table op `op` on operands in `states` of running max "r" (shape [4, 1])."""
    shapes = shapes or [(4, 8)] * len(states)
    operands = [(shape, None if s is None else (s, "r")) for shape, s in zip(shapes, states)]
    return kinds.scaling(op, attrs or {}, operands, {"r": (4, 1)})


@pytest.mark.parametrize("name", [n for n, d in OPS.items() if d.online.passes])
def test_scaling_applies_each_case_of_the_table(name):
    d = OPS[name]
    attrs = {"dim": 1} if "dim" in d.attrs else {}
    for case in d.online.passes:
        got = _scaled(name, list(case.takes), attrs=attrs)
        assert got == (case.gives, "r"), (name, case, got)
        if d.commutative:
            assert _scaled(name, list(case.takes)[::-1], attrs=attrs) == (case.gives, "r")


def test_scaling_refuses_what_the_table_does_not_say():
    with pytest.raises(GraphError, match="sqrt: an operand depends on a running max"):
        _scaled("sqrt", [SCALED])
    with pytest.raises(GraphError, match="sum"):   # along dim 0, where the running max has extent 4
        _scaled("sum", [SCALED], attrs={"dim": 0})
    with pytest.raises(GraphError, match="div"):   # an independent value over a scaled one
        _scaled("div", [None, SCALED])
