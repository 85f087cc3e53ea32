"""Attention and QK-Attention (rms_norm on Q first): decode attention with two hand-written fused forms.

The program's softmax subtracts the row max before exp (torch's softmax), so it is right at the logit
scales of real models; the paper writes exp/sum/div, which overflows float16 once a logit passes 11. The
search reaches both forms from either (prism.symbolic.closure.SHIFT_FORMS) and the tuner only chooses one
that cannot overflow when one exists (prism.tune.safety).

The paper's fused form is two kernels. Kernel 1 runs a grid of (batch, kv split) blocks, each looping over its
share of the kv length and accumulating the unnormalised numerator exp(Q Kt) V and the denominator
sum(exp(Q Kt)); its savers leave the split dim y unmapped, so the splits are summed across blocks.
Kernel 2 divides the two. With `partials=True` (FlashDecoding's and Mirage's form) the savers map y to
the last dim instead, so each split's sums land side by side, and kernel 2 sums them in groups
(`group_sum`) before it divides: no atomics, the same bits every run. Either is correct only because both
sums distribute over the kv length; it has no max subtraction, so it overflows at realistic logits. The
online form (`online=True`) is one kernel per batch looping over the whole kv length with a running max,
rescaling its two sums as the max grows
(FlashAttention's online softmax, prism.ir.kinds.RunningMax), then dividing after the loop. With
`online=True, splits=S, partials=True` it is the safe split-KV form (FlashDecoding's): kernel 1's (batch,
split) blocks each run the online form over their share of the kv length and save their two sums and their
max side by side; kernel 2 rescales each split's sums by exp(m_split - max m) before it adds and divides.

GQA is the same program with one more batch dim: Q [b, k, g, d] holds the g query rows (group size times
query positions) that attend with KV head k, and Kt, V [b, k, ...] hold one entry per KV head, so MHA
(g = 1 per head at decode), GQA (g = heads / KV heads) and MQA (k = 1) are its configs. Every builder
here takes the batch dims from the config (`_lead`): grid dims x (and y) run over them, the next one over
kv splits.
"""

from __future__ import annotations

from functools import partial

import torch

from prism.ir import BlockGraph, KernelGraph, Launch, Tensor
from prism.ir.ops import rescaling
from prism.workloads.base import EPS, Config, PaperFigures, Workload, WorkloadError, default_tile, rms_norm

__all__ = ["ATTENTION", "GQA", "QK_ATTENTION", "default_split", "logit_scales"]

KV_ITERATIONS = 8
"""Default loop range of kernel 1: kv tiles per block; the rest of the kv length goes to splits."""

GRID = ("x", "y", "z")


def default_split(h: int) -> tuple[int, int]:
    """(splits, loop) defaults for kv length h: tiles of up to 64, up to 8 per block, each a divisor."""
    tiles = h // default_tile(h)
    loop = default_tile(tiles, KV_ITERATIONS)
    return tiles // loop, loop


def _lead(cfg: Config) -> tuple[int, ...]:
    """The batch dims in front of every tensor: (b,), or (b, k) with KV heads (GQA)."""
    return (cfg["b"], cfg["k"]) if "k" in cfg else (cfg["b"],)


def _per_batch(cfg: Config) -> dict[str, int]:
    """The imap of a block per batch entry: grid dim i over batch dim i."""
    return {GRID[i]: i for i in range(len(_lead(cfg)))}


def _declare(g: KernelGraph, cfg: Config, dtype: str) -> tuple[Tensor, Tensor, Tensor]:
    lead, queries, kv, dim = _lead(cfg), cfg["g"], cfg["h"], cfg["d"]
    return (g.input((*lead, queries, dim), dtype, "Q"), g.input((*lead, dim, kv), dtype, "Kt"),
            g.input((*lead, kv, dim), dtype, "V"))


def _graph(cfg: Config, dtype: str, *, qk_norm: bool) -> KernelGraph:
    g = KernelGraph()
    q, kt, v = _declare(g, cfg, dtype)
    last = len(_lead(cfg)) + 1
    s = g.matmul(g.rms_norm(q, EPS) if qk_norm else q, kt)
    e = g.exp(g.sub(s, g.max(s, last)))
    g.output(g.matmul(g.div(e, g.sum(e, last)), v))
    return g


