"""Pictures of graphs: a kernel graph with its block graphs, or an sGraph, drawn as one PNG (matplotlib, Agg).

Drawing has two steps. `describe_kernel_graph` / `describe_symbolic_graph` turn a graph into a `Picture`:
panels of boxes, each with label lines, a kind (which picks its colour), the boxes it reads and the side
of the loop it is on. `render` lays out and draws any Picture, so the concrete and symbolic forms share
every line of drawing code. An sGraph is drawn by instantiating it at its searched shapes and replacing
only the sizes by symbols (grid d_x, d_y, d_z, loop d_i, tiles like 1024/(d_x·d_i)): the two forms can
never disagree about structure or maps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from prism.errors import InputError
from prism.ir import BlockGraph, KernelGraph
from prism.ir.block import GRID_DIMS
from prism.ir.kinds import INVARIANT, LOADER, LOOP, SAVER, Accumulator, kind_of
from prism.ir.ops import TType
from prism.symbolic.dims import UNIT

if TYPE_CHECKING:
    from prism.ir.builder import GraphBuilder, Node
    from prism.search.result import SearchResult, SymbolicGraph

__all__ = ["Box", "Panel", "Picture", "describe_kernel_graph", "describe_symbolic_graph", "draw_kernel_graph",
           "draw_result", "draw_symbolic_graph", "render"]


@dataclass(frozen=True)
class Box:
    """One node of a picture: `kind` picks the colour, `inputs` are the boxes (same panel) it reads."""

    kind: str
    lines: tuple[str, ...]
    inputs: tuple[int, ...] = ()
    loop: bool = False  # inside the loop body: drawn in the shaded region


@dataclass(frozen=True)
class Panel:
    """One graph drawn top to bottom. `loop` is the loop region's caption; None: no loop (kernel level)."""

    title: str
    boxes: tuple[Box, ...]
    loop: str | None = None


@dataclass(frozen=True)
class Picture:
    """What one PNG shows: a title and rows of panels (one row: kernel graph, then its block graphs)."""

    title: str
    rows: tuple[tuple[Panel, ...], ...]


# -- describing graphs -----------------------------------------------------------------------------

def _shape(dims: Sequence[Any]) -> str:
    return " × ".join(map(str, dims))


def _type(t: TType) -> str:
    return f"{_shape(t.shape)} {t.dtype.replace('float', 'fp')}"


def _map(m: dict[str, int]) -> str:
    return "{" + ", ".join(f"{g}:{d}" for g, d in m.items()) + "}"


def _call(g: GraphBuilder, i: int, node: Node) -> str:
    args = [g.label(r) for r in node.inputs]
    args += [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in node.attrs.items()]
    return f"{g.label((i, 0))} = {node.op}({', '.join(args)})"


class _Concrete:
    """Sizes as the block graph has them: ints (`note` says at which symbolic sizes, if any)."""

    def __init__(self, note: str = "") -> None:
        self.note = note

    def sizes(self, b: BlockGraph) -> str:
        return "grid " + " ".join(f"{d}={n}" for d, n in zip(b.grid_dims, b.grid)) + f" · loop {b.loop}{self.note}"

    def loop(self, b: BlockGraph) -> str:
        return f"loop body × {b.loop} (tiles of one iteration)"

    def tile(self, b: BlockGraph, i: int) -> str:
        return _shape(b.nodes[i].outputs[0].shape)


class _Symbolic:
    """Sizes of an sGraph's instantiation as symbols: node i of its block graph is sGraph op i."""

    def __init__(self, sg: SymbolicGraph) -> None:
        self.sg = sg

    def sizes(self, b: BlockGraph) -> str:
        loop = "d_i" if self.sg.mapping.loop else "none (d_i = 1)"
        return f"grid ({', '.join('d_' + d for d in b.grid_dims)}) · loop {loop}"

    def loop(self, b: BlockGraph) -> str:
        return "loop body × d_i (tiles of one iteration)" if self.sg.mapping.loop else "no loop: the body runs once"

    def tile(self, b: BlockGraph, i: int) -> str:
        dims = self.sg.structure.graph.dims
        while i >= len(dims):   # a node instantiation adds after the sGraph's ops (a partials form's saved
            i = b.nodes[i].inputs[0][0]   # maxima, accumulated from an op): its operand's tile
        return _shape([self._extent(a) for a in dims[i]])

    def _extent(self, atom: int) -> str:
        """D/(d_p·d_i) for a data dim of full extent D split by grid dim p and the loop."""
        if atom == UNIT:
            return "1"
        g, m = self.sg.structure.graph, self.sg.mapping
        cls, p = g.uf.find(atom), m.grid_of(g.uf.find(atom))
        parts = ([f"d_{GRID_DIMS[p]}"] if p is not None else []) + (["d_i"] if cls in m.loop else [])
        div = "" if not parts else f"/{parts[0]}" if len(parts) == 1 else f"/({'·'.join(parts)})"
        return f"{g.space.extent(atom)}{div}"


