"""Graphs the code generator is tested on: the workloads at small sizes, and hand-made µGraphs that
each exercise one thing (split-K, three grid dims, strided inputs, padding, several outputs, ...).

Every case is `name -> () -> Case`; the interpreter runner and the AOT tests build the same graphs.
Inputs are drawn here so that both sides of a comparison see the same values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch

import prism
from prism.ir import BlockGraph, KernelGraph, Launch
from prism.workloads.attention import logit_scales
from prism.workloads.lora import LORA

__all__ = ["Case", "CASES", "AOT_CASES", "GEMV", "STREAMED", "launched_pdl", "projection"]


@dataclass
class Case:
    graph: KernelGraph
    inputs: list[torch.Tensor]
    rtol: float = 2e-2
    # views: input index -> a function giving the same values in another memory layout
    views: dict[int, Callable[[torch.Tensor], torch.Tensor]] = field(default_factory=dict)
    out_layout: str = "contiguous"   # or "reversed": the allocator hands out column-major buffers
    # torch's function of the inputs: then the outputs must also be finite and match it (relative error
    # at most 1e-2 of its largest entry), which catches what the executor shares with the kernels (overflow)
    torch_reference: Callable[..., torch.Tensor] | None = None
    # a mutant (tests/codegen/ragged_cases.py): an edit of the generated source, which must then fail
    mutate: Callable[[str], str] | None = None
    # runtime sizes (prism.codegen.layout): (input index, dim) -> size name; the kernels generated for this case
    # with those dims taken at launch also run each case of `others` (the same µGraph at other sizes)
    sizes: dict[tuple[int, int], str] = field(default_factory=dict)
    others: list["Case"] = field(default_factory=list)


def _rand(shape, dtype, seed, scale=1.0, positive=False):
    g = torch.Generator().manual_seed(seed)
    v = torch.rand(shape, generator=g) + 0.5 if positive else torch.rand(shape, generator=g) * 2 - 1
    return (v * scale).to(getattr(torch, dtype))


def _workload(name, cfg, fused=True, **params):
    def make() -> Case:
        w = prism.workloads.get(name)
        g = w.fused(cfg, **params) if fused else w.build(cfg)
        return Case(g, w.inputs(cfg, 0, torch.float16))
    return make


def split_k() -> Case:
    """X @ W with K split over grid dim y (unmapped in the saver: blocks summed, combined by the last block of
    each column tile, prism.codegen.split) and over the loop within each block."""
    g = KernelGraph()
    x, w = g.input((8, 64), "float16", "X"), g.input((64, 32), "float16", "W")
    b = BlockGraph(grid=(2, 2), loop=2)
    bx = b.input(x, imap={"y": 1}, fmap=1)                      # [8, 16]
    bw = b.input(w, imap={"x": 1, "y": 0}, fmap=0)              # [16, 16]
    b.output(b.accum(b.matmul(bx, bw)), omap={"x": 1})
    g.output(*g.custom(b, [x, w]))
    return Case(g, [_rand((8, 64), "float16", 1), _rand((64, 32), "float16", 2, 0.125)])


def split_k_norm_once() -> Case:
    """rms_norm(X) @ W split over K: grid x over W's columns, y over K (and the loop within each block). Both
    X @ W and sum(X²) are summed over y with atomic adds; sum(X²) is the same in every block along x (no tile
    it is computed from depends on x), so it is written once along x: only pid_x == 0 stores its partials and
    combines them. Kernel-level ops then finish the norm."""
    n, d, o = 4, 64, 32
    g = KernelGraph()
    x, w = g.input((n, d), "float16", "X"), g.input((d, o), "float16", "W")
    b = BlockGraph(grid=(2, 2), loop=2)
    bx = b.input(x, imap={"y": 1}, fmap=1)                      # [4, 16]
    bw = b.input(w, imap={"x": 1, "y": 0}, fmap=0)              # [16, 16]
    b.output(b.accum(b.matmul(bx, bw)), omap={"x": 1})
    b.output(b.accum(b.sum(b.square(bx), 1)), omap={}, once=("x",))
    p, ss = g.custom(b, [x, w])
    g.output(g.div(p, g.sqrt(g.add_scalar(g.mul_scalar(ss, 1 / d), 1e-6))))
    return Case(g, [_rand((n, d), "float16", 1), _rand((d, o), "float16", 2, 0.125)],
                torch_reference=lambda x, w: prism.workloads.base.rms_norm(x.float()) @ w.float())


def projection(m: int, k: int, n: int, block_n: int, block_k: int, splits: int = 1, dtype: str = "float16",
               gemv: bool = True) -> Callable[[], Case]:
    """A decode step's projection X [m, k] @ W [k, n] with W in a Linear's layout (stored [n, k], K contiguous),
    as a GEMV launch (prism.ir.Launch): grid x over columns in tiles of `block_n` (the last one partial where it
    does not divide n), K in tiles of `block_k` over the loop and, with `splits`, over grid dim y too (summed:
    split-K combined in the launch, prism.codegen.split)."""
    def make() -> Case:
        g = KernelGraph()
        x, w = g.input((m, k), dtype, "X"), g.input((k, n), dtype, "W")
        loop = -(-k // (block_k * splits))
        b = BlockGraph(grid=(-(-n // block_n), splits) if splits > 1 else (-(-n // block_n),), loop=loop,
                       launch=Launch(gemv=gemv))
        bx = b.input(x, imap={"y": 1} if splits > 1 else {}, fmap=1)
        bw = b.input(w, imap={"x": 1, "y": 0} if splits > 1 else {"x": 1}, fmap=0)
        b.output(b.accum(b.matmul(bx, bw)), omap={"x": 1}, shape=(m, n))
        g.output(*g.custom(b, [x, w]))
        inputs = [_rand((m, k), dtype, 11), _rand((k, n), dtype, 12, k ** -0.5)]
        return Case(g, inputs, views={1: lambda t: t.t().contiguous().t()},
                    torch_reference=lambda x, w: x @ w)
    return make


STREAMED = {
    "streamed_moe": _workload("moe", {"e": 2, "n": 16, "d": 512, "f": 128}, splits=2, loop=2),
    "streamed_projection_before_the_loop": projection(16, 512, 128, 64, 512, gemv=False),
    "streamed_projection_padded_rows_f32": projection(5, 512, 96, 32, 512, dtype="float32", gemv=False),
}
"""Matmuls of two loaded tiles over a K of 512, summed in chunks of K (prism.codegen.stream): MoE's X @ W1 in every
iteration (X loop-invariant, W1 walked), and a projection with no loop (both operands before it), once with rows
padded to 16 and float32 products."""


GEMV = {
    "gemv_m1_n32000_k2048_f16": projection(1, 2048, 32000, 1024, 512),
    "gemv_m3_n5632_k5632_f32": projection(3, 5632, 5632, 512, 512, dtype="float32"),
    "gemv_m8_n5632_k2048_f16": projection(8, 2048, 5632, 256, 256),
    "gemv_m3_n32000_k5632_f16": projection(3, 5632, 32000, 512, 512),
    "split_gemv_m1_n32000_k5632_f16": projection(1, 5632, 32000, 1024, 256, splits=2),
    "split_gemv_m3_n5632_k2048_f32": projection(3, 2048, 5632, 512, 256, splits=4, dtype="float32"),
    "split_gemv_m8_n32000_k2048_f16": projection(8, 2048, 32000, 256, 256, splits=2),
    "split_dot_m8_n5632_k5632_f32": projection(8, 5632, 5632, 512, 256, splits=2, dtype="float32", gemv=False),
}
"""Decode projections at the odd sizes of a Llama step (vocabulary 32000, MLP 5632 = 11 · 512), one to eight
rows, as GEMVs and split-K in one launch (and one split-K as Triton's dot)."""


def grid3() -> Case:
    """Batched matmul then silu over three grid dims: z -> batch, y -> rows, x -> columns."""
    g = KernelGraph()
    a, bb = g.input((2, 32, 64), "float16", "A"), g.input((2, 64, 32), "float16", "B")
    b = BlockGraph(grid=(2, 2, 2), loop=2)
    ta = b.input(a, imap={"z": 0, "y": 1}, fmap=2)              # [1, 16, 32]
    tb = b.input(bb, imap={"z": 0, "x": 2}, fmap=1)             # [1, 32, 16]
    b.output(b.silu(b.accum(b.matmul(ta, tb))), omap={"z": 0, "y": 1, "x": 2})
    g.output(*g.custom(b, [a, bb]))
    return Case(g, [_rand((2, 32, 64), "float16", 3), _rand((2, 64, 32), "float16", 4, 0.125)])


def _large_logits(name, cfg, **params):
    """A workload's online (running-max) form on float16 inputs whose logits have standard deviation 30,
    as in real models: exp(Q Kt) without the max would overflow float16 (above 11)."""
    def make() -> Case:
        w = prism.workloads.get(name)
        xs = w.inputs(cfg, 0, torch.float16, scales=logit_scales(cfg, 30.0))
        return Case(w.fused(cfg, online=True, **params), xs, torch_reference=w.reference)
    return make


def searched_safe_split_kv(tail: bool = False) -> Callable[[], Case]:
    """The search's safe split-KV attention (each split's online sums and max side by side, kernel 2 rescales
    them to the largest max with group_max and group_scale), at 2 splits and a loop of 2, logit std 30; with
    `tail`, kernel 2 runs in the last block of each batch entry of kernel 1 (prism.codegen.tail)."""
    def make() -> Case:
        from prism.search import search
        from prism.search.canonical import signature
        from tests.configs import SMALL_ATT

        w = prism.workloads.get("attention")
        result = search(w.build(SMALL_ATT), workers=1, max_block_ops=12, max_grid=2)
        want = signature(w.fused(SMALL_ATT, online=True, splits=2, loop=2, partials=True))
        (i,) = [i for i, g in enumerate(result.graphs)
                if g.mapping.partials and not g.mapping.tail and signature(result.instantiate(i)) == want]
        if tail:   # its sibling: the same structure and maps, kernel 2 as kernel 1's tail
            m = result.graphs[i].mapping
            (i,) = [k for k, g in enumerate(result.graphs) if g.structure == result.graphs[i].structure
                    and g.mapping == dataclasses.replace(m, tail=True)]
        xs = w.inputs(SMALL_ATT, 0, torch.float16, scales=logit_scales(SMALL_ATT, 30.0))
        return Case(result.instantiate(i, grid=(2, 2), loop=2), xs, torch_reference=w.reference)
    return make


def lora() -> Case:
    """LoRA: B's tile is loop-invariant (loaded once before the loop) and multiplied into acc(X @ A) after
    it; d split by a loop of 2, the columns by a grid of 2."""
    cfg = {"n": 4, "d": 64, "r": 16, "o": 64}
    return Case(LORA.fused(cfg, loop=2), LORA.inputs(cfg, 0, torch.float16), torch_reference=LORA.reference)


def softmax_matmul_program(n: int = 4, d: int = 64, k: int = 16, dtype: str = "float16") -> KernelGraph:
    """softmax(X) @ W written the paper's way: exp(X) / sum(exp(X)), no max subtracted."""
    g = KernelGraph()
    x, w = g.input((n, d), dtype, "X"), g.input((d, k), dtype, "W")
    e = g.exp(x)
    g.output(g.matmul(g.div(e, g.sum(e, 1)), w))
    return g


def searched_softmax_matmul() -> Case:
    """The first running-max form the search finds for softmax_matmul_program, on entries up to ±45
    (float16's exp overflows above 11): the form the search adds (the max subtraction) keeps it finite."""
    from prism.search import search
    from prism.tune.safety import overflow_risk

    program = softmax_matmul_program()
    result = search(program, workers=1, max_block_ops=11, max_grid=1)
    graphs = (result.instantiate(i) for i in range(len(result)))
    online = next(g for g in graphs if overflow_risk(g) is None
                  and any(n.op == "running_max" for b in g.blocks for _, n in b.topo()))
    x, w = _rand((4, 64), "float16", 21, 30.0), _rand((64, 16), "float16", 22)
    return Case(online, [x, w], torch_reference=lambda x, w: torch.softmax(x, 1) @ w)


def searched_split_kv_partials() -> Case:
    """The search's split-KV attention with partials (kernel 1's splits side by side, then group_sum kernels
    and the division), at 2 batches × 2 splits and a loop of 2."""
    from prism.search import search
    from prism.search.canonical import signature
    from tests.configs import SMALL_ATT, limits

    w = prism.workloads.get("attention")
    result = search(w.build(SMALL_ATT), workers=1, **limits("attention", fused=True))
    want = signature(w.fused(SMALL_ATT, partials=True))
    (i,) = [i for i, g in enumerate(result.graphs) if g.mapping.partials and signature(result.instantiate(i)) == want]
    return Case(result.instantiate(i, grid=(2, 2), loop=2), w.inputs(SMALL_ATT, 0, torch.float16))


def searched_constrained(kind: str) -> Callable[[], Case]:
    """The search's split-KV attention whose second kernel's loop walks the splits (kind "walk", class D), or
    whose first kernel sums each exp tile in groups of 16 ("group", class B): the first such form with a loop, at
    2 splits and a loop of 2 (walk) or 1 (group: a tile of 16 keys holds one group)."""
    def make() -> Case:
        from prism.search import search
        from tests.configs import SMALL_ATT, limits

        w = prism.workloads.get("attention")
        result = search(w.build(SMALL_ATT), workers=1, **limits("attention", fused=True))
        i, sg = next((i, sg) for i, sg in enumerate(result.graphs) if getattr(sg.mapping, kind) and sg.mapping.loop)
        (p,), = [fold.keys() for fold in sg.structure.problem().partials(sg.mapping)[:1]]
        grid = tuple(2 if d == p else 1 for d in "xyz"[:sg.n_grid])
        return Case(result.instantiate(i, grid=grid, loop=2 if kind == "walk" else 1),
                    w.inputs(SMALL_ATT, 0, torch.float16))
    return make


def searched_joint_qkv() -> Case:
    """One kernel writing Q, K and V of one norm (prism.search.joint), the first joint form the search finds whose
    loop walks the norm's dim (the sum of squares accumulated once for the three), at a grid of 2 and a loop of 2."""
    from prism.search import search
    from tests.search.test_joint import norm_qkv, torch_norm_qkv

    program = norm_qkv(dtype="float16")
    result = search(program, workers=1, max_block_ops=12, max_grid=1)
    i = next(i for i, sg in enumerate(result.graphs)
             if sg.mapping.loop and sg.n_grid == 1 and sg.mapping.grid and not sg.structure.kernel_ops)
    xs = [_rand(t.shape, "float16", 30 + k) for k, t in enumerate(program.inputs)]
    return Case(result.instantiate(i, grid=(2,), loop=2), xs, torch_reference=torch_norm_qkv)


def long_rows_softmax() -> Case:
    """The max-subtracted softmax over rows of 3000 (a looped max kernel with masked lanes), unfused."""
    g = KernelGraph()
    x = g.input((2, 3000), "float32", "X")
    e = g.exp(g.sub(x, g.max(x, 1)))
    g.output(g.div(e, g.sum(e, 1)))
    x0 = _rand((2, 3000), "float32", 23, 100.0)
    return Case(g, [x0], rtol=1e-4, torch_reference=lambda x: torch.softmax(x, 1))


def strided() -> Case:
    """Fused attention given Kt as a transposed view of K [b, h, d] and Q as a permuted view: every
    input addressed through its real strides; outputs handed out column-major by the allocator."""
    w = prism.workloads.get("attention")
    cfg = {"b": 2, "g": 4, "h": 32, "d": 16}
    q, kt, v = w.inputs(cfg, 0, torch.float16)
    views = {0: lambda t: t.permute(1, 0, 2).contiguous().permute(1, 0, 2),     # Q stored [g, b, d]
             1: lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)}       # Kt stored as K [b, h, d]
    return Case(w.fused(cfg, splits=2, loop=2), [q, kt, v], views=views, out_layout="reversed")


