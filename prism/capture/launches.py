"""Every launch a compiled graph makes per call: Prism's kernels and what torch runs of the rest.

A decode step's time over its DRAM floor is mostly its kernel boundaries, so a layer is judged by all it
launches, not only by Prism's kernels: RoPE, a KV-cache write or a dtype copy that torch runs between two Prism
ops is a launch too. Prism's ops say their own (`OptimizedGraph.launches`); the rest is counted where it is
decided:
- Inductor's rest, in the module Inductor generated for it (the wrapper's calls: each Triton kernel's `.run`,
  each C++ kernel, each library call through `extern_kernels`, each ATen op it falls back to), read from the
  compiled graph's `source_code`; its Prism ops are Prism's and not counted again;
- a rest run as the ATen graph (`rest="eager"`, or a rest of moves alone), one launch per op that makes or
  writes elements; views, which only describe elements already there, launch nothing.
The counts are of this device's code: Inductor fuses the same rest into other kernels for a GPU than for a CPU.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from prism.capture.aten import op_name
from prism.runtime.torch_op import NAMESPACE

__all__ = ["VIEWS", "in_code", "in_graph", "summed"]

VIEWS = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.expand.default", "aten.t.default",
                   "aten.transpose.int", "aten.permute.default", "aten.unsqueeze.default", "aten.squeeze.dim",
                   "aten.squeeze.dims", "aten.squeeze.default", "aten.slice.Tensor", "aten.select.int",
                   "aten.alias.default", "aten.as_strided.default", "aten.detach.default", "aten.split.Tensor",
                   "aten.split_with_sizes.default", "aten.unbind.int", "getitem", "sym_size", "sym_numel"})
"""ATen ops (and FX's `getitem`) that return views of their input: no launch. `reshape` is one where the strides
allow a view (it copies where they do not)."""

_TEXT = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"", re.S)      # the kernels' own sources, inside the wrapper
_TAIL = re.compile(r"^def (get_args|benchmark_compiled_module)\b.*", re.S | re.M)  # the module's self-benchmark
_CALLS = [re.compile(r"^\s*(?:\w+\s*=\s*)?(\w+)\.run\(", re.M),                     # a Triton kernel
          re.compile(r"^\s*(?:\w+\s*=\s*)?(cpp_fused_\w+)\(", re.M),                # a C++ kernel
          re.compile(r"^\s*(?:\w+\s*=\s*)?extern_kernels\.(\w+)\(", re.M),          # a library call (a GEMM)
          re.compile(r"^\s*(?:\w+\s*=\s*)?(?:torch\.ops\.)?(aten\.\w+(?:\.\w+)?)\(", re.M)]  # an ATen fallback


def in_code(source: str) -> list[str]:
    """The launches in one call of Inductor's generated module `source`, each named by its kernel or op, in
    order. Its calls of Prism's ops are Prism's (`torch.ops.prism...`: none of these patterns); the kernels'
    sources (strings in the module) and its self-benchmark are not calls of the graph."""
    body = _TAIL.sub("", _TEXT.sub("''", source))
    found = [(m.start(), m.group(1)) for pattern in _CALLS for m in pattern.finditer(body)]
    found = [(at, name) for at, name in found if f"aten.{name}" not in VIEWS and name not in VIEWS]
    return [name for _, name in sorted(found)]


def in_graph(gm: Any) -> list[str]:
    """The launches of torch's ops in one run of the ATen graph `gm` as it is, each named by its op, in order
    (Prism's ops are Prism's)."""
    named = [(op_name(n), n) for n in gm.graph.nodes if n.op == "call_function"]
    return [name for name, n in named if name not in VIEWS and not name.startswith(f"{NAMESPACE}.")
            and not _viewing_reshape(n)]


def _viewing_reshape(node: Any) -> bool:
    """Whether `node` is a reshape whose input's strides allow a view (it copies only where they do not)."""
    if op_name(node) != "aten.reshape.default":
        return False
    src = node.args[0].meta.get("val")
    if src is None:
        return False
    try:
        torch.empty_strided(src.shape, src.stride(), device="meta").view(node.args[1])
    except RuntimeError:
        return False
    return True


def summed(replaced: list[dict[str, Any]], rest: list[str] | None, how: str) -> dict[str, Any]:
    """A graph's launches per call as `history` keeps them: Prism's (its replaced cones' `launches` summed;
    `prism_later` counts those whose kernels are chosen after the compile, a background job's or a size
    bucket's, and are not in the sum), torch's rest (`rest`: its launches, named; None where the compiled rest
    had no source to read) and the total."""
    known = [r["launches"] for r in replaced if r.get("launches") is not None]
    return {"prism": sum(known), "prism_later": len(replaced) - len(known),
            "rest": None if rest is None else len(rest),
            "total": None if rest is None else sum(known) + len(rest),
            "rest_kernels": rest, "how": how}