def _block_panel(b: BlockGraph, title: str, args: Sequence[str], sizes: _Concrete | _Symbolic) -> Panel:
    """A block graph: loaders, ops, accumulators, savers; box i is node i."""
    boxes = []
    for i, node in b.topo():
        a, kind = node.attrs, kind_of(node)
        if kind is LOADER:
            lines = (f"{b.label((i, 0))} = load {args[a['index']]}", f"imap {_map(a['imap'])} · fmap {a['fmap']}",
                     f"tile {sizes.tile(b, i)}")
        elif kind is SAVER:
            src = node.inputs[0]
            once = f" · once {','.join(a['once'])}" if a.get("once") else ""
            lines = (f"save {b.label(src)} → out{a['index']}", f"omap {_map(a['omap'])}{once}",
                     f"tile {sizes.tile(b, src[0])} → {_shape(node.outputs[0].shape)}")
        else:
            lines = (_call(b, i, node), f"tile {sizes.tile(b, i)}")
        style = "accum" if isinstance(kind, Accumulator) else kind.name   # loader, op, accum, saver
        in_loop = b.phase((i, 0)) in (LOOP, INVARIANT)                    # drawn in the loop region
        boxes.append(Box(style, lines, tuple(dict.fromkeys(r[0] for r in node.inputs)), in_loop))
    return Panel(title, tuple(boxes), sizes.loop(b))


def _describe(g: KernelGraph, title: str, sizes: _Concrete | _Symbolic) -> Picture:
    """The kernel-level panel (inputs, fused kernels, kernel ops, outputs) and one panel per block graph."""
    boxes: list[Box] = []
    at: dict[int, int] = {}  # kernel node -> its box
    blocks: list[Panel] = []
    for i, node in g.topo():
        ins = tuple(dict.fromkeys(at[r[0]] for r in node.inputs))
        if node.op == "input":
            box = Box("input", (node.attrs["name"], _type(node.outputs[0])))
        elif node.op == "custom":
            b, k = node.attrs["block"], len(blocks)
            outs = (f"out{j} = {g.label((i, j))}: {_type(t)}" for j, t in enumerate(node.outputs))
            # an sGraph is its first kernel; a partials form's second (made from it) is drawn at every d = 1
            own = sizes if k == 0 or isinstance(sizes, _Concrete) else _Concrete(" (tiles at every d_ = 1)")
            tail = (f" · run by kernel {k - 1}'s last block per row", f"(the tail of kernel {k - 1})") \
                if b.launch.tail else ("",)   # prism.codegen.tail
            box = Box("kernel", (f"fused kernel {k}", own.sizes(b), *tail[1:], *outs), ins)
            blocks.append(_block_panel(b, f"kernel {k}: {own.sizes(b)}{tail[0]}", [g.label(r) for r in node.inputs],
                                       own))
        else:
            box = Box("op", (_call(g, i, node), _type(node.outputs[0])), ins)
        at[i] = len(boxes)
        boxes.append(box)
    boxes += [Box("output", (f"output {k}", g.label(r)), (at[r[0]],)) for k, r in enumerate(g.outputs)]
    return Picture(title, ((Panel("kernel graph", tuple(boxes)), *blocks),))


def describe_kernel_graph(graph: KernelGraph, title: str | None = None) -> Picture:
    """What `draw_kernel_graph` draws, as data (tests check labels here rather than pixels)."""
    if not isinstance(graph, KernelGraph):
        raise InputError(f"describe_kernel_graph: expected a KernelGraph, got {type(graph).__name__}")
    return _describe(graph, title or "kernel graph", _Concrete())


def describe_symbolic_graph(sg: SymbolicGraph, names: Sequence[str], title: str | None = None) -> Picture:
    """What `draw_symbolic_graph` draws: the sGraph at its searched shapes with symbolic sizes."""
    from prism.search.result import SymbolicGraph

    if not isinstance(sg, SymbolicGraph):
        raise InputError(f"describe_symbolic_graph: expected a SymbolicGraph, got {type(sg).__name__}")
    n = len(sg.structure.graph.space.shapes)
    if isinstance(names, str) or len(names) != n:
        raise InputError(f"describe_symbolic_graph: the sGraph has {n} input(s), got names {names!r}")
    return _describe(sg.instantiate(names=names), title or "sGraph", _Symbolic(sg))