def strided_rmsnorm() -> Case:
    """Fused RMSNorm with W given as W.t() of a row-major matrix (column-major), X with a row stride
    larger than its width (a slice of a wider tensor)."""
    w = prism.workloads.get("rmsnorm")
    cfg = {"n": 4, "d": 64}
    x, wt = w.inputs(cfg, 0, torch.float16)
    views = {0: lambda t: torch.cat([t, t], 1)[:, :64],
             1: lambda t: t.t().contiguous().t()}
    return Case(w.fused(cfg, grid=2, loop=2), [x, wt], views=views, out_layout="reversed")


def non_pow2() -> Case:
    """RMSNorm-MLP at n=3, d=96: X tiles [3, 48] padded to [16, 64], W tiles [48, 48] padded to [64, 64]."""
    return _workload("rmsnorm_mlp", {"n": 3, "d": 96}, grid=2, loop=2)()


def non_pow2_softmax() -> Case:
    """Attention with kv tiles of 12 (padded to 16): exp of the padded lanes is 1, so the sum over kv
    and the second matmul's K must mask them."""
    return _workload("qk_attention", {"b": 2, "g": 3, "h": 48, "d": 24}, splits=2, loop=2)()


def all_ops() -> Case:
    """Every elementwise op, a sum and an rms_norm on non-power-of-two tiles ([3, 12] padded to
    [4, 16]), after arithmetic that leaves garbage in padded lanes; three outputs, float32."""
    g = KernelGraph()
    x = g.input((6, 24), "float32", "X")
    y = g.input((6, 1), "float32", "Y")
    b = BlockGraph(grid=(2, 2), loop=1)
    tx = b.input(x, imap={"x": 0, "y": 1})                       # [3, 12]
    ty = b.input(y, imap={"x": 0})                               # [3, 1]
    t = b.accum(tx)
    u = b.accum(ty)
    p = b.add_scalar(b.sqrt(b.add_scalar(b.square(t), 1.0)), 0.5)   # > 1: every op below is defined
    e = b.exp(b.mul_scalar(p, -0.5))
    h = b.add(b.gelu(b.sub(p, e)), b.relu(b.neg(e)))
    s = b.silu(b.div(h, u))                                       # [3, 12] / [3, 1] broadcast
    b.output(b.rms_norm(b.mul(s, e), 0.001), omap={"x": 0, "y": 1})
    b.output(b.sum(b.add_scalar(e, 1.0), 1), omap={"x": 0})      # summed over y
    b.output(b.sum(e, 0), omap={"y": 1})                         # summed over x
    g.output(*g.custom(b, [x, y]))
    return Case(g, [_rand((6, 24), "float32", 5), _rand((6, 1), "float32", 6, positive=True)], rtol=1e-4)


