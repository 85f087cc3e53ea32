"""The block graph: one fused kernel (a concrete µGraph) as a grid of blocks running one loop.

Each block loads tiles of the kernel's inputs (`imap`: grid dim -> data dim it splits; `fmap`: the data
dim the loop splits), runs block ops on them, sums tiles over the loop in accumulators, and after the
loop writes tiles to the outputs (`omap`: grid dim -> data dim it concatenates along). A grid dim of
size > 1 that an output leaves unmapped means the blocks along it are summed (a cross-block reduction),
unless the output names it `once`: its blocks compute the same tile (nothing they split reaches it), and
only the first of them writes it.
A dim split into parts it does not divide into has power-of-two tiles, the last one partial, and where the
loop walks it the last block's later iterations may hold no element at all (`split`): a *ragged* split, which
means the program on the dim padded with elements neutral to what consumes them (prism.codegen.layout says why
that is the program itself, and how kernels keep it so).
Every tensor is on one side of the loop: "loop" tensors change every iteration, "post" tensors exist
once the accumulators are done; ops never mix the two, and outputs are always "post".
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from prism.errors import GraphError, MappingError
from prism.ir.builder import GraphBuilder, Node, Ref, Tensor, check_shape
from prism.ir.kinds import (ACCUMULATORS, INVARIANT, KINDS, LOADER, LOOP, ONLINE, POST, RUNNING_MAX, SAVED, SAVER, SUM,
                            Online, RunningMax, Schedule, joined, kind_of, scaling, schedule)
from prism.ir.ops import RUNNING, TType, check_dtype
from prism.ir.launch import Launch
from prism.ir.printer import format_block
from prism.ir.serialize import BLOCK_FORMAT, Stored

__all__ = ["GRID_DIMS", "BlockGraph", "Launch", "next_pow2", "split"]

GRID_DIMS = ("x", "y", "z")


def next_pow2(n: int) -> int:
    """The least power of two at least `n` (1 for n <= 1): a tile's padded extent, a size bucket's top."""
    return 1 << max(0, int(n) - 1).bit_length()


def split(extent: int, parts: int, loop: int = 1) -> int | None:
    """The tile of a dim of `extent` split `parts` ways, `loop` of them by the loop (parts = blocks · loop, a
    block walking its share of `loop` tiles; tile k is block k // loop's iteration k % loop): extent / parts
    when that divides (equal tiles), else the power of two t = next_pow2(ceil(extent / parts)), whose
    n = ceil(extent / t) tiles hold the elements, the last one partial. Either every tile is real (n == parts),
    or the parts - n tiles past them are fewer than both the loop and the blocks: they lie in the last block's
    later iterations, every block keeps a real tile, and no block walks more iterations than ceil(n / blocks).
    A tile wholly past the extent adds its reductions' identities; a block with no real tile would make
    partials of nothing (an online softmax's running max of -inf, exp(-inf - -inf) NaN), so there is none.
    None when there is neither."""
    if extent % parts == 0:
        return extent // parts
    t = next_pow2(-(-extent // parts))
    n = -(-extent // t)
    return t if parts - n < min(loop, parts // loop) or n == parts else None


class BlockGraph(GraphBuilder, Stored, format=BLOCK_FORMAT):
    """A fused kernel: `grid` gives the sizes of grid dims x[, y[, z]], `loop` the loop range; `launch` how
    it is compiled (warps, stages: not structure, so it may be set on a frozen graph too)."""

    def __init__(self, grid: Sequence[int] = (1,), loop: int = 1, launch: Launch | None = None) -> None:
        super().__init__()
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not 1 <= len(grid) <= 3 or any(not _positive_int(g) for g in grid):
            raise MappingError(f"BlockGraph: grid must be 1 to 3 positive ints (x, y, z), got {grid!r}")
        if not _positive_int(loop):
            raise MappingError(f"BlockGraph: loop must be a positive int, got {loop!r}")
        if launch is not None and not isinstance(launch, Launch):
            raise MappingError(f"BlockGraph: launch must be a prism.ir.Launch, got {launch!r}")
        self.grid: tuple[int, ...] = grid
        self.loop: int = loop
        self.launch: Launch = launch or Launch()
        self.input_types: list[TType] = []
        self.savers: list[int] = []
        self._phase: dict[Ref, str] = {}
        self._scale: dict[Ref, tuple[str, Ref]] = {}
        """Loop tensors that depend on a running max r: (RUNNING, r) for r itself, (SHIFTED, r) for x - r,
        (SCALED, r) for exp(x - r) times values independent of r (prism.ir.ops; prism.ir.kinds.scaling)."""
        self._pending_scale: tuple[str, Ref] | None = None
        self._frozen = False

    @property
    def grid_dims(self) -> tuple[str, ...]:
        return GRID_DIMS[: len(self.grid)]

    def grid_size(self, dim: str) -> int:
        return self.grid[self.grid_dims.index(dim)]

    # -- building ------------------------------------------------------------------------------

    def input(self, tensor: Tensor | TType, imap: Mapping[str, int] | None = None,
              fmap: int | None = None) -> Tensor:
        """Load tiles of a kernel-level tensor (a Tensor of any KernelGraph, or its TType).

        imap: {"x"|"y"|"z": data dim}; grid dims not named replicate the tensor across blocks.
        fmap: the data dim the loop walks over, or None to load the same tile every iteration.
        """
        full = tensor.type if isinstance(tensor, Tensor) else tensor
        if not isinstance(full, TType):
            raise GraphError(f"input: expected a kernel-graph Tensor, got {type(tensor).__name__}")
        full = TType(check_shape(full.shape, "input"), check_dtype(full.dtype, "input"))
        where = f"input {len(self.input_types)} ({full})"
        imap = self._check_map(imap, len(full.shape), where, "imap")
        if fmap is not None:
            fmap = self._data_dim(fmap, len(full.shape), f"{where}: fmap")
        tile = []
        for d, size in enumerate(full.shape):
            loop = self.loop if fmap == d else 1
            parts = math.prod(self.grid_size(g) for g, dd in imap.items() if dd == d) * loop
            t = split(size, parts, loop)
            if t is None:
                raise MappingError(f"{where}: dim {d} of size {size} cannot be split into {parts} equal "
                                   f"tiles, nor into {parts} tiles of a power of two with a partial last one "
                                   f"and every block holding some (grid {self.grid}, loop {self.loop}, "
                                   f"imap {imap}, fmap {fmap})")
            tile.append(t)
        attrs = {"index": len(self.input_types), "imap": imap, "fmap": fmap}
        self.input_types.append(full)
        return self._append(Node(LOADER.name, (), attrs, (TType(tuple(tile), full.dtype),)))[0]

    def accum(self, tensor: Tensor, kind: str = SUM.name, running: Tensor | None = None) -> Tensor:
        """Combine a loop tensor over all loop iterations with accumulator `kind` (prism.ir.kinds.ACCUMULATORS;
        the default sums); the result exists after the loop. The online accumulator ("accum_online") takes
        the running max its tensor is scaled by (`running`, from `running_max`): the online softmax."""
        if kind not in ACCUMULATORS:
            raise GraphError(f"accum: unknown accumulator {kind!r}; known: {', '.join(ACCUMULATORS)}")
        t = self._own(tensor, "accum")
        if self._phase[t.ref] not in (LOOP, INVARIANT):
            raise GraphError(f"accum: {t.name} is already after the loop; accumulate loop tensors only")
        operands = [t] if running is None else [t, self._own(running, "accum")]
        if (kind == ONLINE.name) != (running is not None):
            raise GraphError(f"accum: the online accumulator, and only it, takes the running max its tensor is "
                             f"scaled by (`running`); {kind!r} {'needs' if running is None else 'takes'} none")
        self._scaled(kind, {}, operands)
        return self._append(Node(kind, tuple(o.ref for o in operands), {}, (t.type,)))[0]

    def running_max(self, tensor: Tensor) -> Tensor:
        """The max of a loop tensor over the iterations so far, inside the loop (prism.ir.kinds.RunningMax):
        the online softmax subtracts it before exp, and online accumulators bound to it rescale as it grows."""
        t = self._own(tensor, "running_max")
        if self._phase[t.ref] not in (LOOP, INVARIANT):
            raise GraphError(f"running_max: {t.name} is already after the loop; a running max is of a loop tensor")
        self._scaled(RUNNING_MAX.name, {}, [t])
        return self._append(Node(RUNNING_MAX.name, (t.ref,), {}, (t.type,)))[0]

    def output(self, tensor: Tensor, omap: Mapping[str, int] | None = None,
               shape: Sequence[int] | None = None, once: Sequence[str] = ()) -> Tensor:
        """Write a tile to a kernel output; omap: {"x"|"y"|"z": data dim the blocks concatenate along}.

        Grid dims not named in omap sum the tiles of their blocks, except those in `once`: the blocks along
        such a dim compute the same tile (no tile they load differs, so what they save is a copy), and only
        the first one writes it. Whether they do is the verifier's to prove (a once over a tile that differs
        along the dim is proved equal to nothing). `shape` is the output's shape where a
        ragged split makes it less than tile × blocks (each dim must split into its tiles as an input's
        would: `split`); by default tile × blocks. Returns the saver node's output (the full output tensor,
        as seen from inside the block graph).
        """
        t = self._own(tensor, "output")
        if self._phase[t.ref] not in (POST, INVARIANT):
            raise GraphError(f"output: {t.name} is computed inside the loop; outputs are saved after a "
                             "loop accumulator (b.accum)")
        omap = self._check_map(omap, len(t.shape), f"output {len(self.savers)} ({t!r})", "omap")
        parts = [math.prod(self.grid_size(g) for g, d in omap.items() if d == dim) for dim in range(len(t.shape))]
        full = tuple(size * n for size, n in zip(t.shape, parts)) if shape is None else tuple(shape)
        if len(full) != len(t.shape) or any(not _positive_int(e) or split(e, n) != size
                                            for e, n, size in zip(full, parts, t.shape)):
            raise MappingError(f"output {len(self.savers)} ({t!r}): shape {list(full)} does not split into its "
                               f"tiles {list(t.shape)} over {parts} block(s) per dim (omap {omap})")
        once = tuple(sorted(once))
        bad = [g for g in once if g not in self.grid_dims or g in omap]
        if bad or len(set(once)) != len(once):
            raise MappingError(f"output {len(self.savers)} ({t!r}): once names grid dims {list(once)}; each must be "
                               f"one of {', '.join(self.grid_dims)}, at most once, and not in the omap {omap}")
        attrs = {"index": len(self.savers), "omap": omap} | ({"once": once} if once else {})
        node = Node(SAVER.name, (t.ref,), attrs, (TType(full, t.dtype),))
        out = self._append(node)[0]
        self.savers.append(out.node)
        return out

    def summed(self, k: int) -> tuple[str, ...]:
        """The grid dims of size > 1 whose blocks' tiles output k sums (it neither places nor writes them once)."""
        attrs = self.nodes[self.savers[k]].attrs
        return tuple(g for g, size in zip(self.grid_dims, self.grid)
                     if size > 1 and g not in attrs["omap"] and g not in attrs.get("once", ()))

    def once(self, k: int) -> tuple[str, ...]:
        """The grid dims of size > 1 along which only the first block writes output k (`output`'s once)."""
        once = self.nodes[self.savers[k]].attrs.get("once", ())
        return tuple(g for g in once if self.grid_size(g) > 1)

    # -- checks --------------------------------------------------------------------------------

    def _check_map(self, mapping: Mapping[str, int] | None, rank: int, where: str, kind: str) -> dict[str, int]:
        if mapping is None:
            return {}
        if not isinstance(mapping, Mapping):
            raise MappingError(f"{where}: {kind} must be a dict like {{'x': 0}}, got {mapping!r}")
        out: dict[str, int] = {}
        for g, d in mapping.items():
            if g not in self.grid_dims:
                raise MappingError(f"{where}: {kind} names grid dim {g!r}, but this block graph has grid "
                                   f"dims {', '.join(self.grid_dims)} (grid {self.grid})")
            out[g] = self._data_dim(d, rank, f"{where}: {kind}[{g!r}]")
        seen: dict[int, str] = {}
        for g, d in out.items():
            if d in seen:
                raise MappingError(f"{where}: {kind} splits data dim {d} by two grid dims "
                                   f"({seen[d]!r} and {g!r}); a data dim takes at most one grid dim")
            seen[d] = g
        return {g: out[g] for g in self.grid_dims if g in out}

    @staticmethod
    def _data_dim(d: Any, rank: int, where: str) -> int:
        if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
            raise MappingError(f"{where}: data dim {d!r} does not exist in a tensor of rank {rank}")
        return d % rank

    def _own(self, t: Any, where: str) -> Tensor:
        t = super()._own(t, where)
        if self._phase[t.ref] == SAVED:
            raise GraphError(f"{where}: {t.name} is a saved output (a full tensor in global memory), not a tile")
        return t

    def _check_operands(self, name: str, tensors: Sequence[Tensor], attrs: Mapping[str, Any]) -> None:
        if joined([self._phase[t.ref] for t in tensors]) is None:
            where = {LOOP: "inside the loop", POST: "after it", INVARIANT: "the same in every iteration"}
            names = ", ".join(f"{t.name} ({where[self._phase[t.ref]]})" for t in tensors)
            raise GraphError(f"{name}: operands {names} are on different sides of the loop accumulator")
        self._scaled(name, attrs, tensors)

    def _scaled(self, op: str, attrs: Mapping[str, Any], tensors: Sequence[Tensor]) -> None:
        """Check the running-max rule (prism.ir.kinds.scaling) for the node about to be appended. A table op on
        operands that depend on no running max is independent of all, and so is an accumulator's (the rule's own
        cases): most nodes of most graphs, decided without the running maxima's shapes."""
        states = [self._scale.get(t.ref) for t in tensors]
        if not any(states) and not isinstance(KINDS.get(op), (RunningMax, Online)):
            self._pending_scale = None
            return
        running = {r: self.type_of(r).shape for r, s in self._scale.items() if s == (RUNNING, r)}
        self._pending_scale = scaling(op, attrs, [(t.shape, st) for t, st in zip(tensors, states)], running,
                                      me=(len(self.nodes), 0))

    def _append(self, node: Node) -> tuple[Tensor, ...]:
        out = super()._append(node)
        self._phase[out[0].ref] = kind_of(node).phase(node, [self._phase[r] for r in node.inputs])
        if self._pending_scale is not None:
            self._scale[out[0].ref] = self._pending_scale
            self._pending_scale = None
        return out

    def _before_append(self, node: Node) -> None:
        if self._frozen:
            raise GraphError("this block graph is already used by a kernel graph and can no longer change")

    def freeze(self) -> None:
        """Forbid further changes (called when a kernel graph starts using this block graph)."""
        self._frozen = True

    def check(self) -> BlockGraph:
        """Raise GraphError unless the block graph loads at least one input and saves an output."""
        if not self.input_types:
            raise GraphError("the block graph loads no input: call b.input(tensor, imap, fmap)")
        if not self.savers:
            raise GraphError("the block graph saves no output: call b.output(tensor, omap)")
        return self

    # -- reading -------------------------------------------------------------------------------

    def phase(self, ref: Ref) -> str:
        """"loop", "post" (after the loop accumulators) or "invariant" (the same in every iteration:
        from tiles the loop does not walk), prism.ir.kinds."""
        return self._phase[ref]

    def schedule(self) -> Schedule:
        """Where each node runs: before, inside or after the loop (prism.ir.kinds.schedule)."""
        return schedule(self)

    @property
    def loaders(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if kind_of(n) is LOADER]

    @property
    def output_types(self) -> list[TType]:
        return [self.nodes[i].outputs[0] for i in self.savers]

    def with_sizes(self, grid: Sequence[int], loop: int) -> BlockGraph:
        """The same structure and maps at other grid sizes and loop range (replayed, so re-checked)."""
        if len(tuple(grid)) != len(self.grid):
            raise MappingError(f"with_sizes: this block graph has {len(self.grid)} grid dim(s), got {grid!r}")
        return self.rebuilt(grid, loop)

    def rebuilt(self, grid: Sequence[int], loop: int,
                edit: Callable[[int, Node], Node] | None = None) -> BlockGraph:
        """Replay every node through the builder at `grid`/`loop`, letting `edit(index, node)` replace
        nodes on the way (mutation testing); every check runs again on the result."""
        out = BlockGraph(grid, loop, self.launch)
        refs: dict[Ref, Tensor] = {}
        for i, node in self.topo():
            node = edit(i, node) if edit else node
            source = self.input_types[node.attrs["index"]] if kind_of(node) is LOADER else None
            refs[(i, 0)] = kind_of(node).build(out, node, [refs[r] for r in node.inputs], source)
        return out

    def __str__(self) -> str:
        return format_block(self)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1