# -- layout and drawing ----------------------------------------------------------------------------

FONT = 7.5                       # pt; every label is monospace so its width is known before drawing
CHAR = 0.602 * FONT / 72         # in: DejaVu Sans Mono's advance is 0.602 em
LINE = 1.4 * FONT / 72           # in: one label line
PAD, HGAP, VGAP, MARGIN = 0.07, 0.22, 0.34, 0.18  # in: inside a box, between boxes, between rows, panel edge
LANE = 0.08                      # in: the width an edge takes in a row it passes through
DPI = 150
STYLE = {  # kind -> (fill, legend entry)
    "input": ("#e3e3e3", "kernel input / output"), "output": ("#e3e3e3", ""),
    "kernel": ("#ffd9a8", "fused kernel (custom op)"), "op": ("#ffffff", "op"),
    "loader": ("#c9dff5", "loader: imap, fmap, tile"), "accum": ("#f5c4c4", "accumulator (sums the loop)"),
    "saver": ("#d3ecc9", "saver: omap, tile → full"),
    "running_max": ("#f5e3c4", "running max (carried across the loop)"),
}
REGIONS = {  # in the loop? -> (fill, edge, caption ink, legend entry)
    True: ("#eaf2fc", "#9bb7d6", "#44617f", "loop body"), False: ("#f7f4ee", "#d8cfbf", "#7a6a4f", "after the loop"),
}

Rect = tuple[float, float, float, float]  # x, y (top), width, height in inches
Point = tuple[float, float]


@dataclass(frozen=True)
class _Layout:
    """A panel placed in its own inches: box rectangles, edge polylines, regions (caption, top, bottom,
    in the loop), and its size."""

    rects: list[Rect]
    edges: list[list[Point]]
    regions: list[tuple[str, float, float, bool]]
    width: float
    height: float


def _layers(boxes: Sequence[Box]) -> list[int]:
    """Longest path from the sources, with every post-loop box below every loop box."""
    layer = [0] * len(boxes)
    for inside in (True, False):
        floor = 0 if inside else 1 + max((layer[i] for i, b in enumerate(boxes) if b.loop), default=-1)
        for i, b in enumerate(boxes):
            if b.loop == inside:
                layer[i] = max([floor] + [layer[j] + 1 for j in b.inputs])
    return layer


def _layout(panel: Panel) -> _Layout:
    """Rows by layer; an edge that skips rows gets a lane in each (a dummy slot), so it never crosses a
    box; each row is ordered by where its slots' predecessors sit (one barycenter sweep) and centred."""
    boxes, layer = panel.boxes, _layers(panel.boxes)
    size = [(max(map(len, b.lines)) * CHAR + 4 * PAD, len(b.lines) * LINE + 2 * PAD) for b in boxes]
    row_of, chains = list(layer), []  # slots: boxes 0..n-1, then lanes
    for i, b in enumerate(boxes):
        for j in b.inputs:
            lanes = list(range(len(row_of), len(row_of) + layer[i] - layer[j] - 1))
            row_of += range(layer[j] + 1, layer[i])
            size += [(LANE, 0.0)] * len(lanes)
            chains.append([j, *lanes, i])
    preds: dict[int, list[int]] = {}
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            preds.setdefault(b, []).append(a)
    n_loop = 1 + max((layer[i] for i, b in enumerate(boxes) if b.loop), default=-1)
    rects: list[Rect] = [(0.0, 0.0, 0.0, 0.0)] * len(row_of)
    cx: dict[int, float] = {}
    tops: dict[int, float] = {}  # first row of a region -> its top
    y = MARGIN + len(panel.title.splitlines()) * LINE * 1.3 + PAD
    for r in range(max(layer, default=-1) + 1):
        if panel.loop is not None and r in (0, n_loop):
            tops[r], y = y, y + LINE + PAD
        row = sorted((s for s in range(len(row_of)) if row_of[s] == r),
                     key=lambda s: sum(cx[p] for p in preds[s]) / len(preds[s]) if s in preds else 0.0)
        x = -(sum(size[s][0] for s in row) + HGAP * (len(row) - 1)) / 2
        height = max(size[s][1] for s in row)
        for s in row:
            w, h = size[s]
            rects[s], cx[s] = (x, y + (height - h) / 2, w, h) if h else (x, y, w, height), x + w / 2
            x += w + HGAP
        y += height + VGAP
    texts = panel.title.splitlines() + ([panel.loop, REGIONS[False][3]] if panel.loop is not None else [])
    inner = max(x + w for x, _, w, _ in rects) - min(x for x, *_ in rects) if rects else 0.0
    width = max([inner] + [len(t) * CHAR * 1.15 for t in texts]) + 2 * (MARGIN + PAD)
    left = width / 2
    rects = [(x + left, top, w, h) for x, top, w, h in rects]
    edges = [[(rects[c[0]][0] + rects[c[0]][2] / 2, rects[c[0]][1] + rects[c[0]][3])]
             + [p for s in c[1:-1] for p in ((rects[s][0] + LANE / 2, rects[s][1]),
                                              (rects[s][0] + LANE / 2, rects[s][1] + rects[s][3]))]
             + [(rects[c[-1]][0] + rects[c[-1]][2] / 2, rects[c[-1]][1])] for c in chains]
    regions = []
    for r, inside in ((0, True), (n_loop, False)):
        if r in tops:
            rows = range(n_loop) if inside else range(n_loop, max(layer) + 1)
            bottom = max(rects[i][1] + rects[i][3] for i in range(len(boxes)) if layer[i] in rows) + PAD
            regions.append((panel.loop if inside else REGIONS[False][3], tops[r], bottom, inside))
    return _Layout(rects[:len(boxes)], edges, regions, width, y - VGAP + MARGIN)


