"""Prism's IR: the op table, node kinds, kernel graphs (full tensors) and block graphs (fused kernels).

Modules, each importing only those above it: ops (the op table), builder (tensors, nodes, the shared
builder), passes (what a node kind asks of code generation, a typed contract; it names kinds only as types),
kinds (block-graph node kinds and the schedule), launch (how a kernel is compiled: warps, stages), sizes (a
graph's parallel sizes by name, and the constraints among them a proof may need), printer and serialize
(text, JSON and hashing, as functions over graphs), block (BlockGraph), graph (KernelGraph).
"""

from prism.ir.block import GRID_DIMS, BlockGraph
from prism.ir.builder import Node, Ref, Tensor
from prism.ir.graph import KernelGraph
from prism.ir.launch import Launch
from prism.ir.ops import DTYPES, OPS, OpDef, TType
from prism.ir.serialize import from_json, structural_hash, to_json
from prism.ir.sizes import Constraint

__all__ = ["BlockGraph", "Constraint", "DTYPES", "GRID_DIMS", "KernelGraph", "Launch", "Node", "OPS", "OpDef", "Ref",
           "TType", "Tensor", "from_json", "structural_hash", "to_json"]
