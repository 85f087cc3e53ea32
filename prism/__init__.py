"""Prism: a symbolic superoptimizer that turns a tensor program into a proven-equal fused GPU kernel."""

from prism import errors, interp, verify, workloads
from prism.ir import BlockGraph, KernelGraph, Tensor

__all__ = ["BlockGraph", "KernelGraph", "Tensor", "errors", "interp", "verify", "workloads"]
__version__ = "0.1.0"