def _curve(points: list[Point]) -> Any:
    """A path through the points: S-curves between rows, straight down through each lane."""
    from matplotlib.path import Path as MPath

    verts, codes = [points[0]], [MPath.MOVETO]
    for k, (a, b) in enumerate(zip(points, points[1:])):
        if k % 2:  # inside a lane
            verts.append(b)
            codes.append(MPath.LINETO)
        else:
            dy = (b[1] - a[1]) / 2
            verts += [(a[0], a[1] + dy), (b[0], b[1] - dy), b]
            codes += [MPath.CURVE4] * 3
    return MPath(verts, codes)


def _text(ax: Any, x: float, y: float, s: str, **kw: Any) -> None:
    ax.text(x, y, s, family="monospace", fontsize=kw.pop("size", FONT), **kw)


def _draw_panel(ax: Any, panel: Panel, x0: float, y0: float, lay: _Layout) -> None:
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
    from matplotlib.transforms import Affine2D

    ax.add_patch(Rectangle((x0, y0), lay.width, lay.height, fill=False, ec="#999999", lw=0.8))
    for k, line in enumerate(panel.title.splitlines()):
        _text(ax, x0 + MARGIN, y0 + MARGIN + k * LINE * 1.3, line, ha="left", va="top", size=FONT * 1.15,
              weight="bold")
    for caption, top, bottom, inside in lay.regions:
        fill, edge, ink, _ = REGIONS[inside]
        ax.add_patch(Rectangle((x0 + MARGIN / 2, y0 + top), lay.width - MARGIN, bottom - top, fc=fill, ec=edge,
                               ls="--", lw=0.8, zorder=0))
        _text(ax, x0 + MARGIN, y0 + top + PAD / 2, caption, ha="left", va="top", style="italic", color=ink)
    shift = Affine2D().translate(x0, y0) + ax.transData
    for points in lay.edges:
        ax.add_patch(FancyArrowPatch(path=_curve(points), arrowstyle="-|>", mutation_scale=7, color="#555555",
                                     lw=0.7, zorder=1, transform=shift))
    for box, (x, y, w, h) in zip(panel.boxes, lay.rects):
        ax.add_patch(FancyBboxPatch((x0 + x, y0 + y), w, h, boxstyle="round,pad=0,rounding_size=0.04",
                                    fc=STYLE[box.kind][0], ec="#333333", lw=0.7, zorder=2))
        for k, line in enumerate(box.lines):
            _text(ax, x0 + x + w / 2, y0 + y + PAD + (k + 0.5) * LINE, line, ha="center", va="center", zorder=3,
                  weight="bold" if k == 0 else "normal")


def _legend(picture: Picture) -> list[tuple[str, str, str]]:
    """(fill, edge, text) for each kind of box and region the picture shows."""
    kinds = {b.kind for row in picture.rows for p in row for b in p.boxes}
    out = [(fill, "#333333", label) for kind, (fill, label) in STYLE.items() if label and kind in kinds]
    if any(p.loop is not None for row in picture.rows for p in row):
        out += [(fill, edge, label) for fill, edge, _, label in REGIONS.values()]
    return out


