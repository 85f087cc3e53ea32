"""A kernel's signature and its host launcher: the parameters in order (pointers, strides, the sizes counted at
launch, constexprs), what Triton must not specialize, and `launch_<name>` (mixed into
prism.codegen.emit.Emitter; prism.codegen.tail writes a launcher with it too).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from prism.codegen.layout import Layout, TileDim
from prism.codegen.spec import COUNTER_DTYPE, SIGNATURE_DTYPES, KernelSpec, Param, Size
from prism.codegen.split import rows, slots
from prism.ir.block import BlockGraph
from prism.ir.printer import format_block

__all__ = ["Signature", "indent", "launcher"]

_CONSTEXPRS = ("BLOCK", "TILE", "EXTENT")
"""A tile dim's constexprs, in parameter order: its block, its real lanes, a ragged dim's extent."""
PDL = "PDL"
"""The constexpr of a kernel launched with programmatic dependent launch (prism.ir.Launch.pdl): whether its
griddepcontrol instructions are compiled in."""


def launcher(name: str, grid: tuple[int, ...], args: list[tuple[str, int]], constexprs: dict[str, int],
             num_warps: int, num_stages: int | None, note: str = "", runtime: Sequence[tuple[str, Size]] = (),
             grid_sizes: Sequence[Size | None] = ()) -> list[str]:
    """`launch_<name>(tensors...)`: the host side of kernel `name`, passing each tensor of `args` (name, rank) and
    its strides, then the sizes counted from the tensors' shapes (`runtime`), then every constexpr, on `grid`
    (where `grid_sizes` has a Size, its blocks are counted from the shapes too). It returns Triton's compiled
    kernel, which prism.codegen.direct_launch binds for launches without the binder."""
    names = [a for a, _ in args]
    meta = [f"{n}={v}" for n, v in constexprs.items() if n != PDL] + [f"num_warps={num_warps}"]
    if PDL in constexprs:   # the interpreter has no griddepcontrol: it runs the kernel without
        meta += [f"{PDL}=int(not triton.knobs.runtime.interpret)", "launch_pdl=True"]
    meta += [f"num_stages={num_stages}"] if num_stages is not None else []
    if any(grid_sizes):
        dims = [str(g) if s is None else s.source(names) for g, s in zip(grid, grid_sizes)]
        grid_text = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
    else:
        grid_text = str(grid)
    return [f"def launch_{name}({', '.join(names)}):",
            f'    """Launch {name} on a grid of {grid_text}{note}; returns the compiled kernel."""',
            f"    return {name}[{grid_text}](",
            f"        {', '.join(names)},",
            *(f"        {', '.join(f'{a}.stride({d})' for d in range(rank))}," for a, rank in args),
            *([f"        {', '.join(s.source(names) for _, s in runtime)},"] if runtime else []),
            f"        {', '.join(meta)},",
            "    )"]


def indent(items: list[str]) -> list[str]:
    return [f"    {line}" for item in items for line in item.split("\n")]


def _maps(m: dict[str, int]) -> str:
    return "".join(f", pid_{g} -> dim {d}" for g, d in m.items())


class Signature:
    """The Emitter's parameters and launcher. It reads the Emitter's block graph (`b`), layout, buffers and their
    labels, dtypes, strides, warps and stages; `size_of` (prism.codegen.address) says where a runtime size is
    read."""

    b: BlockGraph
    name: str
    layout: Layout
    looped: bool
    runtime_loop: TileDim | None
    bases: list[str]
    outs: list[str]
    parts: dict[int, str]
    counts: dict[tuple[str, ...], str]
    labels: list[str]
    in_dtypes: list[str]
    out_dtypes: list[str]
    compute: str
    strides: dict[str, list[str]]
    num_warps: int
    num_stages: int | None
    buffers: list[str]
    size_of: Callable[..., Size]
    stride_names: Callable[[str, int], list[str]]
    summed: Callable[[int], bool]

    def constexprs(self, body: list[str]) -> dict[str, int]:
        """LOOP, then BLOCK_/TILE_/EXTENT_ of every tile dim the body mentions, in tile-dim order (not those
        known only at launch: `runtime`), then PDL where the body has programmatic dependent launch's
        instructions (prism.ir.Launch.pdl), at its value on a GPU."""
        classes = {t.name: (k, t) for k, t in enumerate(self.layout.classes)}
        out = {"LOOP": self.b.loop} if self.looped and not self.runtime_loop else {}
        text = "\n".join(body)
        names = set(re.findall(r"\b(?:BLOCK|TILE|EXTENT)_\w+\b", text))
        for n in sorted(names, key=lambda n: (classes[n.split("_", 1)[1]][0], _CONSTEXPRS.index(n.split("_")[0]))):
            kind, (_, t) = n.split("_")[0], classes[n.split("_", 1)[1]]
            if not (kind == "EXTENT" and t.runtime):
                out[n] = {"BLOCK": t.block, "TILE": t.tile, "EXTENT": t.extent}[kind]
        if re.search(r"\bPDL\b", text):   # what a GPU compiles (the launcher passes 0 to the interpreter)
            out[PDL] = 1
        return out

    def runtime(self, body: list[str]) -> list[tuple[str, Size]]:
        """The i32 arguments counted at launch: EXTENT_ of every runtime-size dim the body mentions, then LOOP if
        the loop walks one (its trip count: cdiv(extent, tile))."""
        names = set(re.findall(r"\bEXTENT_\w+\b", "\n".join(body)))
        out = [(f"EXTENT_{t.name}", self.size_of(t)) for t in self.layout.classes
               if t.runtime and f"EXTENT_{t.name}" in names]
        if self.looped and self.runtime_loop:
            out.append(("LOOP", self.size_of(self.runtime_loop, self.runtime_loop.tile)))
        return out

    def grid_sizes(self) -> tuple[Size | None, ...]:
        """Per grid dim, the blocks counted at launch (cdiv(extent, tile) of the runtime-size dim it splits), or
        None for a fixed count."""
        split = {t.grid: t for t in self.layout.classes if t.runtime and t.grid}
        return tuple(self.size_of(split[g], split[g].tile) if g in split else None for g in self.b.grid_dims)

    def unspecialized(self, runtime: list[tuple[str, Size]]) -> list[str]:
        """The parameters Triton must not specialize on their values: the runtime arguments, and each stride of a
        dim before a runtime-size dim (a row-major stride is a product of the sizes after it): else each extent
        that is 1 or a multiple of 16 would compile a kernel of its own."""
        if not runtime:
            return []
        out = [n for n, _ in runtime]
        nodes = list(self.b.loaders) + list(self.b.savers)
        for base, i in zip(self.bases + self.outs, nodes):
            last = max((d for d, t in enumerate(self.layout.dims[i]) if t.runtime), default=0)
            out += self.strides[base][:last]
        return out

    def params(self, constexprs: dict[str, int], runtime: Sequence[tuple[str, Size]] = ()) -> list[Param]:
        """The kernel's parameters, in order: input pointers, output pointers, the strides of each, the sizes
        counted at launch (`runtime`), constexprs."""
        b = self.b
        ins, outs, strides = [], [], []
        for k, base in enumerate(self.bases):
            a = b.nodes[b.loaders[k]].attrs
            loop = "" if a["fmap"] is None else f", loop over dim {a['fmap']}"
            ins.append(Param("in", [f"{base}_ptr"], [SIGNATURE_DTYPES[self.in_dtypes[k]]],
                             f"{self.labels[k]}: {self.in_dtypes[k]}{list(b.input_types[k].shape)}, "
                             f"tiles {list(b.nodes[b.loaders[k]].outputs[0].shape)}{_maps(a['imap'])}{loop}"))
        for k, base in enumerate(self.outs):
            node = b.nodes[b.savers[k]]
            sums, once = [f"pid_{g}" for g in b.summed(k)], [f"pid_{g}" for g in b.once(k)]
            summed = (f", summed over {', '.join(sums)} (its partials, {self.parts[k]})" if sums else "") + \
                (f", written once over {', '.join(once)} (the same tile in each)" if once else "")
            outs.append(Param("out", [f"{base}_ptr"], [SIGNATURE_DTYPES[self.out_dtypes[k]]],
                              f"output {k}: {self.out_dtypes[k]}{list(node.outputs[0].shape)}, "
                              f"tiles {list(b.nodes[node.inputs[0][0]].outputs[0].shape)}"
                              f"{_maps(node.attrs['omap'])}{summed}"))
        for k, base in self.parts.items():
            outs.append(Param("out", [f"{base}_ptr"], [SIGNATURE_DTYPES[self.compute]],
                              f"output {k}'s partials: {self.compute}[{slots(b, b.summed(k))}, ...], a tile per "
                              "block of its split"))
        for split, base in self.counts.items():
            outs.append(Param("out", [f"{base}_ptr"], [SIGNATURE_DTYPES[COUNTER_DTYPE]],
                              f"{rows(b, split)} row counter(s) of the split over {', '.join(split)}, int32, zero "
                              "between launches"))
        labels = self.labels + [f"output {k}" for k in range(len(self.outs))]
        labels += [f"output {k}'s partials" for k in self.parts] + [f"row counters {n}" for n in self.counts.values()]
        for base, label in zip(self.buffers, labels):
            names = self.stride_names(base, 1) if base in self.counts.values() else self.strides[base]
            strides.append(Param("stride", names, ["i32"] * len(names), f"strides of {label}, in elements"))
        sized = []
        for n, size in runtime:
            t = self.runtime_loop
            what = (f"loop iterations: cdiv(EXTENT_{t.name}, {t.tile}), counted at launch" if n == "LOOP" and t
                    else f"elements in the whole dim ({labels[size.arg]} dim {size.dim}), known at launch")
            sized.append(Param("size", [n], ["i32"], what))
        consts = []
        for n, v in constexprs.items():
            what = ("loop iterations" if n == "LOOP" else "real lanes" if n.startswith("TILE")
                    else "elements in the whole dim, the last tile partial" if n.startswith("EXTENT")
                    else "lanes, a power of two")
            consts.append(Param("constexpr", [n], ["constexpr"], f"{v} {what}" if n != PDL else
                                "programmatic dependent launch: 1 on a GPU, 0 in Triton's interpreter"))
        return ins + outs + strides + sized + consts

    def spec(self, body: list[str]) -> KernelSpec:
        constexprs, runtime = self.constexprs(body), self.runtime(body)
        params = self.params(constexprs, runtime)
        sig = {n: t for p in params for n, t in zip(p.names, p.types)}
        lines = [p.line for p in params]
        fixed = self.unspecialized(runtime)
        src = [f"# {line}" for line in format_block(self.b).splitlines()]
        src += [f"@triton.jit(do_not_specialize={fixed!r})" if fixed else "@triton.jit", f"def {self.name}("]
        src += indent(lines) + ["):"] + indent(body)
        note = f": {', '.join(self.counts.values())} must be zero (each launch leaves them so)" if self.counts else ""
        grid_sizes = self.grid_sizes() if runtime else ()
        src += ["", ""] + launcher(self.name, self.b.grid, [(a, len(self.strides[a])) for a in self.buffers],
                                   constexprs, self.num_warps, self.num_stages, note, runtime, grid_sizes)
        out_sizes = tuple(tuple(t.size for t in self.layout.dims[i]) for i in self.b.savers)
        bounds = tuple((self.size_of(t), t.block) for t in self.layout.classes
                       if t.runtime and not t.grid and not t.looped)
        return KernelSpec(self.name, f"launch_{self.name}", "\n".join(src) + "\n", self.b.grid, sig, constexprs,
                          tuple(self.in_dtypes), tuple(self.out_dtypes) + (self.compute,) * len(self.parts)
                          + (COUNTER_DTYPE,) * len(self.counts),
                          tuple(self.summed(k) for k in range(len(self.outs)))
                          + (False,) * (len(self.parts) + len(self.counts)),
                          self.num_warps, self.num_stages, tuple(runtime), grid_sizes, out_sizes, bounds)
