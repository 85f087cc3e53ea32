"""`prism.from_torch(fn_or_module, *example_inputs)`: a function or module in plain torch → a KernelGraph.

The program is captured with `torch.export` (ATen ops, shapes from the example inputs), module parameters
and buffers become graph inputs, and the ATen graph is lowered op by op (prism.capture.lower). The graph's
inputs are the FX values it reads, in the order first used, each possibly viewed (a transposed weight, a
bias viewed as a row): `Capture.arguments(*example_inputs)` gives the tensors to pass, in that order.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from prism.capture.lower import lower
from prism.capture.views import Source
from prism.errors import InputError, UnsupportedOp
from prism.ir import KernelGraph

__all__ = ["Capture", "capture", "from_torch"]


class _Function(torch.nn.Module):
    """A plain function as a module, which torch.export takes."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@dataclass
class Capture:
    """A captured program: the kernel graph, each graph input's source, and what the sources read."""

    graph: KernelGraph
    sources: list[Source]
    user_inputs: list[Any]                # the FX placeholders of the caller's arguments, in order
    constants: dict[Any, torch.Tensor]    # the FX placeholders of parameters, buffers, constants → values
    output_shapes: list[tuple[int, ...]]  # each output's shape in torch; the graph's holds the same elements in
                                          # row-major order, leading dims merged where the program's views did

    def arguments(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """The graph's input tensors for a call of the captured program with `inputs`."""
        if len(inputs) != len(self.user_inputs):
            raise InputError(f"the captured program takes {len(self.user_inputs)} input(s), got {len(inputs)}")
        values = dict(zip(self.user_inputs, inputs)) | self.constants
        return [s.apply(values[s.node]) for s in self.sources]


def capture(fn_or_module: Callable[..., Any], *example_inputs: Any) -> Capture:
    """Capture `fn_or_module` at `example_inputs` (see the module docstring); UnsupportedOp names what Prism
    cannot express, InputError what torch.export could not capture."""
    if not callable(fn_or_module):
        raise InputError(f"from_torch: expected a function or torch.nn.Module, got {type(fn_or_module).__name__}")
    if not example_inputs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise InputError("from_torch: give example input tensors (the shapes and dtypes to capture at)")
    module = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else _Function(fn_or_module)
    try:
        program = torch.export.export(module, tuple(example_inputs))
    except Exception as e:  # torch's own capture failed: data-dependent control flow, unsupported Python
        raise InputError(f"from_torch: torch.export could not capture the program: "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    gm = program.graph_module
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    state = program.state_dict | dict(program.constants)
    user, constants, names = [], {}, {}
    params = _parameter_names(fn_or_module, len(example_inputs))
    for spec in program.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            names[node] = params[len(user)]
            user.append(node)
        elif spec.target in state:
            constants[node] = state[spec.target]
            names[node] = spec.target.replace(".", "_")
        else:
            raise UnsupportedOp(f"input {spec.arg.name} ({spec.kind.name.lower()}) has no value to capture")
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    outputs = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    code = getattr(fn_or_module, "__code__", None)
    if code is not None:  # torch records the wrapper's frame only: name the function's own definition
        origin = f'in {code.co_name} defined at File "{code.co_filename}", line {code.co_firstlineno}'
        for n in nodes:
            n.meta["prism_origin"] = origin
    graph, sources, shapes = lower(nodes, list(placeholders.values()), outputs, names)
    return Capture(graph, sources, user, constants, shapes)


def _parameter_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names of the first `n` parameters of `fn` (a module's forward), or in0, in1, ..."""
    try:
        params = list(inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:n]
    return named + [f"in{k}" for k in range(len(named), n)]


def from_torch(fn_or_module: Callable[..., Any], *example_inputs: Any) -> KernelGraph:
    """The KernelGraph computing `fn_or_module` at `example_inputs` (torch.export, then Prism's ops); module
    parameters are graph inputs. `capture(...)` also gives the input tensors to pass it."""
    return capture(fn_or_module, *example_inputs).graph