def render(picture: Picture, path: str | Path) -> Path:
    """Lay out every panel, size the figure from the content, and write a PNG to `path`."""
    path = _target(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    layouts = [[_layout(p) for p in row] for row in picture.rows]
    heights = [max(lay.height for lay in row) for row in layouts]
    fig_w = max([sum(lay.width + HGAP for lay in row) - HGAP for row in layouts]
                + [len(picture.title) * CHAR * 1.4]) + 2 * MARGIN
    legend, x, y = [], MARGIN, 0.0  # legend entries flow into lines that fit the figure's width
    for fill, edge, label in _legend(picture):
        w = 0.3 + len(label) * CHAR + HGAP
        if x + w > fig_w - MARGIN and x > MARGIN:
            x, y = MARGIN, y + LINE * 1.6
        legend.append((x, y, fill, edge, label))
        x += w
    top = MARGIN + LINE * 2.4
    body = top + sum(heights) + HGAP * (len(heights) - 1) + HGAP
    fig_h = body + y + LINE * 1.6 + MARGIN
    fig = plt.figure(figsize=(fig_w, fig_h), dpi=DPI)
    try:
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, fig_w)
        ax.set_ylim(fig_h, 0)
        ax.axis("off")
        _text(ax, MARGIN, MARGIN, picture.title, ha="left", va="top", size=FONT * 1.4, weight="bold")
        y = top
        for row, lays, h in zip(picture.rows, layouts, heights):
            x = MARGIN
            for panel, lay in zip(row, lays):
                _draw_panel(ax, panel, x, y, lay)
                x += lay.width + HGAP
            y += h + HGAP
        for x, y, fill, edge, label in legend:
            ax.add_patch(Rectangle((x, body + y), 0.22, LINE, fc=fill, ec=edge, lw=0.7))
            _text(ax, x + 0.3, body + y + LINE / 2, label, ha="left", va="center")
        fig.savefig(path, format="png", dpi=DPI, facecolor="white")
    finally:
        plt.close(fig)
    return path


# -- the public drawing functions ------------------------------------------------------------------

def _target(path: Any) -> Path:
    """A writable file path, checked before any drawing so a typo fails fast and clearly."""
    if not isinstance(path, (str, Path)):
        raise InputError(f"expected a file path (str or Path), got {type(path).__name__}")
    p = Path(path)
    if not p.parent.is_dir():
        raise InputError(f"cannot write {p}: directory {p.parent} does not exist")
    return p


def draw_kernel_graph(graph: KernelGraph, path: str | Path, *, title: str | None = None) -> Path:
    """Draw a kernel graph and each fused kernel's block graph (grid, loop, maps, tiles) to a PNG."""
    return render(describe_kernel_graph(graph, title), path)


def draw_symbolic_graph(sg: SymbolicGraph, names: Sequence[str], path: str | Path, *,
                        title: str | None = None) -> Path:
    """Draw an sGraph like a kernel graph, with grid dims d_x, d_y, d_z, loop d_i and symbolic tiles."""
    return render(describe_symbolic_graph(sg, names, title), path)


def draw_result(result: SearchResult, path: str | Path, *, index: int | None = None) -> Path:
    """Draw graph `index` of a search result in full, or (index None) the block graphs of the first 12
    side by side, to compare what the search found at a glance."""
    from prism.search.result import SearchResult

    if not isinstance(result, SearchResult):
        raise InputError(f"draw_result: expected a SearchResult, got {type(result).__name__}")
    n = len(result.graphs)
    if index is not None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise InputError(f"draw_result: index {index!r} is out of range; the result has {n} graph(s)")
        return draw_symbolic_graph(result.graphs[index], result.names, path, title=f"sGraph {index} of {n}")
    if not n:
        raise InputError("draw_result: the result has no graphs to draw")
    panels = []
    for k, sg in enumerate(result.graphs[:12]):
        kernel, block, *_ = describe_symbolic_graph(sg, result.names).rows[0]   # a partials form has two kernels
        after = [b.lines[0] for b in kernel.boxes if b.kind == "op"]
        title = "\n".join([block.title.replace("kernel 0", f"#{k}", 1)] + [f"then {a}" for a in after])
        panels.append(replace(block, title=title))
    rows = tuple(tuple(panels[i:i + 4]) for i in range(0, len(panels), 4))
    return render(Picture(f"{n} sGraph(s); the first {len(panels)} shown", rows), path)
