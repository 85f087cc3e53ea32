"""Every node kind has its part of every pass, and asks of code generation only its contract's verbs.

A kind (prism.ir.kinds) holds one method per pass; the base class's raises NotImplementedError, so a kind
that lacked one would fail only on the first graph that uses it. An accumulator's data is read by passes
too: its combine op by the executor (the op table) and by code generation (the op's template writes the
update), its reducer by verification (a term). `gaps` lists what is missing as (kind, pass) pairs, so a
failure names them."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace
from typing import Any, Iterable

import pytest

from prism.codegen.emit import Emitter, update
from prism.codegen.errors import CodegenError
from prism.ir.kinds import ACCUMULATORS, COMPUTE, KINDS, Accumulator, Kind
from prism.ir.ops import OPS
from prism.ir.passes import Emit
from prism.verify.expr import TERMS

PASSES = {"executor": "run", "verify encoding": "encode", "codegen emission": "emit", "cost": "cost"}
"""Each pass, by the kind method it calls."""
VERBS = [n for n, v in vars(Emit).items() if callable(v) and not n.startswith("_")]


def _updates(acc: Accumulator) -> bool:
    try:
        update(acc, "acc", "acc", "x")
        return True
    except CodegenError:
        return False


def gaps(kinds: Iterable[Kind]) -> list[tuple[str, str]]:
    """(kind, pass) for every pass a kind has no part in: a method it does not define, or, for an
    accumulator, data the pass cannot read."""
    out = []
    for kind in kinds:
        out += [(kind.name, p) for p, m in PASSES.items() if getattr(type(kind), m) is getattr(Kind, m)]
        if isinstance(kind, Accumulator):
            known = {"executor": kind.combine in OPS, "verify encoding": kind.reducer in TERMS,
                     "codegen emission": _updates(kind)}
            out += [(kind.name, p) for p, ok in known.items() if not ok]
    return out


def test_every_kind_has_every_pass():
    assert set(ACCUMULATORS) <= set(KINDS)
    missing = gaps([*KINDS.values(), COMPUTE])
    assert not missing, f"(kind, pass) pairs with no entry: {missing}"


class _Forgetful(Kind):
    """A kind with every pass but code generation."""

    name = "forgetful"

    def run(self, ex: Any, i: int, node: Any) -> None: ...
    def encode(self, en: Any, i: int, node: Any) -> None: ...
    def cost(self, cw: Any, i: int, node: Any) -> None: ...


def test_gaps_name_a_kind_without_codegen():
    assert gaps([_Forgetful()]) == [("forgetful", "codegen emission")]


def test_gaps_name_an_accumulator_no_pass_can_read():
    """A min accumulator whose combine op and reducer term exist nowhere: every pass that reads them says so."""
    acc = Accumulator("accum_min", combine="minimum", identity=math.inf, reducer="redmin")
    assert gaps([acc]) == [("accum_min", p) for p in ("executor", "verify encoding", "codegen emission")]


def test_the_emitter_implements_every_verb():
    for verb in VERBS:
        assert callable(getattr(Emitter, verb, None)), f"Emitter lacks verb {verb}"
        want = inspect.signature(getattr(Emit, verb)).parameters
        assert inspect.signature(getattr(Emitter, verb)).parameters.keys() == want.keys(), verb


class _Strict:
    """Code generation with nothing but the contract's verbs: it records each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name not in VERBS:
            raise AttributeError(f"a node kind asked code generation for {name!r}, no verb of prism.ir.passes.Emit")
        return lambda *args, **kwargs: self.calls.append(name)


@pytest.mark.parametrize("kind", [*KINDS.values(), COMPUTE], ids=lambda k: k.name)
def test_kinds_ask_only_contract_verbs(kind):
    node = SimpleNamespace(op=kind.name, inputs=[(0, 0), (1, 0)][:max(kind.arity, 1)],
                           attrs={"index": 0, "imap": {}, "fmap": None, "omap": {}})
    em = _Strict()
    kind.emit(em, 2, node)
    assert len(em.calls) == 1, em.calls