def several_outputs() -> Case:
    """One kernel, three outputs: a column-tiled matmul, a replicated-and-summed sum (grid dim y is in
    no map, so its 2 blocks each add the same tile), and sum(X²) summed over x; the last two feed a
    second custom op through fp32 intermediate buffers."""
    g = KernelGraph()
    x, w = g.input((4, 32), "float16", "X"), g.input((32, 32), "float16", "W")
    b = BlockGraph(grid=(2, 2), loop=2)
    bx = b.input(x, imap={"x": 1}, fmap=1)                       # [4, 8]
    bw = b.input(w, imap={"x": 0}, fmap=0)                       # [8, 32]
    xw = b.accum(b.matmul(bx, bw))                               # [4, 32], summed over x and y
    ss = b.accum(b.sum(b.square(bx), 1))                         # [4, 1]
    b.output(xw)
    b.output(ss)
    b.output(b.mul_scalar(ss, 0.5), omap={})
    o1, o2, o3 = g.custom(b, [x, w])
    b2 = BlockGraph(grid=(2,), loop=1)
    t1 = b2.accum(b2.input(o1, imap={"x": 1}))
    t2 = b2.accum(b2.input(o2))
    t3 = b2.accum(b2.input(o3))
    b2.output(b2.div(t1, b2.sqrt(b2.add(t2, t3))), omap={"x": 1})
    (o,) = g.custom(b2, [o1, o2, o3])
    g.output(o, o2)
    return Case(g, [_rand((4, 32), "float16", 7), _rand((32, 32), "float16", 8, 0.2)])


