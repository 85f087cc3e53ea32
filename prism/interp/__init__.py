"""The reference executor: runs kernel graphs and fused kernels on CPU tensors, block by block."""

from prism.interp.executor import program_fn, run, run_block

__all__ = ["program_fn", "run", "run_block"]
