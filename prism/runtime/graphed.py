"""An OptimizedGraph captured in one CUDA graph: a call costs one graph replay, no Python launch path.

Two ways to feed the graph, chosen at capture (`OptimizedGraph.cuda_graph(*example, static=...)`):
  copy    (static=False, the default) the graph reads buffers of its own; each call copies the given
          tensors into them (one device copy per input), then replays. Any tensors of the captured
          signature work; the copies cost a little device time and a launch each.
  static  (static=True) the graph reads the very tensors it was captured with; each call must pass
          those tensors again (checked by address) and only replays. Least overhead, for loops that
          write their inputs in place (a decode step's activations, a KV cache).
Either way the outputs are the graph's own buffers, overwritten by the next replay: clone what you keep.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from prism.errors import InputError

__all__ = ["GraphedCall"]


class GraphedCall:
    """`g(*tensors)` replays the captured graph and returns its output buffers (a list)."""

    def __init__(self, run: Callable[..., list[torch.Tensor]], example: Sequence[torch.Tensor], static: bool = False,
                 warmup: int = 2) -> None:
        """Capture `run` (an OptimizedGraph, its inputs checked) called on `example`."""
        self.static = static
        self.inputs = list(example) if static else [t.clone() for t in example]
        side = torch.cuda.Stream(device=self.inputs[0].device)
        side.wait_stream(torch.cuda.current_stream(side.device))
        with torch.cuda.stream(side):  # warm up off the default stream, as capture requires
            for _ in range(warmup):
                run(*self.inputs)
        torch.cuda.current_stream(side.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = run(*self.inputs)
        self.signature = [(t.shape, t.dtype, t.device) for t in self.inputs]

    def __call__(self, *tensors: Any) -> list[torch.Tensor]:
        if len(tensors) != len(self.inputs):
            raise InputError(f"the captured graph takes {len(self.inputs)} tensor(s), got {len(tensors)}")
        if self.static:
            for k, (t, mine) in enumerate(zip(tensors, self.inputs)):
                if t is not mine and (not isinstance(t, torch.Tensor) or t.data_ptr() != mine.data_ptr()
                                      or t.shape != mine.shape or t.stride() != mine.stride()):
                    raise InputError(f"input {k}: a graph captured with static=True reads the tensors it was "
                                     "captured with; pass those (write new values into them), or capture with "
                                     "static=False to copy")
        else:
            for k, (t, (shape, dtype, device)) in enumerate(zip(tensors, self.signature)):
                if not isinstance(t, torch.Tensor) or t.shape != shape or t.dtype != dtype or t.device != device:
                    got = f"{t.dtype}{list(t.shape)} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
                    raise InputError(f"input {k}: the graph was captured for {dtype}{list(shape)} on {device}, "
                                     f"got {got}")
                self.inputs[k].copy_(t)
        self.graph.replay()
        return self.outputs

    def __repr__(self) -> str:
        return f"<GraphedCall {'static' if self.static else 'copy'} inputs, {len(self.outputs)} output(s)>"
