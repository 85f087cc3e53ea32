"""Cones whose sizes are symbolic (`dynamic=True`, `mark_dynamic`, Dynamo's automatic dynamic shapes): one op
for every size, lowered again at each new size, tuned once per size bucket.

A graph Dynamo made dynamic has sizes like `s53` (a KV cache's length) in its metadata. A cone of it becomes
a `Region`: a standalone copy of the cone's FX nodes and one custom op, `prism::r<hash>(Tensor[] xs) ->
Tensor`, whose inputs are the cone's tensors as torch computes them. Each call binds the symbols to the sizes
of those tensors (each symbol is read off a dim whose size is s, s + c or a·s + c: a KV cache of s53 + 1), and for each
new binding the cone is lowered again at those sizes (prism.capture.lower: milliseconds), its input steps
(views, casts) included, so what runs is exactly what the static path would have built at those sizes. The
program then goes through one `SizeBuckets` per program structure, shared by all the cones that have it
(every layer's attention): tuned once per bucket of sizes, the bucket's choice reused inside it
(prism.runtime.buckets); where a bucket's best is Prism's unfused program, the op runs the cone's own ATen ops
instead. The op returns the root's value in its own shape and strides, computed from the input sizes, so tracing
(the fake) and running agree. A size Prism fails on at run time (its lowering, its bucket's tuning or kernels
raise) is never the user's error: that size runs the cone's ATen ops, and the cone's `history`
entry lists it under "torch at" with the reason.

Lowered at two bindings (the example's sizes n, and 2n + 3, which keeps equal sizes equal: Dynamo gives a KV
cache's keys and values two symbols), a cone must give programs that differ in sizes only: a constant
computed from a symbolic size (a mean's 1/n over a dynamic dim) would be right at one size and wrong at the
next, so such a cone stays with torch, and says why.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import sympy
import torch

from prism.capture.lower import lower
from prism.capture.views import Source
from prism.errors import PrismError, UnsupportedOp
from prism.ir import KernelGraph
from prism.runtime.buckets import Recent, SizeBuckets

__all__ = ["Region", "standalone", "symbolic"]

_BUCKETS: dict[tuple[str, str], SizeBuckets] = {}
"""One SizeBuckets per (program structure, device): every cone of that structure shares its tunings."""
_COUNT = itertools.count()


def symbolic(shape: Sequence[Any]) -> bool:
    return any(isinstance(n, torch.SymInt) for n in shape)


def _expr(n: Any) -> Any:
    """A size as a sympy expression (an int as an Integer)."""
    return sympy.sympify(n.node.expr if isinstance(n, torch.SymInt) else int(n))


def evaluate(expr: Any, values: dict[Any, Any]) -> Any:
    """`expr` (sympy, sizes' arithmetic: + and ·) with each symbol replaced by `values[symbol]`, an int or a
    SymInt: the fake computes symbolic output sizes with it, the kernel concrete ones."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return values[expr]
    parts = [evaluate(a, values) for a in expr.args]
    if expr.is_Add:
        return sum(parts[1:], parts[0])
    if expr.is_Mul:
        out = parts[0]
        for p in parts[1:]:
            out = out * p
        return out
    raise UnsupportedOp(f"a size {expr} that is not a sum or product of input sizes")


log = logging.getLogger("prism.compile")

TORCH_AT_KEPT = 8
"""Sizes a Region's history entry lists under "torch at" (a decode loop could fail at every length)."""


@dataclass
class _Sized:
    """The cone lowered at one binding: its program's OptimizedGraph, the inputs' steps, the output's shape."""

    opt: Any
    sources: list[Source]
    shape: tuple[int, ...]


class Region:
    """A symbolic-size cone as one custom op (module docstring). `nodes` (in order), `inputs` and `root` are
    the cone's FX nodes; made once at compile time, it raises UnsupportedOp if the cone cannot serve every
    size (a symbol no input dim binds, a constant that depends on a size, an op Prism does not have)."""

    def __init__(self, nodes: Sequence[Any], inputs: Sequence[Any], root: Any, device: torch.device,
                 options: dict[str, Any]) -> None:
        self.graph, env = standalone(nodes, inputs, [root])
        self.inputs, self.nodes, self.root = [env[n] for n in inputs], [env[n] for n in nodes], env[root]
        self.tensors = [p for p in self.inputs if isinstance(p.meta.get("val"), torch.Tensor)]
        val = self.root.meta["val"]
        self.shape, self.dtype, self.order = [_expr(n) for n in val.shape], val.dtype, _stride_order(val)
        self.where = _readers(self.tensors)
        """symbol -> (tensor input, dim, that dim's size in the symbol): where a call reads each symbol's value."""
        self.symbols = ", ".join(map(str, self.where))
        try:
            self.program, dims = self._size_free()
        except UnsupportedOp as e:  # name the cone's own node, where the backend cuts
            e.node = next((n for n, c in env.items() if c is e.node), None)
            raise
        key = (self.program.structural_hash(shapes=False), str(device))
        if key not in _BUCKETS:
            from prism.runtime import superoptimize

            _BUCKETS[key] = superoptimize(self.program, dynamic=dims, device=device, **options).buckets
        self.buckets = _BUCKETS[key]
        self._sized: Recent = Recent()
        self.record: dict[str, Any] = {}
        """The cone's `history` entry (prism.capture.backend, `attach`): it lists the sizes that ran torch's ops."""
        self._failed: set[tuple[int, ...]] = set()
        """The bindings Prism failed on: they run the cone's ATen ops from then on."""
        self.name = f"r{hashlib.sha256(str(self.graph).encode()).hexdigest()[:12]}_{next(_COUNT)}"
        from prism.runtime.torch_op import define

        self.op = define(self.name, "Tensor", self.run, self.fake)

    def _size_free(self) -> tuple[KernelGraph, dict[str, str]]:
        """The cone's program at the example's sizes and its dims that change with the symbols (as
        superoptimize's `dynamic`), if every symbol is read off an input and no constant depends on one."""
        free = set().union(*(_expr(n).free_symbols for p in self.inputs for n in _sizes(p.meta.get("val"))),
                           *(e.free_symbols for e in self.shape))
        if free - set(self.where):
            raise UnsupportedOp(f"sizes {', '.join(sorted(map(str, free - set(self.where))))} are not read off a "
                                "dim of its input tensors (as s, s + c or a·s + c), so a call cannot tell them")
        hints = {s: _hint(s, self.tensors, self.where) for s in self.where}
        program, _, _ = self._lower(hints)
        moved, _, _ = self._lower({s: 2 * n + 3 for s, n in hints.items()})  # sizes equal at the hints stay equal
        if program.structural_hash(shapes=False) != moved.structural_hash(shapes=False):
            raise UnsupportedOp("a constant of the cone depends on a dynamic size (e.g. a mean over a dynamic "
                                "dim), so one op cannot serve every size")
        return program, {f"{t.name}.{d}": f"{t.name}.{d}" for t, u in zip(program.inputs, moved.inputs)
                         for d, (m, n) in enumerate(zip(t.shape, u.shape)) if m != n}

    def _lower(self, binding: dict[Any, int]) -> tuple[KernelGraph, list[Source], tuple[int, ...]]:
        def size(n: Any) -> int:
            value = sympy.sympify(_expr(n).xreplace(binding))
            if not value.is_Integer:
                raise UnsupportedOp(f"a size {_expr(n)} that no input dim binds")
            return int(value)
        graph, sources, _ = lower(self.nodes, self.inputs, [self.root], size=size)
        return graph, sources, tuple(size(n) for n in self.root.meta["val"].shape)

    def attach(self, record: dict[str, Any]) -> None:
        """Keep `record` (the cone's history entry) up to date with the sizes that run torch's ops."""
        self.record = record

    def sized(self, binding: dict[Any, int]) -> _Sized:
        """The cone at `binding`: lowered, and its program's OptimizedGraph (tuned once per bucket)."""
        key = tuple(binding[s] for s in self.where)
        if key not in self._sized:
            graph, sources, shape = self._lower(binding)
            self._sized[key] = _Sized(self.buckets.get(graph), sources, shape)
        return self._sized[key]

    def run(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """The op's kernel: the root's value for the cone's input tensors `xs`. Where the size bucket's best is
        Prism's unfused program (no fused kernel beat it), the cone's own ATen ops compute it, as the backend leaves
        such a cone of fixed sizes to torch (prism.capture.backend._fused); so they do at a size Prism fails on
        (`_failed`)."""
        binding = {s: _solve(e, int(xs[i].shape[d])) for s, (i, d, e) in self.where.items()}
        key = tuple(binding[s] for s in self.where)
        if key not in self._failed:
            try:
                at = self.sized(binding)
                if not at.opt.report.unfused:
                    by_node = dict(zip(self.tensors, xs))
                    (out,) = at.opt.run_op([s.apply(by_node[s.node]) for s in at.sources])
                    result = self._empty(at.shape, xs[0].device)
                    result.copy_(out.reshape(at.shape))
                    return result
            except Exception as e:   # never the user's error: a PrismError says why, anything else is a bug of ours
                self._fail(key, binding, e if isinstance(e, PrismError) else
                           PrismError(f"internal error ({type(e).__name__}: {e}); please report it"))
        aten = self._aten(xs, binding)
        result = self._empty(tuple(aten.shape), xs[0].device)
        result.copy_(aten)
        return result

    def _fail(self, key: tuple[int, ...], binding: dict[Any, int], error: PrismError) -> None:
        self._failed.add(key)
        said = self.record.setdefault("torch at", [])
        if len(said) < TORCH_AT_KEPT:
            said.append(f"{', '.join(f'{s}={n}' for s, n in binding.items())}: {type(error).__name__}: {error}")
        else:
            self.record["torch at, not listed"] = self.record.get("torch at, not listed", 0) + 1
        log.warning("prism: the cone %s runs torch's ops at %s: %s", self.op, binding, error)

    def _aten(self, xs: list[torch.Tensor], binding: dict[Any, int]) -> torch.Tensor:
        """The cone's copy (`self.graph`) run on `xs`, its size inputs at `binding`."""
        tensors = iter(xs)
        values = [p.meta.get("val") for p in self.inputs]
        args = [next(tensors) if isinstance(v, torch.Tensor) else evaluate(_expr(v), binding)
                if isinstance(v, (int, torch.SymInt)) else v for v in values]
        return torch.fx.Interpreter(self._module).run(*args)

    @functools.cached_property
    def _module(self) -> torch.fx.GraphModule:
        """The cone's copy as a module, made at the first call that needs it (`_aten`)."""
        return torch.fx.GraphModule(torch.nn.Module(), self.graph)

    def fake(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """The op's fake: an empty tensor of the root's shape, in sizes of the inputs `xs` (symbolic or not)."""
        values = {s: _solve(e, xs[i].shape[d]) for s, (i, d, e) in self.where.items()}
        return self._empty([evaluate(e, values) for e in self.shape], xs[0].device)

    def _empty(self, shape: Sequence[Any], device: torch.device) -> torch.Tensor:
        """A new tensor of `shape` laid out as the root's value is (its dims' order in memory)."""
        inverse = sorted(range(len(self.order)), key=self.order.__getitem__)
        return torch.empty([shape[d] for d in self.order], dtype=self.dtype, device=device).permute(inverse)


def _readers(tensors: Sequence[Any]) -> dict[Any, tuple[int, int, Any]]:
    """Each symbol in the inputs' sizes, and the first dim of them whose size is a·s + c in it alone."""
    out: dict[Any, tuple[int, int, Any]] = {}
    for i, p in enumerate(tensors):
        for d, n in enumerate(p.meta["val"].shape):
            e = _expr(n)
            if len(e.free_symbols) == 1 and sympy.degree(e, *e.free_symbols) == 1:  # s, s + 1, 2·s
                out.setdefault(*e.free_symbols, (i, d, e))
    return out


def _sizes(val: Any) -> list[Any]:
    if isinstance(val, torch.Tensor):
        return list(val.shape)
    return [val] if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool) else []


def _solve(e: Any, n: Any) -> Any:
    """The value of the one symbol of `e` (a·s + c) that makes `e` equal `n` (an int, or a SymInt in the fake)."""
    (s,) = e.free_symbols
    a, c = int(e.coeff(s)), int(e.subs(s, 0))
    n = n - c if c else n
    return n // a if a != 1 else n


def _hint(symbol: Any, tensors: Sequence[Any], where: dict[Any, tuple[int, int, Any]]) -> int:
    """The size `symbol` had in the example Dynamo traced with."""
    i, d, e = where[symbol]
    n = tensors[i].meta["val"].shape[d]
    return _solve(e, int(n.node.hint if n.node.hint is not None else n.node.shape_env.size_hint(n.node.expr)))


def _stride_order(val: torch.Tensor) -> list[int]:
    """The dims of `val` from outermost to innermost in memory (its example's strides)."""
    strides = [s.node.hint if isinstance(s, torch.SymInt) else s for s in val.stride()]
    return sorted(range(val.dim()), key=lambda d: -strides[d])


def standalone(nodes: Sequence[Any], inputs: Sequence[Any], roots: Sequence[Any]) -> tuple[Any, dict[Any, Any]]:
    """A copy of the cone as an FX graph of its own (placeholders for its inputs; its one root's value, or a tuple
    of its roots'), and each original node's copy: the backend erases the original nodes once the region replaces
    them, and each new size lowers the copy again; torch's time for a cone runs it (prism.capture.against)."""
    g = torch.fx.Graph()
    env: dict[Any, Any] = {}
    for n in inputs:
        env[n] = g.placeholder(n.name)
        env[n].meta = dict(n.meta)
    for n in nodes:
        env[n] = g.node_copy(n, env.__getitem__)
    g.output(env[roots[0]] if len(roots) == 1 else tuple(env[r] for r in roots))
    return g, env
