"""Hypothesis strategies that build random valid Prism graphs: kernel graphs, block graphs, custom ops."""

# Every graph is built through the public builders, so whatever is drawn is a graph the IR accepts;
# the strategies only steer toward calls that succeed (operands whose shapes fit, maps whose splits
# divide). Ops come from the op table by family: a new op of a known family is drawn with no change here,
# and an op of a new family fails loudly until a case is added to `_OPERANDS`. Use with
# `python -m pytest` (the repository root must be importable): `from tests.strategies import graphs`.

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hypothesis import strategies as st

from prism.ir import DTYPES, OPS, BlockGraph, KernelGraph, Tensor, TType

__all__ = ["GRID_SIZES", "LOOP_SIZES", "SIZES", "block_graphs", "graphs", "kernel_graphs", "ttypes"]

SIZES = (1, 2, 3, 4, 6, 8)
"""Dims of freshly drawn tensors: small (cheap to run) and mixing powers of two with 3 and 6."""
GRID_SIZES = (1, 2, 4)
LOOP_SIZES = (1, 2, 3, 4)
EPS = (0.0, 1e-6, 1e-5, 0.01)
SCALARS = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, 1 / 3, 1 / 4096]),
                    st.floats(-8.0, 8.0, allow_nan=False, allow_infinity=False))

Fresh = Callable[[tuple[int, ...], str], Tensor]
"""Makes a new tensor of a wanted shape and dtype in the graph being built (an input, a loader...)."""


@dataclass(frozen=True)
class _Config:
    """What the caller chose: which ops and dtypes to draw from, and how big graphs get."""

    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    sizes: tuple[int, ...]
    max_ops: int
    max_grid_dims: int
    max_outputs: int


def _config(ops: Sequence[str] | None, dtypes: Sequence[str], sizes: Sequence[int], max_ops: int,
            max_grid_dims: int, max_outputs: int) -> _Config:
    names = tuple(sorted(OPS)) if ops is None else tuple(ops)
    unknown = [n for n in names if n not in OPS]
    if unknown or not names:
        raise ValueError(f"ops must be a non-empty list of registry ops; unknown: {unknown}")
    return _Config(names, tuple(dtypes), tuple(sizes), max_ops, max_grid_dims, max_outputs)


def ttypes(dtypes: Sequence[str] = DTYPES, min_rank: int = 1, max_rank: int = 3,
           sizes: Sequence[int] = SIZES) -> st.SearchStrategy[TType]:
    """Tensor types with small dims."""
    shapes = st.lists(st.sampled_from(sizes), min_size=min_rank, max_size=max_rank).map(tuple)
    return st.builds(TType, shapes, st.sampled_from(dtypes))


# ---- registry ops on a pool of tensors ---------------------------------------------------------


def _pick(draw: Any, options: Sequence[Any]) -> Any:
    return draw(st.sampled_from(list(options)))


def _shape(draw: Any, cfg: _Config, rank: int) -> tuple[int, ...]:
    return tuple(_pick(draw, cfg.sizes) for _ in range(rank))


def _matmul_operands(draw: Any, cfg: _Config, pool: list[Tensor], fresh: Fresh) -> tuple[list[Tensor], dict]:
    lhs = [t for t in pool if len(t.shape) >= 2]
    a = _pick(draw, lhs) if lhs else fresh(_shape(draw, cfg, draw(st.integers(2, 3))), _pick(draw, cfg.dtypes))
    fits = [t for t in pool if t.dtype == a.dtype and t.shape[:-2] == a.shape[:-2] and len(t.shape) == len(a.shape)
            and t.shape[-2] == a.shape[-1]]
    if fits and draw(st.booleans()):
        return [a, _pick(draw, fits)], {}
    return [a, fresh(a.shape[:-2] + (a.shape[-1], _pick(draw, cfg.sizes)), a.dtype)], {}


def _broadcasts(a: Tensor, b: Tensor) -> bool:
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(
        m == n or 1 in (m, n) for m, n in zip(a.shape, b.shape))


