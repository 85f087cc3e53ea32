"""Prism: a symbolic superoptimizer that turns a tensor program into a proven-equal fused GPU kernel."""

from prism import errors, interp, verify, workloads
from prism.ir import BlockGraph, KernelGraph, Tensor
from prism.runtime import OptimizedGraph, superoptimize
from prism.search import SearchResult
from prism.search import search  # the function; the subpackage stays importable as prism.search.*

__all__ = ["BlockGraph", "KernelGraph", "OptimizedGraph", "SearchResult", "Tensor", "errors", "interp",
           "search", "superoptimize", "verify", "workloads"]
__version__ = "0.1.0"