def kernel_ops() -> Case:
    """Kernel-level ops between custom ops, each lowered to its own Triton kernel: exp, a broadcast
    mul, sum, a 4-D batched matmul, rms_norm with whole rows, rank-1 vectors."""
    g = KernelGraph()
    x = g.input((4, 64), "float16", "X")
    w = g.input((64, 32), "float16", "W")
    v = g.input((32,), "float16", "v")
    a = g.input((2, 2, 16, 32), "float16", "A")
    b = BlockGraph(grid=(2,), loop=2)                            # custom 1: X @ W
    b.output(b.accum(b.matmul(b.input(x, fmap=1), b.input(w, imap={"x": 1}, fmap=0))), omap={"x": 1})
    (xw,) = g.custom(b, [x, w])
    e = g.exp(g.mul_scalar(xw, 0.25))                            # kernel ops on the fp32 intermediate
    s = g.sum(g.mul(e, g.input((1, 32), "float16", "R")), 1)     # [4, 1]
    b2 = BlockGraph(grid=(2,), loop=1)                           # custom 2: e / s
    b2.output(b2.div(b2.accum(b2.input(e, imap={"x": 1})), b2.accum(b2.input(s))), omap={"x": 1})
    (o,) = g.custom(b2, [e, s])
    vv = g.add(g.exp(v), v)
    ab = g.matmul(a, g.rms_norm(g.input((2, 2, 32, 16), "float16", "B"), 1e-5))
    g.output(o, vv, ab)
    ins = [_rand((4, 64), "float16", 9), _rand((64, 32), "float16", 10, 0.125), _rand((32,), "float16", 11),
           _rand((2, 2, 16, 32), "float16", 12), _rand((1, 32), "float16", 13, positive=True),
           _rand((2, 2, 32, 16), "float16", 14)]
    return Case(g, ins)


