"""The reference executor: runs kernel graphs and fused kernels on CPU tensors, block by block."""

from prism.interp.executor import run, run_block

__all__ = ["run", "run_block"]
