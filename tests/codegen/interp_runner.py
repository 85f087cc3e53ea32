"""Run code-generation cases under Triton's interpreter and report each as JSON.

Started by test_interpret.py as `python -m tests.codegen.interp_runner OUT.json CASE...` with
TRITON_INTERPRET=1 in the environment: interpret mode is fixed when triton is first imported, so it
cannot share the pytest process (which compiles kernels ahead of time). Every buffer the kernels touch,
inputs included, sits between NaN guard bands (INT_GUARD in an integer one: a tail kernel's row counters);
the interpreter does no bounds checking, so a write out of bounds shows up as a guard that is no longer NaN,
and a read out of bounds as NaN in an output.
The case "fuzz" runs random kernel graphs from tests/strategies.py (derandomized Hypothesis).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import traceback
import warnings

import torch

from prism import codegen, interp
from prism.codegen.plan import plan_graph

GUARD = 64
INT_GUARD = -123456789
FUZZ_EXAMPLES = 30


class Guarded:
    """An allocator that puts NaN guard bands around every buffer (and can hand out column-major ones)."""

    def __init__(self, reversed_layout: bool = False) -> None:
        self.reversed = reversed_layout
        self.buffers: list[tuple[torch.Tensor, int, int]] = []   # (storage, start, span)

    def _place(self, shape, strides, dtype) -> torch.Tensor:
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
        base = torch.full((span + 2 * GUARD,), _guard(dtype), dtype=dtype)
        self.buffers.append((base, GUARD, span))
        return torch.as_strided(base, shape, strides, GUARD)

    def __call__(self, shape, dtype, device, zero):
        if self.reversed:
            strides, acc = [0] * len(shape), 1
            for d in range(len(shape)):
                strides[d], acc = acc, acc * shape[d]
        else:
            strides = list(torch.empty(shape, device="meta").stride())
        t = self._place(tuple(shape), tuple(strides), dtype)
        if zero:
            t.zero_()
        return t

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        """`t`'s values in a guarded buffer with `t`'s strides (a view stays a view)."""
        out = self._place(tuple(t.shape), tuple(t.stride()), t.dtype)
        out.copy_(t)
        return out

    def intact(self) -> bool:
        for base, start, span in self.buffers:
            guard = _guard(base.dtype)
            for band in (base[:start], base[start + span:]):
                if not (band.isnan().all() if guard != guard else (band == guard).all()):
                    return False
        return True


def _guard(dtype: torch.dtype) -> float | int:
    """What a guard band holds: NaN, or for an integer buffer (a tail kernel's row counters) INT_GUARD."""
    return float("nan") if dtype.is_floating_point else INT_GUARD


def _compare(got: torch.Tensor, want: torch.Tensor, rtol: float) -> float:
    got = got.double()
    want = want.double()
    scale = want[want.isfinite()].abs().max().item() if want.isfinite().any() else 1.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1e-6), equal_nan=True)
    finite = want.isfinite() & got.isfinite()
    return (got - want)[finite].abs().max().item() / max(scale, 1e-30) if finite.any() else 0.0


def run_graph(graph, inputs, rtol, views=None, reversed_layout=False, torch_reference=None, mutate=None,
              plan=None) -> dict:
    alloc = Guarded(reversed_layout)
    cg = codegen.CompiledGraph(graph, plan, alloc) if plan else codegen.compile_graph(graph, allocate=alloc)
    if mutate is not None:   # a mutant of the generated source (tests/codegen/ragged_cases.py)
        source = mutate(cg.plan.source)
        if source == cg.plan.source:
            raise ValueError("the mutation changed nothing in the generated source")
        cg.plan = dataclasses.replace(cg.plan, source=source)
    views = views or {}
    args = [alloc.copy(views[k](t) if k in views else t) for k, t in enumerate(inputs)]
    before = [a.clone() for a in args]
    t0 = time.time()
    outs = cg(*args)
    seconds = time.time() - t0
    if not alloc.intact():
        raise AssertionError("a kernel wrote outside a buffer (a NaN guard band changed)")
    for a, b in zip(args, before):
        if not torch.equal(a.isnan(), b.isnan()) or not torch.equal(a.nan_to_num(), b.nan_to_num()):
            raise AssertionError("a kernel wrote into one of its inputs")
    if cg.kept:   # row counters (a tail kernel's, a split-K combine's): zero again after a call, and a second call
        if any(t.any() for t in cg.kept.values()):   # computes the same bits
            raise AssertionError("a persistent buffer (row counters) is not zero after a call")
        again = cg(*args)
        if not alloc.intact():
            raise AssertionError("a second call wrote outside a buffer (a NaN guard band changed)")
        if not all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(again, outs)):
            raise AssertionError("a second call of a graph with row counters computed other bits")
    wide = torch.float64 if rtol < 1e-3 else torch.float32
    wants = interp.run(graph, [t.to(wide) for t in inputs], wide)
    errs = []
    for k, (got, want) in enumerate(zip(outs, wants)):
        assert got.dtype == getattr(torch, graph.output_tensors[k].dtype), f"output {k} has dtype {got.dtype}"
        errs.append(_compare(got, want, rtol))
    if torch_reference is not None:   # a tensor, or one per output
        want = torch_reference(*[t.double() for t in inputs])
        want = list(want) if isinstance(want, (list, tuple)) else [want]
        if len(want) != len(outs):
            raise AssertionError(f"torch's function has {len(want)} outputs, the graph {len(outs)}")
        for got, w in zip(outs, want):
            if not got.isfinite().all():
                raise AssertionError(f"{int((~got.isfinite()).sum())} output entries are not finite")
            err = ((got.double() - w).abs().max() / w.abs().max()).item()
            if not err <= 1e-2:
                raise AssertionError(f"relative error {err:.3g} against torch's function, above 1e-2")
            errs.append(err)
    return {"ok": True, "max_rel_err": max(errs), "kernels": len(cg.kernels), "seconds": seconds}


