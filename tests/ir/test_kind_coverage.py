"""Every node kind has its part of every pass, and asks of each pass only its contract's members.

A kind (prism.ir.kinds) holds one method per pass; the base class's raises NotImplementedError, so a kind
that lacked one would fail only on the first graph that uses it. An accumulator's data is read by passes
too: its combine op by the executor (the op table) and by code generation (the op's template writes the
update), its reducer by verification (a term). `gaps` lists what is missing as (kind, pass) pairs, so a
failure names them.

Each pass's contract (prism.ir.passes) is what its context implements and all a kind may ask of it: a kind
run against a context holding nothing but the contract's members fails by (kind, pass, member) where it
reaches past them."""

from __future__ import annotations

import dataclasses
import inspect
import math
from types import SimpleNamespace
from typing import Any, Iterable

import pytest
import torch

from prism.codegen.emit import Emitter, update
from prism.codegen.errors import CodegenError
from prism.interp.executor import _Block as Run
from prism.ir.kinds import ACCUMULATORS, COMPUTE, KINDS, Accumulator, Kind
from prism.ir.ops import OPS
from prism.ir.passes import Count, Emit, Encode, Execute
from prism.tune.cost import _Work
from prism.verify.encode import _Block as Encoding
from prism.verify.expr import TERMS

PASSES = {"executor": "run", "verify encoding": "encode", "codegen emission": "emit", "cost": "cost"}
"""Each pass, by the kind method it calls."""
CONTRACTS = {"executor": (Execute, Run), "verify encoding": (Encode, Encoding), "codegen emission": (Emit, Emitter),
             "cost": (Count, _Work)}
"""Each pass's contract, and the context that implements it."""


def verbs(contract: type) -> list[str]:
    return [n for n, v in vars(contract).items() if callable(v) and not n.startswith("_")]


def data(contract: type) -> list[str]:
    return list(vars(contract).get("__annotations__", {}))


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


def _parameters(f: Any) -> list[str]:
    return [p for p in inspect.signature(f).parameters if p != "self"]   # a static method has none


@pytest.mark.parametrize("name", PASSES)
def test_each_context_implements_its_contract(name):
    contract, context = CONTRACTS[name]
    for member in data(contract):
        assert member in {f.name for f in dataclasses.fields(context)}, f"{context.__qualname__} lacks {member}"
    for verb in verbs(contract):
        assert callable(getattr(context, verb, None)), f"{context.__qualname__} lacks verb {verb}"
        assert _parameters(getattr(context, verb)) == _parameters(getattr(contract, verb)), (name, verb)


class _Strict:
    """A pass's context with nothing but its contract's members: its data members hold `values`, each verb
    records its call (and returns None); asking for anything else names the kind, pass and member."""

    def __init__(self, name: str, kind: Kind, **values: Any) -> None:
        self._contract, self._pass, self._kind, self.calls = CONTRACTS[name][0], name, kind.name, []
        assert set(values) == set(data(self._contract))
        vars(self).update(values)

    def __getattr__(self, member: str) -> Any:
        if member not in verbs(self._contract):
            raise AttributeError(f"kind {self._kind} asked the {self._pass} pass for {member!r}, no member of "
                                 f"prism.ir.passes.{self._contract.__name__}")
        return lambda *args, **kwargs: self.calls.append(member)


def _node(kind: Kind) -> SimpleNamespace:
    """A node of `kind` on nodes 0 (and 1), every branch of its passes taken: one grid dim maps a dim, one
    does not, the loop walks a dim. A compute node is an add."""
    if kind is COMPUTE:
        return SimpleNamespace(op="add", inputs=[(0, 0), (1, 0)], attrs={})
    return SimpleNamespace(op=kind.name, inputs=[(0, 0), (1, 0)][:max(kind.arity, 1)],
                           attrs={"index": 0, "imap": {"x": 0}, "fmap": 0, "omap": {"x": 0}})


def _context(name: str, kind: Kind) -> _Strict:
    """Node values for nodes 0 and 1 (node 1 a running max, where one is carried)."""
    one = torch.ones(2)
    values = {"executor": {"env": {0: one, 1: one}, "carry": {1: one, ("before", 1): one}},
              "verify encoding": {"env": {0: "t0", 1: "t1"}, "pdims": {"x": "x0", "y": "y0"}, "loop": "i0"}}
    return _Strict(name, kind, **values.get(name, {}))


STEPS = {"executor": ("start", "step", "run"), "verify encoding": ("encode",), "codegen emission": ("emit",),
         "cost": ("cost",)}
"""Each pass's kind methods, in the order it calls them (an accumulator starts before its first step)."""


@pytest.mark.parametrize("name", PASSES)
@pytest.mark.parametrize("kind", [*KINDS.values(), COMPUTE], ids=lambda k: k.name)
def test_kinds_ask_only_contract_members(kind, name):
    ctx, node = _context(name, kind), _node(kind)
    for step in STEPS[name]:
        if hasattr(kind, step):
            getattr(kind, step)(ctx, 2, node)
    if name == "codegen emission":
        assert len(ctx.calls) == 1, ctx.calls


class _Nosy(Kind):
    """A loader that reads the executor's inputs itself."""

    name = "nosy"

    def run(self, ex: Any, i: int, node: Any) -> None:
        ex.env[i] = ex.inputs[node.attrs["index"]]


def test_a_kind_past_its_contract_is_named():
    nosy = _Nosy()
    with pytest.raises(AttributeError, match="kind nosy asked the executor pass for 'inputs'"):
        nosy.run(_context("executor", nosy), 2, _node(nosy))
