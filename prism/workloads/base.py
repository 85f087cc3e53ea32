"""The Workload record every workload is an instance of: configs, builders, reference, input generator."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from prism.errors import InputError, PrismError
from prism.ir import KernelGraph
from prism.ir.ops import TORCH_DTYPES, check_dtype

__all__ = ["EPS", "Config", "PaperFigures", "Workload", "WorkloadError", "default_tile", "rms_norm"]

EPS = 1e-6
"""The rms_norm epsilon of every workload (a real LLM's; eps = 0 would hide the add_scalar)."""

Config = dict[str, int]


class WorkloadError(PrismError):
    """An unknown workload name, a config with missing, extra or bad keys, or an unknown fused parameter."""


def rms_norm(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Plain-torch rms_norm over the last dim, written out so references never lean on the IR."""
    return x / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)


def default_tile(size: int, tile: int = 64) -> int:
    """A tile of at most `tile` that divides `size`: 64 for the real configs, smaller for odd test sizes.

    gcd keeps every default grid/loop size a divisor of the dim it splits, whatever the config.
    """
    return math.gcd(size, tile)


@dataclass(frozen=True)
class PaperFigures:
    """A workload's figures as the Prism paper prints them: §7.3 search seconds and §7.4 unique graphs, each
    for Mirage at config 1, Mirage at config 2 and Prism ('x' after seconds: stopped at the time limit)."""

    search_seconds: tuple[str, str, str]
    graphs: tuple[int, int, int]


@dataclass(frozen=True, eq=False)
class Workload:
    """One benchmark program of the paper: its real configs, how to build it, and what it computes.

    The callables take a checked config (a dict with exactly the keys in `dims`) and a dtype name;
    `scales` gives each input's magnitude so that nothing overflows float16 and softmax logits stay O(1).
    What reports and tests need is data here too: `display` (the name tables print), `small` (a config of
    the same structure small enough to search in seconds and to run on a CPU: searches are size-free, so
    one search at `small` serves every config), `medium` (still quick on a CPU, but large enough that the
    hand-written fused kernel's default 64-wide tiles make it loop or spread over several blocks: what
    pictures and size-sensitive tests use), `paper` (the paper's figures, for its five programs) and
    `sweep` (the shape grid of the paper's evaluation script, in this program's config keys).
    """

    name: str
    program: str
    dims: tuple[str, ...]
    real_configs: tuple[Mapping[str, int], ...]
    fused_params: tuple[str, ...]
    graph_fn: Callable[[Config, str], KernelGraph] = field(repr=False)
    reference_fn: Callable[..., torch.Tensor] = field(repr=False)
    scales_fn: Callable[[Config], Mapping[str, float]] = field(repr=False)
    fused_fn: Callable[..., KernelGraph] = field(repr=False)
    dtype: str = "float16"
    display: str = field(default="", kw_only=True)
    small: Mapping[str, int] = field(default_factory=dict, kw_only=True)
    medium: Mapping[str, int] = field(default_factory=dict, kw_only=True)
    paper: PaperFigures | None = field(default=None, kw_only=True)
    sweep: tuple[Mapping[str, int], ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", self.name)
        for cfg in (self.small, self.medium, *self.sweep):   # a workload with a bad config is a bug, found at import
            self.check_config(cfg)

    @property
    def sweep_configs(self) -> list[Config]:
        """`sweep` as fresh dicts."""
        return [dict(c) for c in self.sweep]

    @property
    def small_config(self) -> Config:
        """`small` as a fresh dict (callers may change it freely)."""
        return dict(self.small)

    @property
    def medium_config(self) -> Config:
        """`medium` as a fresh dict."""
        return dict(self.medium)

    @property
    def configs(self) -> list[Config]:
        """The paper's two configs of this workload (fresh dicts: callers may change them freely)."""
        return [dict(c) for c in self.real_configs]

    def check_config(self, cfg: Any) -> Config:
        """`cfg` as a plain dict of positive ints with exactly the keys in `dims`, or a WorkloadError."""
        want = ", ".join(self.dims)
        if not isinstance(cfg, Mapping):
            raise WorkloadError(f"{self.name}: a config is a dict with keys {want}, got {cfg!r}")
        missing = [k for k in self.dims if k not in cfg]
        extra = [k for k in cfg if k not in self.dims]
        if missing or extra:
            parts = ([f"missing key(s) {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unknown key(s) {', '.join(map(repr, extra))}"] if extra else [])
            raise WorkloadError(f"{self.name}: config {dict(cfg)!r} has {' and '.join(parts)}; "
                                f"expected exactly the keys {want}")
        out = {}
        for k in self.dims:
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise WorkloadError(f"{self.name}: config key {k!r} must be a positive int, got {v!r}")
            out[k] = int(v)
        return out

    def _dtype(self, dtype: Any) -> str:
        return self.dtype if dtype is None else check_dtype(dtype, self.name)

    # -- the program --------------------------------------------------------------------------

    def build(self, cfg: Mapping[str, int], dtype: Any = None) -> KernelGraph:
        """The unfused program at `cfg` as a kernel graph (what the superoptimizer starts from)."""
        return self.graph_fn(self.check_config(cfg), self._dtype(dtype))

    def fused(self, cfg: Mapping[str, int], dtype: Any = None, **params: Any) -> KernelGraph:
        """The hand-written fused µGraph(s) as custom ops; `params` (see `fused_params`) set grid/loop
        sizes, defaulting to tiles of 64 clipped to the dims. Sizes that do not fit the dims raise the
        IR's MappingError, so a search or tuner can treat them like any other invalid mapping."""
        unknown = sorted(set(params) - set(self.fused_params))
        if unknown:
            raise WorkloadError(f"{self.name}: unknown fused parameter(s) {', '.join(map(repr, unknown))}; "
                                f"known: {', '.join(self.fused_params)}")
        return self.fused_fn(self.check_config(cfg), self._dtype(dtype), **params)

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The program in plain torch, in the inputs' dtype (the ground truth the graphs must match)."""
        arity = len(self.input_names)
        if len(inputs) != arity or not all(isinstance(t, torch.Tensor) for t in inputs):
            got = ", ".join(type(t).__name__ for t in inputs) or "nothing"
            raise InputError(f"{self.name}.reference: expected {arity} tensors "
                             f"({', '.join(self.input_names)}), got {got}")
        try:
            return self.reference_fn(*inputs)
        except RuntimeError as e:
            shapes = ", ".join(str(list(t.shape)) for t in inputs)
            raise InputError(f"{self.name}.reference: inputs of shapes {shapes} do not fit: {e}") from None

    @property
    def input_names(self) -> list[str]:
        """The input names in order (what `build`, `reference` and `inputs` agree on)."""
        return [t.name for t in self.graph_fn(dict.fromkeys(self.dims, 1), self.dtype).inputs]

    # -- data ----------------------------------------------------------------------------------

    def inputs(self, cfg: Mapping[str, int], seed: int, dtype: Any = None,
               scales: Mapping[str, float] | None = None) -> list[torch.Tensor]:
        """Random inputs for `cfg`, the same for the same seed whatever the dtype.

        Each entry is ±scale·u with u uniform in [0.5, 1.5): never zero (a zero would hide a missing
        term) and O(scale) in size; `scales` replaces the workload's scale of the inputs it names (the
        attention workloads' `logit_scales` give the logits of real models). Values are drawn in float32
        (float64 arithmetic on 16M-entry weights costs seconds) and then converted, so every dtype holds
        the same values, rounded.
        """
        cfg = self.check_config(cfg)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise WorkloadError(f"{self.name}: seed must be a non-negative int, got {seed!r}")
        torch_dtype = TORCH_DTYPES[self._dtype(dtype)]
        gen = torch.Generator().manual_seed(int(seed))
        unknown = sorted(set(scales or {}) - set(self.input_names))
        if unknown:
            raise WorkloadError(f"{self.name}: scales for unknown input(s) {', '.join(map(repr, unknown))}; "
                                f"inputs: {', '.join(self.input_names)}")
        bad = {k: v for k, v in (scales or {}).items()
               if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf}
        if bad:
            raise WorkloadError(f"{self.name}: a scale is a positive finite number, got {bad}")
        scales = {**self.scales_fn(cfg), **(scales or {})}
        out = []
        for t in self.graph_fn(cfg, self.dtype).inputs:
            v = torch.rand(t.shape, generator=gen).mul_(2).sub_(1)          # uniform in [-1, 1)
            v.add_(torch.where(v < 0, -0.5, 0.5)).mul_(scales[t.name])      # ±[0.5, 1.5) · scale
            out.append(v.to(torch_dtype))
        return out

    def io_bytes(self, cfg: Mapping[str, int], dtype: Any = None) -> int:
        """Bytes a perfect kernel moves (each input read once, each output written once): the
        memory-bound floor every timing is reported against."""
        g = self.build(cfg, dtype)
        tensors = g.inputs + g.output_tensors
        return sum(math.prod(t.shape) * TORCH_DTYPES[t.dtype].itemsize for t in tensors)

    def __str__(self) -> str:
        return f"{self.name}: {self.program}"

