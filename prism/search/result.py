"""SearchResult: the verified sGraphs of one search, its statistics, JSON save/load, instantiation."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from prism.errors import SerializationError
from prism.ir import KernelGraph
from prism.ir.block import GRID_DIMS
from prism.ir.kinds import ONLINE
from prism.ir.sizes import Constraint
from prism.outputs import write_text
from prism.provenance import build_id
from prism.symbolic.draft import LOAD_OP
from prism.symbolic.mapping import Mapping
from prism.symbolic.structure import Structure, grouped_sums, instantiate, structure_from_json

__all__ = ["FORMAT", "SearchResult", "SymbolicGraph"]

FORMAT = "prism.search_result"
VERSION = 1


@dataclass(frozen=True)
class SymbolicGraph:
    """One verified sGraph: a structure with concrete maps; grid sizes and loop range stay symbolic.
    `constraints`: the size constraints its proof needs (prism.ir.sizes; none: it holds for all sizes),
    which the tuner's points keep to (prism.tune.space) and every graph it instantiates carries."""

    structure: Structure
    mapping: Mapping
    constraints: tuple[Constraint, ...] = ()

    @property
    def n_grid(self) -> int:
        return self.mapping.n_grid

    @cached_property
    def form(self) -> str:
        """How its kernels combine the blocks' sums, in a few words (a tuning report's forms): the mapping's form
        (prism.symbolic.mapping.Mapping.form), where a one-kernel form that sums blocks (split K: prism.codegen.split)
        is "fused+split sums": its costs come from other terms than a kernel whose blocks each own their tiles.
        Made once: the tuner asks for it for every ranked point."""
        form = self.mapping.form
        if form == "fused" and self.summing:
            return "fused+split sums"
        return form

    @cached_property
    def summing(self) -> tuple[int, ...]:
        """The grid dims (indexes) along which a one-kernel form's blocks sum some output (split
        K); empty for other forms. At a grid where each of them has one block, the form sums nothing."""
        if self.mapping.form != "fused":
            return ()
        dims = {g for sums in self.structure.problem().partials(self.mapping) or () for g in sums}
        return tuple(i for i, g in enumerate(GRID_DIMS) if g in dims)

    def key(self) -> tuple:
        """The canonical order of results: by structure, then mapping."""
        return (self.structure.key(), repr(self.mapping))

    @cached_property
    def identity(self) -> str:
        """A name of this sGraph that no search numbering enters: a hash of its JSON (structure, mapping,
        constraints). A candidate measured on a GPU is stored with it (prism.tune.fit.Sample.sgraph), so a later
        tuning from another search of the same program finds the same form again (TuneOptions.keep)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def maps(self) -> dict[str, Any]:
        """{"loaders": [(imap, fmap), ...], "outputs": [omap, ...]} as BlockGraph takes them."""
        loaders, omaps = self.structure.problem().maps(self.mapping)
        return {"loaders": loaders, "outputs": omaps}

    def instantiate(self, shapes: Sequence[Sequence[int]] | None = None, grid: Sequence[int] | None = None,
                    loop: int = 1, dtype: str = "float16", names: Sequence[str] | None = None) -> KernelGraph:
        g = instantiate(self.structure, self.mapping, shapes, grid, loop, dtype, names)
        g.constraints = self.constraints
        return g

    def describe(self, names: Sequence[str] | None = None) -> str:
        """One line per op, with symbolic grid dims and the loop: what a reader needs to compare graphs."""
        names = list(names) if names else [f"in{i}" for i in range(len(self.structure.graph.space.shapes))]
        loaders, omaps = self.structure.problem().maps(self.mapping)
        g = self.structure.graph
        loop = "d_i" if self.mapping.loop else "1 (no loop)"
        lines = [f"sGraph grid=({', '.join('d_' + p for p in GRID_DIMS[:self.n_grid])}) loop={loop}"]
        for k, op in enumerate(g.ops):
            if op.op == LOAD_OP:
                imap, fmap = loaders[op.attrs[0]]
                rhs = f"load {names[op.attrs[0]]} imap={imap} fmap={fmap}"
            else:
                args = ", ".join(f"t{i}" for i in op.inputs) + "".join(f", {a!r}" for a in op.attrs)
                rhs = f"{op.op}({args})"
            lines.append(f"  t{k} = {rhs}")
        folds = self.structure.problem().partials(self.mapping) if self.mapping.partials else None
        once = self.structure.problem().once(self.mapping)
        grouped = grouped_sums(self.structure, self.mapping) if self.mapping.group else {}
        for k, o in enumerate(self.structure.outputs):
            fold = folds[k] if folds else {}
            rescale = "group_scale to the largest of the splits' maxima, " \
                if self.structure.graph.ops[o].op == ONLINE.name else ""
            sides = ", ".join(f"d_{p} side by side along {d}" for p, d in fold.items())
            m = self.mapping
            combine = "a loop over the splits, one per iteration" if m.walk else f"{rescale}group_sum"
            first = f", its tile summed in groups of {m.group}" if grouped.keys() & {o, *g.ops[o].inputs} else ""
            tail = ", run as this kernel's tail" if m.tail else ""
            kept = f"  (partials: {sides}{first}, then {combine}{tail})" if fold else ""
            written = f" once={','.join(once[k])}" if once[k] else ""
            lines.append(f"  out{k} = save t{o} omap={omaps[k] | fold}{written}{kept}")
        for k, op in enumerate(self.structure.kernel_ops):
            lines.append(f"  kernel v{len(self.structure.outputs) + k} = {op.op}("
                         + ", ".join(f"v{i}" for i in op.inputs) + ")")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        kept = {"constraints": [c.to_json() for c in self.constraints]} if self.constraints else {}
        return {"structure": self.structure.to_json(), "mapping": self.mapping.to_json(), **kept}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SymbolicGraph:
        return cls(structure_from_json(data["structure"]), Mapping.from_json(data["mapping"]),
                   tuple(Constraint.from_json(c) for c in data.get("constraints", ())))


class SearchResult:
    """What `prism.search` returns: `.graphs` (verified, canonically sorted), `.stats`, the program, and
    `.build`: the Prism build that searched (prism.provenance; None when a saved file does not say)."""

    def __init__(self, program: KernelGraph, graphs: Sequence[SymbolicGraph], stats: dict[str, Any],
                 build: str | None = None) -> None:
        self.program = program
        self.graphs = list(graphs)
        self.stats = stats
        self.build = build_id() if build is None else build

    @property
    def stale(self) -> bool:
        """Searched by other code than this: its graphs are verified, but graphs this build finds may be
        missing (search again to have them)."""
        return self.build != build_id()

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.program.inputs]

    def instantiate(self, i: int, graph_or_shapes: KernelGraph | Sequence[Sequence[int]] | None = None,
                    grid: Sequence[int] | None = None, loop: int = 1) -> KernelGraph:
        """Graph `i` as a concrete µGraph for a config: give the program at that config (or its input
        shapes), one size per grid dim, and the loop range. Tiles that do not divide raise MappingError."""
        names, dtype = self.names, self.program.inputs[0].dtype
        if isinstance(graph_or_shapes, KernelGraph):
            shapes = [t.shape for t in graph_or_shapes.inputs]
            names, dtype = [t.name for t in graph_or_shapes.inputs], graph_or_shapes.inputs[0].dtype
        else:
            shapes = graph_or_shapes
        return self.graphs[i].instantiate(shapes, grid, loop, dtype, names)

    def describe(self, i: int) -> str:
        return self.graphs[i].describe(self.names)

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "build": self.build,
                "program": self.program.to_json(),  # type: ignore[attr-defined]
                "graphs": [g.to_json() for g in self.graphs], "stats": self.stats}

    @classmethod
    def from_json(cls, data: Any) -> SearchResult:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = f"its format is {data['format']!r}" if isinstance(data, dict) and "format" in data else \
                "it has no 'format' field"
            raise SerializationError(f"not a {FORMAT} document ({found}; `prism search` and SearchResult.save "
                                     "write them)")
        if data.get("version") != VERSION:
            raise SerializationError(f"{FORMAT}: unknown version {data.get('version')!r}")
        try:
            program = KernelGraph.from_json(data["program"])  # type: ignore[attr-defined]
            graphs = [SymbolicGraph.from_json(g) for g in data["graphs"]]
        except (KeyError, TypeError, ValueError) as e:
            raise SerializationError(f"{FORMAT}: corrupt document ({e})") from None
        return cls(program, graphs, data.get("stats", {}), str(data.get("build", "unknown")))

    def save(self, path: str | Path) -> None:
        """Write the result as JSON, whole or not at all (an interrupted save leaves no partial file)."""
        write_text(path, json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> SearchResult:
        """A saved result; a file that is not one is a SerializationError naming the file."""
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as e:
            raise SerializationError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
        except SerializationError as e:
            raise SerializationError(f"{path}: {e}") from None

    def __len__(self) -> int:
        return len(self.graphs)

    def __repr__(self) -> str:
        return f"SearchResult({len(self.graphs)} graphs)"