def _binary_operands(draw: Any, cfg: _Config, pool: list[Tensor], fresh: Fresh) -> tuple[list[Tensor], dict]:
    a = _pick(draw, pool)
    fits = [t for t in pool if _broadcasts(a, t)]  # a itself always fits
    if draw(st.booleans()):
        b = _pick(draw, fits)
    else:  # a fresh operand, some of its dims 1 so that broadcasting gets exercised
        b = fresh(tuple(_pick(draw, (n, 1)) for n in a.shape), a.dtype)
    return ([a, b] if draw(st.booleans()) else [b, a]), {}


def _one_operand(attrs: Callable[[Any, Tensor], dict]) -> Callable[..., tuple[list[Tensor], dict]]:
    def operands(draw: Any, cfg: _Config, pool: list[Tensor], fresh: Fresh) -> tuple[list[Tensor], dict]:
        a = _pick(draw, pool)
        return [a], attrs(draw, a)

    return operands


def _group_attrs(draw: Any, a: Tensor, one_group: bool = False) -> dict:
    """A dim and a power-of-two group size dividing its extent (1: the whole sum), or with `one_group` the
    extent itself: what a group op inside a kernel takes (prism.codegen.render; kernel-level group sums
    of any size: tests/codegen/cases.py "group_sums")."""
    dim = draw(st.integers(0, len(a.shape) - 1))
    n = a.shape[dim]
    return {"dim": dim, "size": _pick(draw, [k for k in range(1, n + 1)
                                             if n % k == 0 and (k & (k - 1) == 0 or one_group and k == n)])}