def long_rows() -> Case:
    """rms_norm over rows of 32768 (more than one tile): a looped sum-of-squares kernel, then a divide."""
    g = KernelGraph()
    x = g.input((2, 32768), "float32", "X")
    g.output(g.rms_norm(x, 1e-6))
    return Case(g, [_rand((2, 32768), "float32", 15)], rtol=1e-4)


def broadcast_padding() -> Case:
    """Size-1 tile dims that tl.dot pads to 16: X [1, 64] @ W gives a [1, 16] tile padded to [16, 16]
    that must broadcast against Y's [4, 16] rows (lane 0 is cut out first); and a sum's [4, 1] result
    used as a matmul's K (padded to 16, its value in lane 0)."""
    g = KernelGraph()
    x, w = g.input((1, 64), "float16", "X"), g.input((64, 32), "float16", "W")
    y, r = g.input((4, 32), "float16", "Y"), g.input((1, 32), "float16", "R")
    b = BlockGraph(grid=(2,), loop=1)
    xw = b.matmul(b.input(x), b.input(w, imap={"x": 1}))          # [1, 16]
    ty = b.input(y, imap={"x": 1})                               # [4, 16]
    s = b.sum(ty, 1)                                             # [4, 1]
    sr = b.matmul(s, b.input(r, imap={"x": 1}))                  # [4, 1] @ [1, 16]
    b.output(b.accum(b.add(b.add(xw, ty), sr)), omap={"x": 1})
    g.output(*g.custom(b, [x, w, y, r]))
    return Case(g, [_rand((1, 64), "float16", 16), _rand((64, 32), "float16", 17, 0.125),
                    _rand((4, 32), "float16", 18), _rand((1, 32), "float16", 19, 0.1)])


