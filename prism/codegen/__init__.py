"""Code generation: µGraphs → Triton source; loading, ahead-of-time compilation to PTX, and launching."""

from prism.codegen.aot import AotKernel, compile_aot, default_target
from prism.codegen.compiled import Allocator, CompiledGraph, compile_graph
from prism.codegen.emit import emit_kernel
from prism.codegen.load import cache_dir, interpreting
from prism.codegen.one_op import to_custom
from prism.codegen.plan import Buffer, Plan, Step, plan_graph
from prism.codegen.spec import KernelSpec
from prism.errors import CodegenError

__all__ = [
    "Allocator",
    "AotKernel",
    "Buffer",
    "CodegenError",
    "CompiledGraph",
    "KernelSpec",
    "Plan",
    "Step",
    "cache_dir",
    "compile_aot",
    "compile_graph",
    "default_target",
    "emit_kernel",
    "interpreting",
    "plan_graph",
    "to_custom",
]
