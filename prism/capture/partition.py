"""Which parts of an ATen graph Prism takes: cones around matmuls, each small enough to search, and regions of
cones that share work.

A cone grows backward from a root (a compute node Prism has, whose value leaves the cone) through
producers Prism has:
  - a producer whose users are all in the cone joins it (its value never leaves);
  - a producer with users elsewhere joins too if it is cheap to compute twice (no matmul in what it
    computes): a norm feeding three projections is recomputed inside each projection's kernel; but not one
    that reads a matmul's value (`_after_matmul`), nor, inside what is computed twice, another value used
    elsewhere: such a value is stored anyway, so reading it costs no more than recomputing it, and
    recomputing it would pull the residual stream of every earlier layer (each residual add reads the one
    before) into every cone;
  - inside a matmul's operand, a node that depends on a matmul (not through an exp) does not join, unless it
    is a view (layout: it folds into the cone's input, e.g. attention's output viewed for the projection): the
    down projection of an MLP does not swallow the SwiGLU product that feeds it, which is a cone of its
    own; through an exp it does (the attention pattern matmul → softmax → matmul); two matmuls side by
    side (SwiGLU's gate and up) join freely;
  - at most `max_matmuls` matmuls and `max_ops` ops, so that the search stays tractable; layout ops do not
    count (they fold into shapes and the cone's inputs: a float16 model's casts around its norms and the
    transposes of its weights would otherwise cut a norm in two, its mean left to torch).
Cones grow from matmuls. A part of one that a cut leaves without a matmul (prism.capture.backend._take) is still
Prism's where it reduces (`REDUCTIONS`: Qwen3's norm of each head of Q and K, between the projection and the
transpose that Prism cannot take); element-wise ops alone are left to torch: elementwise fusion is what
Inductor does well. A producer that depends on a matmul only through a value used several times (a residual
that feeds the next norm) does not count as depending on it.

Cones that compute a node in common (a norm that Q, K and V each project) join into one region with several
outputs (`regions`): Prism searches each output's part and their joint forms, one kernel writing all of them
(prism.search.joint), so the norm is computed once and the three projections are one launch.
"""

from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prism.capture.aten import ATEN, op_name
from prism.capture.lower import IGNORED, SAME_NAMED, SOFTMAXES
from prism.capture.sdpa import ATTENTION_OPS
from prism.ir.ops import OPS

__all__ = ["Cone", "cones", "out_of_place", "regions", "MATMULS", "REDUCTIONS", "VIEWS"]

MATMULS = {"aten.mm.default": 1, "aten.bmm.default": 1, "aten.matmul.default": 1, "aten.linear.default": 1,
           "aten.addmm.default": 1} | dict.fromkeys(ATTENTION_OPS, 2)
"""The ops that contract, each with the matmuls it counts as (attention: Q Kᵀ and the product with V)."""
REDUCTIONS = {"aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.var_mean.correction",
              "aten.var.correction", "aten.var_mean.dim", "aten.var.dim", "aten.rms_norm.default",
              "aten.layer_norm.default", "aten.native_layer_norm.default", *SOFTMAXES}
"""The ops that reduce a dim (a norm's, a softmax's): a part of a cone with one is Prism's even without a matmul."""
EXPS = {aten for aten, name in SAME_NAMED.items() if OPS[name].online.exponential} | set(SOFTMAXES)
"""The ops whose value is an exponential (prism.ir.ops.OnlineRule), alone or in a softmax: a matmul's operand may
depend on a matmul through one, since the online softmax rescales what it scales."""
SPLITS = {"aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default"}
"""Ops whose users take one piece each (getitem): all of them together use the value once."""
VIEWS = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.expand.default",
         "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims",
         "aten.permute.default", "aten.t.default", "aten.transpose.int", "aten.clone.default", "aten.alias.default",
         "aten.detach.default", "aten.contiguous.default", "aten.to.dtype", "aten._to_copy.default",
         "aten.type_as.default", "prims.convert_element_type.default",
         "aten.slice.Tensor", *SPLITS}
"""Layout ops: never a cone's root, and joining a matmul's operand cone like the inputs they fold into (a slice
of a fused projection is the projection of a sliced weight, prism.capture.lower)."""