def fp32_dot() -> Case:
    """A float32 graph: tl.dot in "ieee" precision, compared at 1e-4."""
    g = KernelGraph()
    x, w = g.input((16, 48), "float32", "X"), g.input((48, 32), "float32", "W")
    b = BlockGraph(grid=(2,), loop=3)
    b.output(b.accum(b.matmul(b.input(x, fmap=1), b.input(w, imap={"x": 1}, fmap=0))), omap={"x": 1})
    g.output(*g.custom(b, [x, w]))
    return Case(g, [_rand((16, 48), "float32", 20), _rand((48, 32), "float32", 21)], rtol=1e-4)


def group_sums() -> Case:
    """group_sum and group_max as kernel ops (lowered to a loop over the groups: any group size, here 3) and
    inside a kernel (a reshape: groups of 4 along a tile of 12 padded to 16, after an exp that leaves 1 in
    the padded lanes, which the max must not see); group_scale as a kernel op and inside a kernel (groups
    of 4 scaled by a padded [3, 3] tile; one group of 3, any size)."""
    g = KernelGraph()
    x, s = g.input((6, 12), "float32", "X"), g.input((6, 3), "float32", "S")
    b = BlockGraph(grid=(2,), loop=1)
    t = b.exp(b.accum(b.input(x, imap={"x": 0})))                 # [3, 12], padded to [4, 16]
    ts = b.accum(b.input(s, imap={"x": 0}))                       # [3, 3], padded to [4, 4]
    b.output(b.group_sum(t, 1, 4), omap={"x": 0})                # [3, 4]
    b.output(b.group_max(b.neg(t), 1, 4), omap={"x": 0})         # [3, 4]
    b.output(b.group_scale(t, ts, 1, 4), omap={"x": 0})          # [3, 12]
    b.output(b.group_scale(ts, b.max(ts, 1), 1, 3), omap={"x": 0})   # [3, 3]
    ys = g.custom(b, [x, s])
    g.output(*ys, g.group_sum(x, 1, 3), g.group_sum(x, 0, 2), g.group_max(x, 1, 3), g.group_scale(x, s, 1, 4))
    return Case(g, [_rand((6, 12), "float32", 22), _rand((6, 3), "float32", 23)], rtol=1e-4)