def run_case(name: str) -> dict:
    from tests.codegen.cases import CASES
    from tests.codegen.ragged_cases import MUTANTS, RAGGED, RUNTIME

    c = {**CASES, **RAGGED, **RUNTIME, **MUTANTS}[name]()
    if c.sizes:
        return run_sizes(c)
    return run_graph(c.graph, c.inputs, c.rtol, c.views, c.out_layout == "reversed", c.torch_reference, c.mutate)


def run_sizes(c) -> dict:
    """Case `c`'s kernels generated once, with the dims `c.sizes` names taken at launch (mutated if `c` is a
    mutant), run at its sizes and at those of every case in `c.others` (prism.codegen.plan.Plan.at): one
    generated module for all of them."""
    plan = plan_graph(c.graph, sizes=c.sizes)
    if c.mutate is not None:
        source = c.mutate(plan.source)
        if source == plan.source:
            raise ValueError("the mutation changed nothing in the generated source")
        plan = dataclasses.replace(plan, source=source)
    results = []
    for k in [c, *c.others]:
        values = {name: k.graph.inputs[i].shape[d] for (i, d), name in c.sizes.items()}
        results.append(run_graph(k.graph, k.inputs, k.rtol, torch_reference=k.torch_reference, plan=plan.at(values)))
    return {"ok": True, "max_rel_err": max(r["max_rel_err"] for r in results), "sizes": len(results),
            "kernels": results[0]["kernels"], "seconds": sum(r["seconds"] for r in results)}


def fuzz() -> dict:
    """Random kernel graphs (custom ops with 1-3 grid dims, random maps, summed outputs, kernel ops),
    float32, inputs in [0.5, 1.5). No shrinking (each example compiles a module): a failure reports the
    first failing graph as printed, with its traceback."""
    from hypothesis import HealthCheck, Phase, given, settings

    from tests.strategies import kernel_graphs

    count = {"graphs": 0, "kernels": 0}
    failures: list[str] = []

    @settings(max_examples=FUZZ_EXAMPLES, derandomize=True, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(kernel_graphs(dtypes=("float32",), max_ops=4, max_customs=2, block_max_ops=4))
    def check(g):
        gen = torch.Generator().manual_seed(0)
        xs = [torch.rand(t.shape, generator=gen) + 0.5 for t in g.inputs]
        count["graphs"] += 1
        try:
            count["kernels"] += run_graph(g, xs, rtol=1e-3)["kernels"]
        except Exception:
            failures.append(f"{g}\n{traceback.format_exc()[-3000:]}")

    t0 = time.time()
    check()
    if failures:
        return {"ok": False, "error": f"{len(failures)} of {count['graphs']} random graphs failed; the first:\n"
                                      f"{failures[0]}"}
    return {"ok": True, **count, "seconds": time.time() - t0}


def main(argv: list[str]) -> None:
    out, names = argv[0], argv[1:]
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("interp_runner needs TRITON_INTERPRET=1 in the environment")
    # numpy warns about 0/0 and x/0 in padded lanes, which stores and reductions mask out
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    results = {}
    for name in names:
        t0 = time.time()
        try:
            results[name] = fuzz() if name == "fuzz" else run_case(name)
        except Exception:   # report and go on: one broken case must not hide the others
            results[name] = {"ok": False, "error": traceback.format_exc()[-6000:]}
        results[name]["wall"] = round(time.time() - t0, 3)
        err = results[name].get("max_rel_err")
        if err is not None and not math.isfinite(err):
            results[name]["max_rel_err"] = str(err)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