@dataclass
class Cone:
    """A region to hand to Prism: its output nodes (roots, in graph order) and its nodes (in graph order); a
    region of several joined cones keeps them as `parts` (taken one by one where the region cannot be)."""

    roots: list[Any]
    nodes: list[Any]
    parts: list[Cone] = field(default_factory=list)

    @property
    def root(self) -> Any:
        """The first root: where the region's op goes (before it), and its name in messages."""
        return self.roots[0]

    @property
    def name(self) -> str:
        return ", ".join(r.name for r in self.roots)

    @property
    def matmuls(self) -> int:
        return sum(MATMULS.get(op_name(n), 0) for n in self.nodes)

    @property
    def reduces(self) -> bool:
        return any(op_name(n) in REDUCTIONS for n in self.nodes)

    def live(self) -> list[Any]:
        """The cone's nodes its roots still depend on (an earlier cone's replacement can cut some off)."""
        members, found, stack = set(self.nodes), set(self.roots), list(self.roots)
        while stack:
            for p in stack.pop().all_input_nodes:
                if p in members and p not in found:
                    found.add(p)
                    stack.append(p)
        return [n for n in self.nodes if n in found]

    def cut(self, node: Any) -> tuple[set[Any], Cone]:
        """Where `node` cannot be lowered: `node` and the cone's nodes it depends on (they stay with torch), and
        the cone without them."""
        found = self._upstream(node)
        return found, Cone(self.roots, [n for n in self.nodes if n not in found])

    def before(self, node: Any) -> Cone | None:
        """Where `node` cannot be lowered: the cone's part before `node`, as a cone of its own, rooted at the values
        `node` reads from the cone (through layout ops, which stay with torch: a permute of a projection's output
        or of a norm's). Where that part has no matmul and `node` is one, the part ending at `node`: what comes
        after a matmul can stop it from lowering (Qwen3's norm of each head of K holds the projection's operand
        in the head's dims), and without it the matmul may lower. None where the part has neither a matmul nor a
        reduction."""
        members, roots, stack = set(self.nodes), [], [node]
        while stack:
            for p in stack.pop().all_input_nodes:
                if p not in members or p in roots:
                    continue
                if op_name(p) in VIEWS:
                    stack.append(p)
                else:
                    roots.append(p)
        found = set().union(*(self._upstream(r) for r in roots)) if roots else set()
        order = {n: i for i, n in enumerate(self.nodes)}
        part = Cone(sorted(roots, key=order.__getitem__), [n for n in self.nodes if n in found])
        if not part.matmuls and op_name(node) in MATMULS and node not in self.roots:
            upstream = self._upstream(node)
            part = Cone([node], [n for n in self.nodes if n in upstream])
        elif not part.matmuls:
            part = part.shared_values() or part
        return part if part.matmuls or part.reduces else None

    def shared_values(self) -> Cone | None:
        """The part of this cone ending at the values it computes that something outside it also reads (directly
        or through layout ops), rooted at the last of them; None where there is none. A norm's output that the
        cone multiplies by RoPE's cos, and that torch's rotate_half also reads (OLMo-2's Q in a decode step):
        rooted at its roots, the cone would compute the norm and torch would compute it again; rooted at the
        norm, torch reads it."""
        members = set(self.nodes)

        def source(n: Any) -> Any:   # the value a layout op of the cone shows
            while n is not None and op_name(n) in VIEWS:
                n = next((p for p in n.all_input_nodes if p in members), None)
            return n
        shared = {source(n) for n in self.nodes
                  if n not in self.roots and any(u not in members for u in n.users)} - {None, *self.roots}
        if not shared:
            return None
        roots = [n for n in self.nodes if n in shared and not any(n in self._upstream(m) for m in shared - {n})]
        found = set().union(*(self._upstream(r) for r in roots))
        return Cone(roots, [n for n in self.nodes if n in found])

    def _upstream(self, node: Any) -> set[Any]:
        """`node` and the cone's nodes it depends on (none where `node` is not the cone's), with the pieces
        (getitems) of every value of several results among them: a piece is a tensor the cone can read, the
        value it comes from (native_layer_norm's output, mean and rstd) is not."""
        members, found, stack = set(self.nodes), set(), [node]
        while stack:
            n = stack.pop()
            if n in members and n not in found:
                found.add(n)
                stack.extend(n.all_input_nodes)
        return found | {n for n in self.nodes if op_name(n) == "getitem" and n.args[0] in found}

    def detach(self, node: Any) -> tuple[set[Any], Cone] | None:
        """Where `node` cannot be lowered over one of its operands computed in the cone apart from the others (a
        norm's `1 + weight`, a vector that Prism cannot broadcast as an intermediate but can as an input): that
        operand and the cone's nodes only it depends on (they stay with torch, and the cone reads the value),
        and the cone without them; the smallest such operand, without a matmul. The node's other operands may be
        the cone's inputs (Nemotron's layer norm of an input with weight `1 + w`). None where there is none: then
        `cut`."""
        if node not in self.nodes:   # an UnsupportedOp may name no node of the cone (a size no input dim binds)
            return None
        members = set(self.nodes)
        operands = list(dict.fromkeys(p for p in node.all_input_nodes if p in members))
        if not operands or len(node.all_input_nodes) < 2:   # a unary op's operand is not apart from anything
            return None
        reach = {p: self._upstream(p) for p in operands}
        for p in sorted(operands, key=lambda q: len(reach[q])):
            others = set().union(*(reach[q] for q in operands if q is not p))
            if not reach[p] & others and not any(MATMULS.get(op_name(n), 0) for n in reach[p]):
                return reach[p], Cone(self.roots, [n for n in self.nodes if n not in reach[p]])
        return None

    def inputs(self) -> list[Any]:
        """The FX nodes the live cone reads, now, in graph order."""
        live = self.live()
        members = set(live)
        seen = {p: None for n in live for p in n.all_input_nodes if p not in members}
        order = {n: i for i, n in enumerate(self.root.graph.nodes)}
        return sorted(seen, key=order.__getitem__)


