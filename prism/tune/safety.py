"""Which candidates can overflow: an exp of a value with no upper bound.

exp overflows float16 above 11 and float32 above 88, logits of real models reach 100, and the generated
kernels store exp's tiles in the input dtype for Triton's dot. A candidate is safe when every exp it computes,
in a kernel or between kernels, is of `x - max(x, d)`, `x - running_max(max(x, d))` or `x - group_max(x, d, s)`
(split-KV's combine: each split's max against the largest) for the same x: a value at most 0, so exp is at
most 1 (sums of such values are bounded by their count). The op table says which ops play these parts
(prism.ir.ops.OnlineRule: an exponential, a shift, a bound). Everything else is
at risk for some inputs, since the verifier proves equality over the reals, not over float16. The tuner
marks such candidates in its report and never chooses one while a safe candidate survives
(prism.tune.tuner); a program written in the paper's exp/sum/div has safe forms in its search space
(prism.symbolic.closure.SHIFT_FORMS).
"""

from __future__ import annotations

from typing import Any

from prism.ir import BlockGraph, KernelGraph
from prism.ir.kinds import RUNNING_MAX
from prism.ir.ops import OPS, RUNNING

__all__ = ["overflow_risk"]


def overflow_risk(graph: KernelGraph) -> str | None:
    """Why `graph` can overflow (the first exp of an unbounded value), or None if it cannot."""
    blocks = [node.attrs["block"] for _, node in graph.topo() if node.op == "custom"]
    for k, block in enumerate(blocks, 1):
        risk = _risk(block)
        if risk:
            return f"kernel {k}: {risk}"
    return _risk(graph)


def _risk(g: KernelGraph | BlockGraph) -> str | None:
    for i, node in g.topo():
        if node.op in OPS and OPS[node.op].online.exponential and not _bounded(g, node.inputs[0]):
            return f"t{i} = {node.op}(t{node.inputs[0][0]}) of a value with no upper bound (no max subtracted)"
    return None


def _bounded(g: Any, ref: tuple[int, int]) -> bool:
    """ref is x - m, the shift of x by m, where m is a bound of x (max(x, d), group_max(x, d, s)) or a running
    max of one, for the same x: at most 0."""
    node = g.nodes[ref[0]]
    shift = OPS[node.op].online.shift if node.op in OPS else None
    if shift is None:
        return False
    x, m = (node.inputs[shift.takes.index(state)] for state in (None, RUNNING))
    stat = g.nodes[m[0]]
    if stat.op == RUNNING_MAX.name:
        stat = g.nodes[stat.inputs[0][0]]
    return stat.op in OPS and OPS[stat.op].online.bound and stat.inputs[0] == x