def _fused(cfg: Config, dtype: str, *, qk_norm: bool, splits: int | None = None,
           loop: int | None = None, online: bool = False, partials: bool = False, tail: bool = False) -> KernelGraph:
    """Kernel 1 sums exp(Q Kt) V and exp(Q Kt) over kv per (batch, split) block; kernel 2 divides.
    With `online`, one kernel with a running max; with `partials`, the splits' sums are kept side by side
    and kernel 2 sums them in groups (see the module docstring); with `tail` too, kernel 2 has a block per
    batch entry and runs in the last block of kernel 1's batch entry (prism.codegen.tail)."""
    if tail and not partials:
        raise WorkloadError("tail=True runs a partials form's kernel 2 in kernel 1: it needs partials=True")
    g = KernelGraph()
    q, kt, v = _declare(g, cfg, dtype)
    if online:
        g.output(_online(g, cfg, q, kt, v, qk_norm, splits, loop, partials, tail))
        return g
    lead, batch = _lead(cfg), _per_batch(cfg)
    last, split = len(lead) + 1, GRID[len(lead)]                      # kv is Kt's last dim, V's one before
    default_splits, default_loop = default_split(cfg["h"])
    k1 = BlockGraph(grid=(*lead, default_splits if splits is None else splits),
                    loop=default_loop if loop is None else loop)
    bq = k1.input(q, imap=batch, fmap=None)                           # Q tile [.., g, d], every iteration
    bk = k1.input(kt, imap={**batch, split: last}, fmap=last)         # Kt tile [.., d, h/(splits*loop)]
    bv = k1.input(v, imap={**batch, split: last - 1}, fmap=last - 1)  # V tile [.., h/(splits*loop), d]
    if qk_norm:
        bq = k1.rms_norm(bq, EPS)                                     # the whole last dim is in the tile
    e = k1.exp(k1.matmul(bq, bk))                                     # E tile [.., g, h/(splits*loop)]
    kept = {split: last} if partials else {}                          # partials side by side, or summed
    k1.output(k1.accum(k1.matmul(e, bv)), omap={**batch, **kept})    # numerator [.., g, d]
    k1.output(k1.accum(k1.sum(e, last)), omap={**batch, **kept})     # denominator [.., g, 1]
    num, den = g.custom(k1, [q, kt, v])
    if partials:
        g.output(_sum_partials(g, cfg, num, den, tail))
        return g

    # Kernel 2: savers take only post-loop tensors, so each loaded tile goes through a 1-iteration
    # accum. Accumulating before the div keeps it right for any loop range (loop·num / loop·den).
    k2 = BlockGraph(grid=lead, loop=1)
    n2 = k2.accum(k2.input(num, imap=batch))                          # numerator tile [.., g, d]
    d2 = k2.accum(k2.input(den, imap=batch))                          # denominator tile [.., g, 1]
    k2.output(k2.div(n2, d2), omap=batch)
    (o,) = g.custom(k2, [num, den])
    g.output(o)
    return g


def _per_row(cfg: Config, tail: bool) -> tuple[BlockGraph, dict[str, int], int]:
    """Kernel 2 of a split form: a block per (batch, query row), or per batch entry as kernel 1's tail; its imap;
    and the dim the splits lie along."""
    lead = _lead(cfg)
    rows = lead if tail else (*lead, cfg["g"])
    return (BlockGraph(grid=rows, loop=1, launch=Launch(tail=bool(tail))), {GRID[i]: i for i in range(len(rows))},
            len(lead) + 1)


def _sum_partials(g: KernelGraph, cfg: Config, num: Tensor, den: Tensor, tail: bool) -> Tensor:
    """Kernel 2 of the split form with partials: a block per (batch, head) sums the splits' numerators (groups
    of d along the last dim) and denominators (groups of 1), then divides."""
    k2, imap, last = _per_row(cfg, tail)
    n2 = k2.group_sum(k2.accum(k2.input(num, imap=imap)), last, cfg["d"])   # [.., 1, splits·d] -> [.., 1, d]
    d2 = k2.group_sum(k2.accum(k2.input(den, imap=imap)), last, 1)          # [.., 1, splits] -> [.., 1, 1]
    k2.output(k2.div(n2, d2), omap=imap)
    (o,) = g.custom(k2, [num, den])
    return o


