"""Prism's IR: the op registry, kernel graphs (full tensors) and block graphs (fused kernels)."""

from prism.ir.block import GRID_DIMS, BlockGraph
from prism.ir.graph import KernelGraph, Node, Ref, Tensor
from prism.ir.ops import DTYPES, OPS, OpDef, TType

__all__ = ["BlockGraph", "DTYPES", "GRID_DIMS", "KernelGraph", "Node", "OPS", "OpDef", "Ref", "TType", "Tensor"]