SMALL = {
    "rmsnorm": ({"n": 4, "d": 64}, {"grid": 2, "loop": 2}),
    "rmsnorm_mlp": ({"n": 4, "d": 64}, {"grid": 2, "loop": 2}),
    "swiglu": ({"n": 4, "d": 64}, {"grid": 2, "loop": 2}),
    "attention": ({"b": 2, "g": 4, "h": 32, "d": 16}, {"splits": 2, "loop": 2}),
    "qk_attention": ({"b": 2, "g": 4, "h": 32, "d": 16}, {"splits": 2, "loop": 2}),
    "rmsnorm_linear": ({"n": 4, "d": 64, "o": 96}, {"grid": 3, "loop": 2}),
    "gqa": ({"b": 2, "k": 2, "g": 4, "h": 32, "d": 16}, {"splits": 2, "loop": 2}),   # grid (b, k, splits)
    "ntrans": ({"n": 4, "d": 64}, {"grid": 2}),
    "moe": ({"e": 2, "n": 4, "d": 32, "f": 64}, {"splits": 2, "loop": 2}),           # splits summed
}

def launched_pdl(graph: KernelGraph) -> KernelGraph:
    """`graph` with every kernel launched with programmatic dependent launch (prism.ir.Launch.pdl)."""
    for _, node in graph.topo():
        if node.op == "custom":
            node.attrs["block"].launch = dataclasses.replace(node.attrs["block"].launch, pdl=True)
    return graph


def _pdl(make: Callable[[], Case]) -> Callable[[], Case]:
    """`make`'s case with every kernel launched with programmatic dependent launch: the interpreter leaves its
    instructions out, and the kernels compute the same."""
    def made() -> Case:
        case = make()
        launched_pdl(case.graph)
        return case
    return made


CASES: dict[str, Callable[[], Case]] = {
    **{f"fused_{n}": _workload(n, cfg, **p) for n, (cfg, p) in SMALL.items()},
    **{f"unfused_{n}": _workload(n, cfg, fused=False) for n, (cfg, p) in SMALL.items()},
    "split_k": split_k,
    "split_k_norm_once": split_k_norm_once,
    "grid3": grid3,
    "strided": strided,
    "strided_rmsnorm": strided_rmsnorm,
    "non_pow2": non_pow2,
    "non_pow2_softmax": non_pow2_softmax,
    "all_ops": all_ops,
    "several_outputs": several_outputs,
    "kernel_ops": kernel_ops,
    "long_rows": long_rows,
    "broadcast_padding": broadcast_padding,
    "fp32_dot": fp32_dot,
    "large_logits_attention": _large_logits("attention", SMALL["attention"][0], loop=4),
    "large_logits_qk_attention": _large_logits("qk_attention", SMALL["qk_attention"][0], loop=4),
    "large_logits_non_pow2": _large_logits("qk_attention", {"b": 2, "g": 3, "h": 48, "d": 24}, loop=4),
    # one kv position per iteration (a decode step's KV cache of 513 tokens has no other power-of-two tile):
    # the running max's size-1 dim shares the kv tile's class, padded to 16 for tl.dot, and is cut back to one
    # lane before it rescales the [g, d] accumulator
    "large_logits_kv_tile_1": _large_logits("attention", {"b": 2, "g": 1, "h": 12, "d": 32}, loop=12),
    # safe split-KV: each split's own max, rescaled to the largest in kernel 2 (3 splits: a padded group dim)
    "large_logits_split_kv": _large_logits("attention", SMALL["attention"][0], splits=2, loop=2, partials=True),
    "large_logits_split_kv_non_pow2": _large_logits("qk_attention", {"b": 2, "g": 3, "h": 48, "d": 16}, splits=3,
                                                    loop=2, partials=True),
    "searched_safe_split_kv": searched_safe_split_kv(),
    # kernel 2 as the tail of kernel 1 (prism.codegen.tail): its last block of each row combines the row
    "searched_safe_split_kv_tail": searched_safe_split_kv(tail=True),
    "split_kv_partials_tail": _workload("attention", SMALL["attention"][0], splits=2, loop=2, partials=True,
                                        tail=True),
    "large_logits_split_kv_tail": _large_logits("attention", SMALL["attention"][0], splits=2, loop=2, partials=True,
                                                tail=True),
    "large_logits_split_kv_tail_non_pow2": _large_logits("qk_attention", {"b": 2, "g": 3, "h": 48, "d": 16},
                                                         splits=3, loop=2, partials=True, tail=True),
    "large_logits_gqa_split_kv_tail": _large_logits("gqa", SMALL["gqa"][0], splits=2, loop=2, partials=True,
                                                    tail=True),
    "split_kv_partials": _workload("attention", SMALL["attention"][0], splits=2, loop=2, partials=True),
    "split_kv_partials_non_pow2": _workload("qk_attention", {"b": 2, "g": 3, "h": 48, "d": 16}, splits=3, loop=2,
                                            partials=True),
    "group_sums": group_sums,
    "searched_split_kv_partials": searched_split_kv_partials,
    "searched_split_kv_walk": searched_constrained("walk"),
    "searched_split_kv_group": searched_constrained("group"),
    "searched_softmax_matmul": searched_softmax_matmul,
    "searched_joint_qkv": searched_joint_qkv,
    "long_rows_softmax": long_rows_softmax,
    "lora": lora,
    # GQA's safe split-KV form: grid (batch, KV head, split), kernel 2 a block per (batch, KV head, row)
    "large_logits_gqa_split_kv": _large_logits("gqa", SMALL["gqa"][0], splits=2, loop=2, partials=True),
    **GEMV,
    **STREAMED,
    "pdl_split_k": _pdl(split_k),
    "pdl_split_kv_partials": _pdl(_workload("attention", SMALL["attention"][0], splits=2, loop=2, partials=True)),
    "pdl_split_kv_partials_tail": _pdl(_workload("attention", SMALL["attention"][0], splits=2, loop=2,
                                                 partials=True, tail=True)),
}

