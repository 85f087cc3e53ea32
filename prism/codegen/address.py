"""Where a kernel's tiles are: each tile dim's lanes and masks, the block's program ids, and the pointers to a
tensor's tile (mixed into prism.codegen.emit.Emitter).

A tile starts at the block's offset along the dims the grid splits (program id · tile, or · tile · LOOP where
the loop walks the same dim) and covers `tl.arange(0, BLOCK)` lanes, of which the first TILE are real (a padded
dim) or those below the dim's extent (a ragged dim: its last tile partial); prism.codegen.layout says why masked
loads, reductions and stores make such a kernel compute the program.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from prism.codegen.layout import Layout, TileDim
from prism.codegen.spec import Size
from prism.errors import CodegenError
from prism.ir.block import BlockGraph

__all__ = ["Addressing", "along"]


def along(d: int, rank: int) -> str:
    """Index that puts a 1-D range along dim d of a rank-`rank` block: `[:, None]` etc."""
    return "" if rank == 1 else "[" + ", ".join(":" if j == d else "None" for j in range(rank)) + "]"


def _pointers(ptrs: str, base: str, offs: list[str], strides: list[str]) -> str:
    """`x_ptrs = x_ptr + (offs_x0[:, None] * stride_x0 + ...)`, one term per line when long."""
    rank = len(offs)
    terms = [f"{o}{along(d, rank)} * {s}" for d, (o, s) in enumerate(zip(offs, strides))]
    head = f"{ptrs} = {base}_ptr + ("
    if len(head) + sum(len(t) + 3 for t in terms) <= 100:
        return f"{head}{' + '.join(terms)})"
    pad = " " * (len(head) - 2)
    return f"{head}{terms[0]}\n" + "\n".join(f"{pad}+ {t}" for t in terms[1:]) + ")"


class Addressing:
    """The Emitter's addresses and masks. It reads the Emitter's block graph (`b`), layout, scopes (`s`), whether
    it loops, and names fresh identifiers with its `fresh`; it keeps the lane masks, program ids and strides it
    has named."""

    b: BlockGraph
    name: str
    layout: Layout
    s: Any
    looped: bool
    lane_masks: dict[str, str]
    pids: set[str]
    strides: dict[str, list[str]]
    fresh: Callable[[str], str]

    def lane_mask(self, t: TileDim) -> str:
        """`mask_x0`: which lanes of a masked tile dim are real (defined once: `mask_lines`)."""
        if t.name not in self.lane_masks:
            self.lane_masks[t.name] = self.fresh(f"mask_{t.name.lower()}")
        return self.lane_masks[t.name]

    def full_mask(self, dims: tuple[TileDim, ...]) -> str | None:
        rank = len(dims)
        parts = [f"{self.lane_mask(t)}{along(d, rank)}" for d, t in enumerate(dims) if t.masked]
        return " & ".join(parts) if parts else None

    def mask_lines(self) -> tuple[list[str], list[str]]:
        """Every lane mask's definition: (those before the loop, those at the top of every iteration). A padded
        dim's lanes are real below the tile; a ragged dim's where the global index is below its extent: lane j
        of tile k (pid · LOOP + i, pid or i) has index k · TILE + j."""
        top: list[str] = []
        loop: list[str] = []
        for name, mask in self.lane_masks.items():
            t = self.layout.tile_dim(name)
            lanes = f"tl.arange(0, {t.block_expr})"
            conds = [f"{lanes} < TILE_{name}"] if t.padded else []
            if t.ragged:
                index = self.tile_index(t)
                conds.append(f"{index + ' * ' + t.tile_expr + ' + ' if index else ''}{lanes} < EXTENT_{name}")
            expr = " & ".join(f"({c})" for c in conds) if len(conds) > 1 else conds[0]
            (loop if t.looped else top).append(f"{mask} = {expr}")
        return top, loop

    def tile_index(self, t: TileDim) -> str | None:
        """Which tile of ragged dim `t` this block holds in this iteration: pid · LOOP + i, pid, or i; None for
        the only one (a dim of runtime size split by nothing)."""
        pid = self.pid(t.grid) if t.grid else None
        return f"({pid} * LOOP + i)" if pid and t.looped else pid or ("i" if t.looped else None)

    def size_of(self, t: TileDim, per: int = 1) -> Size:
        """Where the launcher reads runtime-size dim `t`'s extent: the first loaded tensor dim of its class."""
        for i in self.b.loaders:
            for d, u in enumerate(self.layout.dims[i]):
                if u is t:
                    return Size(self.b.nodes[i].attrs["index"], d, per)
        raise CodegenError(f"{self.name}: tile dim {t.name} has a runtime size but no input dim of it is loaded")

    def pid(self, g: str) -> str:
        self.pids.add(g)
        return f"pid_{g}"

    def stride_names(self, base: str, rank: int) -> list[str]:
        if base not in self.strides:
            sep = "_" if base[-1].isdigit() else ""
            self.strides[base] = [self.fresh(f"stride_{base}{sep}{d}") for d in range(rank)]
        return self.strides[base]

    def address(self, base: str, dims: tuple[TileDim, ...], maps: Mapping[str, int], fmap: int | None,
                lines: list[str], strides: list[str] | None = None) -> tuple[str, str | None, list[str]]:
        """Pointers to this block's tile of tensor `base` (a loader's input or a saver's output), written to
        `lines`: the tile dims `maps` gives grid dims start at the block's offset, the loop walks dim `fmap`.
        Returns the pointers' name, the mask's (None: no padded lanes) and the strides' (`strides`: those of
        `dims`, where `base` has more dims than the tile: a split-K partials buffer's leading one)."""
        by_grid = {d: g for g, d in maps.items() if self.b.grid_size(g) > 1}
        strides = strides or self.stride_names(base, len(dims))
        offs = []
        for d, t in enumerate(dims):
            name = self.fresh(f"offs_{base}{'_' if base[-1].isdigit() else ''}{d}")
            start = ""
            if d in by_grid:
                # a dim split by the grid and the loop: block stride is tile * LOOP, not tile
                step = t.tile_expr if fmap != d or not self.looped else (
                    "LOOP" if t.tile_expr == "1" else f"{t.tile_expr} * LOOP")
                start = f"{self.pid(by_grid[d])}{'' if step == '1' else ' * ' + step} + "
            lines.append(f"{name} = {start}tl.arange(0, {t.block_expr})")
            offs.append(name)
        ptrs = self.fresh(f"{base}_ptrs")
        lines.append(_pointers(ptrs, base, offs, strides))
        mask = self.full_mask(dims)
        if mask:
            name = self.fresh(f"mask_{base}")
            # a dim the loop walks raggedly: its lanes' mask changes every iteration
            (self.s.loop if any(t.looped for t in dims) else lines).append(f"{name} = {mask}")
            mask = name
        return ptrs, mask, strides