def _online(g: KernelGraph, cfg: Config, q: Tensor, kt: Tensor, v: Tensor, qk_norm: bool, splits: int | None,
            loop: int | None, partials: bool, tail: bool) -> Tensor:
    """A block per batch (and kv split) walks its kv range; m is the running row max, and both sums are online
    accumulators bound to it (they shrink by exp(m_before - m) whenever m grows). With one split the block
    divides them; with several (`partials`), each split saves its sums and its max side by side and kernel 2
    rescales them to the largest max before it adds and divides them (`_combine`)."""
    split = bool(partials)
    if splits not in (None, 1) and not split:
        raise WorkloadError(f"the online form with {splits} splits: the splits keep their sums as partials "
                            "(partials=True); without partials one block per batch divides them itself")
    if split and splits is None:
        splits, default_loop = default_split(cfg["h"])
        loop = default_loop if loop is None else loop
    lead, batch = _lead(cfg), _per_batch(cfg)
    last = len(lead) + 1
    tiles = cfg["h"] // default_tile(cfg["h"])
    k = BlockGraph(grid=(*lead, splits) if split else lead,
                   loop=loop if loop is not None else tiles // splits if split else tiles)
    at = {GRID[len(lead)]: last} if split else {}                     # the split walks kv (Kt's last dim)
    bq = k.input(q, imap=batch)                                       # Q tile [.., g, d], every iteration
    bk = k.input(kt, imap={**batch, **at}, fmap=last)                 # Kt tile [.., d, h/(splits·loop)]
    bv = k.input(v, imap={**batch, **{y: last - 1 for y in at}}, fmap=last - 1)  # V tile [.., h/(splits·loop), d]
    s = k.matmul(k.rms_norm(bq, EPS) if qk_norm else bq, bk)          # logits [.., g, h/(splits·loop)]
    row_max = k.max(s, last)
    m = k.running_max(row_max)                                        # row max so far [.., g, 1]
    p = k.exp(k.sub(s, m))                                            # <= 1: never overflows
    num = k.accum(k.matmul(p, bv), "accum_online", running=m)        # sum of p V, rescaled as m grows
    den = k.accum(k.sum(p, last), "accum_online", running=m)         # sum of p, the same
    if not split:
        k.output(k.div(num, den), omap=batch)
        (o,) = g.custom(k, [q, kt, v])
        return o
    for t in (num, den, k.accum(row_max, "accum_max")):              # each split's, side by side along kv
        k.output(t, omap={**batch, **at})
    return _combine(g, cfg, *g.custom(k, [q, kt, v]), tail)


def _combine(g: KernelGraph, cfg: Config, num: Tensor, den: Tensor, mx: Tensor, tail: bool) -> Tensor:
    """Kernel 2 of the safe split form (FlashDecoding's combine): a block per (batch, head) takes every split's
    max m_k, scales split k's sums by exp(m_k - max m) (at most 1), sums them in groups and divides."""
    k2, imap, last = _per_row(cfg, tail)
    n2, d2, m2 = (k2.accum(k2.input(t, imap=imap)) for t in (num, den, mx))   # [.., 1, splits·d], [.., 1, splits]
    scale = rescaling(k2, m2, k2.group_max(m2, last, 1))              # exp(m_k - max m) [.., 1, splits]
    n2 = k2.group_sum(k2.group_scale(n2, scale, last, cfg["d"]), last, cfg["d"])
    d2 = k2.group_sum(k2.group_scale(d2, scale, last, 1), last, 1)
    k2.output(k2.div(n2, d2), omap=imap)
    (o,) = g.custom(k2, [num, den, mx])
    return o


def _scales(cfg: Config) -> dict[str, float]:
    """Q and V are O(1); Kt is 0.5/sqrt(d), so logits have standard deviation about 0.5, as in the paper's
    inputs (rms_norm(Q) is O(1) as well). `logit_scales` gives the logits of real models."""
    return logit_scales(cfg, 0.5)


def logit_scales(cfg: Config, std: float) -> dict[str, float]:
    """Input scales (Workload.inputs' `scales`) whose logits Q·Kt have about standard deviation `std`
    (3 to 30 in real models; ±[0.5, 1.5) entries have mean square 13/12, and d terms add up)."""
    return {"Q": 1.0, "Kt": std / (13 / 12 * cfg["d"] ** 0.5), "V": 1.0}


def _reference(q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, *, qk_norm: bool) -> torch.Tensor:
    return torch.softmax((rms_norm(q) if qk_norm else q) @ kt, dim=-1) @ v


PAPER_GRID = [(2, 8, 1, 1024, 128), (2, 8, 128, 1024, 128), (2, 32, 1, 1024, 128), (4, 8, 1, 1024, 128)]
"""The paper's evaluation grid (batch, heads, queries, kv length, head dim), one KV head per query head."""

SWEEP = tuple({"b": batch * heads, "g": q, "h": kv, "d": d} for batch, heads, q, kv, d in PAPER_GRID)
"""PAPER_GRID in attention's keys: b counts (batch, head) pairs, g the queries each one attends with (1 at
decode, 128 in a short prefill)."""


def _workload(name: str, program: str, qk_norm: bool, display: str, paper: PaperFigures) -> Workload:
    return Workload(
        name=name, program=program, dims=("b", "g", "h", "d"),
        real_configs=({"b": 2, "g": 8, "h": 8 * 1024, "d": 128}, {"b": 2, "g": 8, "h": 8 * 2048, "d": 128}),
        fused_params=FUSED_PARAMS,
        graph_fn=partial(_graph, qk_norm=qk_norm), reference_fn=partial(_reference, qk_norm=qk_norm),
        scales_fn=_scales, fused_fn=partial(_fused, qk_norm=qk_norm),
        display=display, small={"b": 2, "g": 4, "h": 32, "d": 16}, medium={"b": 2, "g": 4, "h": 256, "d": 16},
        paper=paper, sweep=SWEEP)


FUSED_PARAMS = ("splits", "loop", "online", "partials", "tail")

ATTENTION = _workload("attention", "O = softmax(Q @ Kt) @ V", qk_norm=False, display="Attention",
                      paper=PaperFigures(("42.4", "10.0", "41"), (4, 3, 14)))
QK_ATTENTION = _workload("qk_attention", "O = softmax(rms_norm(Q) @ Kt) @ V", qk_norm=True, display="QK-Attention",
                         paper=PaperFigures(("154.5", "10.1", "42"), (4, 4, 14)))
GQA = Workload(
    name="gqa", program="O = softmax(Q @ Kt) @ V per KV head: Q [b, k, g, d], Kt [b, k, d, h], V [b, k, h, d]",
    dims=("b", "k", "g", "h", "d"),
    real_configs=({"b": 2, "k": 8, "g": 4, "h": 4096, "d": 128},     # GQA decode: 32 heads over 8 KV heads
                  {"b": 2, "k": 32, "g": 1, "h": 4096, "d": 128},    # MHA decode
                  {"b": 2, "k": 1, "g": 32, "h": 4096, "d": 128},    # MQA decode
                  {"b": 2, "k": 8, "g": 64, "h": 4096, "d": 128}),   # GQA short prefill: 16 positions x 4
    fused_params=FUSED_PARAMS,
    graph_fn=partial(_graph, qk_norm=False), reference_fn=partial(_reference, qk_norm=False),
    scales_fn=_scales, fused_fn=partial(_fused, qk_norm=False),
    display="GQA", small={"b": 2, "k": 2, "g": 4, "h": 32, "d": 16},
    medium={"b": 2, "k": 2, "g": 4, "h": 256, "d": 16},
    sweep=tuple({"b": batch, "k": heads, "g": q, "h": kv, "d": d} for batch, heads, q, kv, d in PAPER_GRID))