REAL = {
    "rmsnorm": {"n": 8, "d": 4096},
    "rmsnorm_mlp": {"n": 16, "d": 1024},
    "swiglu": {"n": 8, "d": 4096},
    "attention": {"b": 2, "g": 8, "h": 8 * 2048, "d": 128},
    "qk_attention": {"b": 2, "g": 8, "h": 8 * 1024, "d": 128},
    "rmsnorm_linear": {"n": 2, "d": 4096, "o": 6144},
    "gqa": {"b": 2, "k": 8, "g": 4, "h": 4096, "d": 128},
    "ntrans": {"n": 64, "d": 4096},
    # not the MoE expert: its hand-written form holds a whole-d W2 tile and accumulator (d = 2048) and spills
    # (tests/tune/test_cost.py SLOWER_FUSED); its searched forms are compiled in tests/codegen/test_stream.py
}

def _matmul4d() -> KernelGraph:
    g = KernelGraph()
    g.output(g.matmul(g.input((2, 3, 16, 32), "float16"), g.input((2, 3, 32, 8), "float16")))
    return g


AOT_CASES: dict[str, Callable[[], KernelGraph]] = {
    **{f"real_{n}": (lambda n=n: prism.workloads.get(n).fused(REAL[n])) for n in REAL},
    "bf16_swiglu": lambda: prism.workloads.get("swiglu").fused({"n": 8, "d": 256}, "bfloat16"),
    "matmul4d": _matmul4d,
    "real_attention_partials": lambda: prism.workloads.get("attention").fused(REAL["attention"], partials=True),
    "real_attention_safe_split": lambda: prism.workloads.get("attention").fused(
        REAL["attention"], online=True, splits=16, loop=8, partials=True),
    "real_lora": lambda: LORA.fused(LORA.configs[0]),
    "real_gqa_safe_split": lambda: prism.workloads.get("gqa").fused(REAL["gqa"], online=True, splits=8, loop=8,
                                                                      partials=True),
    "real_attention_safe_split_tail": lambda: prism.workloads.get("attention").fused(
        REAL["attention"], online=True, splits=16, loop=8, partials=True, tail=True),
    "real_attention_partials_tail": lambda: prism.workloads.get("attention").fused(REAL["attention"], partials=True,
                                                                                   tail=True),
    "real_gqa_safe_split_tail": lambda: prism.workloads.get("gqa").fused(REAL["gqa"], online=True, splits=8, loop=8,
                                                                           partials=True, tail=True),
    "pdl_real_attention_safe_split": lambda: launched_pdl(prism.workloads.get("attention").fused(
        REAL["attention"], online=True, splits=16, loop=8, partials=True)),
    **{n: (lambda n=n: CASES[n]().graph) for n in ("split_k", "grid3", "non_pow2_softmax", "all_ops",
                                                    "broadcast_padding", "fp32_dot", "group_sums",
                                                    "searched_split_kv_walk", "searched_split_kv_group")},
}