def _prism(node: Any) -> bool:
    if node.op != "call_function" or not (op_name(node) in ATEN or op_name(node) in IGNORED):
        return False
    return op_name(node) != "getitem" or _prism(node.args[0])  # a result of a Prism op (attention's output)


def out_of_place(graph: Any) -> int:
    """Turn each in-place ATen op whose target is an intermediate nothing else reads (torch's `nn.RMSNorm`:
    `x.pow(2).mean(-1, keepdim=True).add_(eps)`) into its out-of-place form, so that cones can take it; returns
    how many. Its value is the same, and no other node sees the target mutated: the target is a new tensor
    computed in the graph (not an input, a parameter or a buffer, whose mutation the caller sees, nor a view of
    another tensor, which the write changes too: RWKV fills a `zeros_like` one `select` at a time) and its only
    user is the op. Ops that mutate anything else stay as they are, and stay with torch."""
    import torch

    changed = 0
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        schema = target._schema
        if not schema.name.endswith("_") or not schema.arguments or not (schema.arguments[0].alias_info and
                                                                         schema.arguments[0].alias_info.is_write):
            continue
        base = node.args[0] if node.args else None
        if not _fresh(base) or set(base.users) != {node}:
            continue
        packet = getattr(torch.ops.aten, schema.name.split("::")[-1][:-1], None)
        pure = getattr(packet, target._overloadname, None) if packet is not None else None
        if pure is None or any(a.alias_info and a.alias_info.is_write for a in pure._schema.arguments):
            continue
        node.target = pure
        changed += 1
    return changed


def _fresh(node: Any) -> bool:
    """Whether `node` makes a new tensor: an ATen op none of whose results aliases an argument (a view does), or
    a result of such an op taken out of its tuple."""
    import torch

    if getattr(node, "op", None) != "call_function":
        return False
    if node.target is operator.getitem:
        return _fresh(node.args[0])
    return (isinstance(node.target, torch._ops.OpOverload)
            and all(r.alias_info is None for r in node.target._schema.returns))


def cones(graph: Any, max_ops: int = 16, max_matmuls: int = 2) -> list[Cone]:
    """The cones of `graph` (a torch.fx.Graph of ATen ops), roots in graph order, each with a matmul. A root's
    value is stored by its cone's kernel, so no other cone recomputes it: the sweep is repeated with the roots
    the last one found as stops until its roots are those stops (at most `SWEEPS`; the last sweep's cones are
    a partition either way, a stop that is no root being a value torch computes, like any other input)."""
    stored: set[Any] = set()
    for _ in range(SWEEPS):
        found = _sweep(graph, max_ops, max_matmuls, stored)
        roots = {c.root for c in found}
        if roots == stored:
            break
        stored = roots
    return found


SWEEPS = 4
"""Sweeps of `cones` at most: the stops settle in two or three on the models tested (a post-norm's residual
add, once a root, is read by the next layer's cones)."""


