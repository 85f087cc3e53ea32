"""Parameter instantiation and choice: grid sizes and loop ranges, the cost model, compiling, timing."""

from prism.options import TuneOptions
from prism.tune.compile import CompileResult, compile_many
from prism.tune.cost import Cost, KernelCost, KernelWork, estimate, kernels_of
from prism.tune.profile import spearman
from prism.tune.report import COST_MODEL, GPU_PROFILE, Entry, Report
from prism.tune.space import Candidate, GraphSpace, Space
from prism.tune.target import H100, H200, Target, get_target
from prism.tune.tuner import TuneError, Tuned, floor_seconds, tune

__all__ = ["COST_MODEL", "GPU_PROFILE", "H100", "H200", "Candidate", "CompileResult", "Cost", "Entry", "GraphSpace",
           "KernelCost", "KernelWork", "Report", "Space", "Target", "TuneError", "TuneOptions", "Tuned",
           "compile_many", "estimate", "floor_seconds", "get_target", "kernels_of", "spearman", "tune"]