def _group_scale_operands(draw: Any, cfg: _Config, pool: list[Tensor], fresh: Fresh) -> tuple[list[Tensor], dict]:
    """An operand, a grouping of one of its dims, and fresh scales with one value per group."""
    a = _pick(draw, pool)
    attrs = _group_attrs(draw, a, one_group=True)
    dim = attrs["dim"]
    return [a, fresh(a.shape[:dim] + (a.shape[dim] // attrs["size"],) + a.shape[dim + 1:], a.dtype)], attrs


_OPERANDS: dict[str, Callable[..., tuple[list[Tensor], dict]]] = {
    "unary": _one_operand(lambda draw, a: {}),
    "scalar": _one_operand(lambda draw, a: {"value": draw(SCALARS)}),
    "rowwise": _one_operand(lambda draw, a: {"eps": _pick(draw, EPS)}),
    "reduce": _one_operand(lambda draw, a: {"dim": draw(st.integers(-len(a.shape), len(a.shape) - 1))}),
    "max_reduce": _one_operand(lambda draw, a: {"dim": draw(st.integers(-len(a.shape), len(a.shape) - 1))}),
    "group": _one_operand(lambda draw, a: _group_attrs(draw, a)),
    "group_scale": _group_scale_operands,
    "binary": _binary_operands,
    "matmul": _matmul_operands,
}


def _apply_random_op(draw: Any, cfg: _Config, g: Any, pool: list[Tensor], fresh: Fresh) -> Tensor:
    """Apply one registry op to tensors of `pool` (or fresh ones where none fits); return its result."""
    opdef = OPS[_pick(draw, cfg.ops)]
    if opdef.family.name not in _OPERANDS:
        raise NotImplementedError(f"tests/strategies.py: no operand rule for op family {opdef.family.name!r} "
                                  f"({opdef.name}); add one to _OPERANDS")
    tensors, attrs = _OPERANDS[opdef.family.name](draw, cfg, pool, fresh)
    return g.apply(opdef.name, tensors, attrs)


# ---- block graphs ------------------------------------------------------------------------------


class _BlockMaker:
    """Builds one random block graph; `kernel` (if given) supplies the tensors its loaders load."""

    def __init__(self, draw: Any, cfg: _Config, kernel: KernelGraph | None) -> None:
        self.draw, self.cfg, self.kernel = draw, cfg, kernel
        grid = draw(st.lists(st.sampled_from(GRID_SIZES), min_size=1, max_size=cfg.max_grid_dims))
        self.b = BlockGraph(grid=tuple(grid), loop=_pick(draw, LOOP_SIZES))
        self.args: list[Tensor] = []  # the kernel tensor behind each loader, in order
        self.loop_pool: list[Tensor] = []
        self.post_pool: list[Tensor] = []

    def load(self, source: Tensor | TType) -> Tensor:
        """Load a tensor whose shape is fixed: map only grid dims and a loop that divide it."""
        shape, parts, imap = source.shape, [1] * len(source.shape), {}
        for dim, size in zip(self.b.grid_dims, self.b.grid):
            fits = [d for d in range(len(shape)) if d not in imap.values() and shape[d] % (parts[d] * size) == 0]
            d = _pick(self.draw, [None, *fits])
            if d is not None:
                imap[dim], parts[d] = d, parts[d] * size
        fmap = _pick(self.draw, [None, *(d for d in range(len(shape)) if shape[d] % (parts[d] * self.b.loop) == 0)])
        return self._loader(source, imap, fmap)

    def load_tile(self, tile: tuple[int, ...], dtype: str) -> Tensor:
        """A loader whose tile is `tile`: draw the maps first, then size the loaded tensor to fit."""
        full, imap = list(tile), {}
        for dim, size in zip(self.b.grid_dims, self.b.grid):
            d = _pick(self.draw, [None, *(d for d in range(len(tile)) if d not in imap.values())])
            if d is not None:
                imap[dim], full[d] = d, full[d] * size
        fmap = _pick(self.draw, [None, *range(len(tile))])
        if fmap is not None:
            full[fmap] *= self.b.loop
        source = self.kernel.input(tuple(full), dtype) if self.kernel else TType(tuple(full), dtype)
        return self._loader(source, imap, fmap)

    def _loader(self, source: Tensor | TType, imap: dict[str, int], fmap: int | None) -> Tensor:
        t = self.b.input(source, imap=imap, fmap=fmap)
        if isinstance(source, Tensor):
            self.args.append(source)
        self.loop_pool.append(t)
        return t

    def accum_tile(self, tile: tuple[int, ...], dtype: str) -> Tensor:
        """A fresh tensor after the loop: an accumulator over a fresh loader."""
        t = self.b.accum(self.load_tile(tile, dtype))
        self.post_pool.append(t)
        return t

    def body(self) -> None:
        """Loop ops, accumulators, ops after the loop, then savers with random omaps."""
        draw, cfg, b = self.draw, self.cfg, self.b
        for _ in range(draw(st.integers(0, cfg.max_ops))):
            self.loop_pool.append(_apply_random_op(draw, cfg, b, self.loop_pool, self.load_tile))
        for _ in range(draw(st.integers(1, 3))):
            self.post_pool.append(b.accum(_pick(draw, self.loop_pool)))
        for _ in range(draw(st.integers(0, cfg.max_ops))):
            self.post_pool.append(_apply_random_op(draw, cfg, b, self.post_pool, self.accum_tile))
        for _ in range(draw(st.integers(1, cfg.max_outputs))):
            t = _pick(draw, self.post_pool)
            omap: dict[str, int] = {}
            for dim in b.grid_dims:
                d = _pick(draw, [None, *(d for d in range(len(t.shape)) if d not in omap.values())])
                if d is not None:
                    omap[dim] = d
            b.output(t, omap=omap)


@st.composite
def block_graphs(draw: Any, max_ops: int = 5, ops: Sequence[str] | None = None, dtypes: Sequence[str] = DTYPES,
                 sizes: Sequence[int] = SIZES, max_grid_dims: int = 3, max_outputs: int = 3) -> BlockGraph:
    """A standalone block graph: 1 to 3 loaders of drawn types (more appear where an op needs a
    partner), `max_ops` ops in the loop and after it, 1 to 3 accumulators, 1 to `max_outputs` savers."""
    cfg = _config(ops, dtypes, sizes, max_ops, max_grid_dims, max_outputs)
    maker = _BlockMaker(draw, cfg, kernel=None)
    for _ in range(draw(st.integers(1, 3))):
        maker.load(draw(ttypes(cfg.dtypes, sizes=cfg.sizes)))
    maker.body()
    return maker.b


# ---- kernel graphs ------------------------------------------------------------------------------


def _fresh_input(draw: Any, g: KernelGraph) -> Fresh:
    def fresh(shape: tuple[int, ...], dtype: str) -> Tensor:
        k = len(g.input_refs)  # names: some default (in<k>), some chosen; unique either way
        return g.input(shape, dtype, name=_pick(draw, [None, f"X{k}", f"w_{k}"]))

    return fresh


@st.composite
def kernel_graphs(draw: Any, max_ops: int = 6, max_customs: int = 2, ops: Sequence[str] | None = None,
                  dtypes: Sequence[str] = DTYPES, sizes: Sequence[int] = SIZES, block_max_ops: int = 4,
                  max_grid_dims: int = 3, max_outputs: int = 3) -> KernelGraph:
    """A kernel graph: 1 to 3 inputs, then up to `max_ops` registry ops and `max_customs` custom ops in
    random order (so custom outputs feed kernel ops and other custom ops), then 1 to `max_outputs`
    distinct outputs. Inputs appear mid-graph too, where an op or a loader needs a fitting operand."""
    cfg = _config(ops, dtypes, sizes, max_ops, max_grid_dims, max_outputs)
    block_cfg = _config(ops, dtypes, sizes, block_max_ops, max_grid_dims, max_outputs)
    g = KernelGraph()
    fresh = _fresh_input(draw, g)
    graph_dtypes = draw(st.lists(st.sampled_from(cfg.dtypes), min_size=1, max_size=2, unique=True))
    pool = [fresh(_shape(draw, cfg, draw(st.integers(1, 3))), _pick(draw, graph_dtypes))
            for _ in range(draw(st.integers(1, 3)))]
    customs = ops_done = 0
    while ops_done < max_ops or customs < max_customs:
        if draw(st.integers(0, 4)) == 0:
            break  # graphs of every length, not only the longest
        if customs < max_customs and (ops_done >= max_ops or draw(st.integers(0, 2)) == 0):
            pool.extend(_custom(draw, block_cfg, g, pool))
            customs += 1
        else:
            pool.append(_apply_random_op(draw, cfg, g, pool, fresh))
            ops_done += 1
    outs = draw(st.lists(st.sampled_from(range(len(pool))), min_size=1, max_size=cfg.max_outputs, unique=True))
    g.output(*(pool[i] for i in outs))
    return g


def _custom(draw: Any, cfg: _Config, g: KernelGraph, pool: list[Tensor]) -> tuple[Tensor, ...]:
    """A custom op: a random block graph loading 0 to 2 tensors of `pool` (plus fresh inputs)."""
    maker = _BlockMaker(draw, cfg, kernel=g)
    picks = draw(st.lists(st.sampled_from(range(len(pool))), max_size=2, unique=True))
    for i in picks:
        maker.load(pool[i])
    if not maker.loop_pool:
        maker.load_tile(_shape(draw, cfg, draw(st.integers(1, 3))), _pick(draw, cfg.dtypes))
    maker.body()
    return g.custom(maker.b, maker.args)


_KERNEL_ONLY = ("max_customs", "block_max_ops")


def graphs(**kwargs: Any) -> st.SearchStrategy[KernelGraph | BlockGraph]:
    """Kernel graphs or standalone block graphs; `max_customs` and `block_max_ops` go to kernel graphs only."""
    block_kwargs = {k: v for k, v in kwargs.items() if k not in _KERNEL_ONLY}
    return st.one_of(kernel_graphs(**kwargs), block_graphs(**block_kwargs))