def _sweep(graph: Any, max_ops: int, max_matmuls: int, stored: set[Any]) -> list[Cone]:
    order = {n: i for i, n in enumerate(graph.nodes)}
    owned: set[Any] = set()
    found = []
    for root in reversed(list(graph.nodes)):
        if root in owned or not _prism(root) or op_name(root) in VIEWS | IGNORED:
            continue
        members = _grow(root, max_ops, max_matmuls, stored)
        cone = Cone([root], sorted(members, key=order.__getitem__))
        if cone.matmuls:
            found.append(cone)
            owned |= {n for n in members if n is root or all(u in members for u in n.users)}
    return sorted(found, key=lambda c: order[c.root])


def regions(found: list[Cone], max_outputs: int = 4) -> list[Cone]:
    """`found` (cones of one graph, in root order) with cones that compute a node in common (not a layout op)
    joined into regions of up to `max_outputs` roots, in order of their first root. A region's op goes before
    its first root, so cones join only where everything they read is there by then (a weight read later is
    a graph input or attribute, and moves up: `hoisted`)."""
    order = {n: i for i, n in enumerate(found[0].root.graph.nodes)} if found else {}
    out: list[Cone] = []
    for cone in found:
        shared = {n for n in cone.nodes if op_name(n) not in VIEWS}
        home = next((r for r in out if len(r.roots) < max_outputs and shared & set(r.nodes)
                     and _in_time(r, cone, order)), None)
        if home is None:
            out.append(Cone(cone.roots, cone.nodes, [cone]))
            continue
        home.roots = sorted(home.roots + cone.roots, key=order.__getitem__)
        home.nodes = sorted(set(home.nodes) | set(cone.nodes), key=order.__getitem__)
        home.parts.append(cone)
    for r in out:
        if len(r.parts) == 1:
            r.parts = []
    return out


def _in_time(region: Cone, cone: Cone, order: dict[Any, int]) -> bool:
    """Whether everything `cone` and `region` read is computed before their first root (or can move there)."""
    first = min(order[r] for r in region.roots + cone.roots)
    joined = Cone(region.roots + cone.roots, sorted(set(region.nodes) | set(cone.nodes), key=order.__getitem__))
    return all(order[n] < first or hoisted(n) for n in joined.inputs())


def hoisted(node: Any) -> bool:
    """Whether `node` reads nothing, so it can move before any other node (a module's weight, get_attr)."""
    return node.op in ("get_attr", "placeholder") and not node.all_input_nodes


def _grow(root: Any, max_ops: int, max_matmuls: int, stored: set[Any]) -> set[Any]:
    """The cone of `root` (see the module docstring), breadth first so the nearest producers come first; it
    reads the values in `stored` (other cones' roots) as inputs."""
    members = {root}
    ops, matmuls = 1, MATMULS.get(op_name(root), 0)
    queue = deque([(root, matmuls, False, False)])  # (node, under a matmul's operand, passed an exp since,
    after_mm: dict[Any, bool] = {}                   # computed twice: its value is also used outside)
    while queue:
        node, under_mm, saw_exp, twice = queue.popleft()
        for p in node.all_input_nodes:
            layout = op_name(p) in VIEWS
            if p in members or p in stored or not _prism(p) or (ops >= max_ops and not layout):
                continue
            is_mm = op_name(p) in MATMULS
            if (under_mm and not saw_exp and op_name(p) not in EXPS | VIEWS
                    and (is_mm or _after_matmul(p, after_mm))):
                continue
            outside = _used_outside(p, members)
            shared = twice or outside
            if is_mm and (matmuls + MATMULS[op_name(p)] > max_matmuls or shared):  # never computed twice
                continue
            if shared and (_after_matmul(p, after_mm) or twice and outside):  # its stored value is read
                continue
            members.add(p)
            ops += not layout
            matmuls += MATMULS.get(op_name(p), 0)
            queue.append((p, under_mm or is_mm, (saw_exp or op_name(p) in EXPS) and not is_mm, shared))
    return members


def _used_outside(node: Any, members: set[Any]) -> bool:
    """Is `node`'s value read outside the cone? A split's pieces (getitems) are read where their users are."""
    return any(u not in members and not (op_name(node) in SPLITS and all(v in members for v in u.users))
               for u in node.users)


def _after_matmul(node: Any, memo: dict[Any, bool]) -> bool:
    """Does `node` depend on a matmul through a chain of Prism ops that are used once each (a value used
    several times is materialized anyway, so reading it is reading an input), not through an exp?"""
    if node not in memo:
        memo[node] = False  # shared work
        memo[node] = any(_prism(p) and op_name(p) not in EXPS and (
            op_name(p) in MATMULS or ((len(p.users) == 1 or op_name(p) in SPLITS) and _after_matmul(p, memo)))
            for p in node.all_input_nodes)
    return memo[node]
