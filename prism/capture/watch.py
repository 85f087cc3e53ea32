"""What `torch.compile(backend="prism")` says while it works, so that a compile of minutes is not silent.

Each graph's regions are said as the backend reaches them, through logging (logger "prism.compile", at INFO)
and, when stderr is a terminal, on one progress line rewritten in place (off with `options={"progress":
False}`): which region of how many, its root and ops, and the seconds so far. The line says what is waited
for (its search and tuning, which run ahead on threads: prism.capture.ahead), and a summary closes it: regions
fused, what is left to torch, seconds. With stderr not a terminal nothing is written there (a log file gets the
INFO lines only, never carriage returns).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

__all__ = ["Watch"]

log = logging.getLogger("prism.compile")


class Watch:
    """The compile of one graph, said as it goes (module docstring): from the backend's first step, a graph of
    `ops` ops from Dynamo (tracing it to ATen and finding its regions come before any region), then its regions
    (`regions`), then a summary (`done`)."""

    def __init__(self, ops: int, progress: bool = True, stream: TextIO | None = None) -> None:
        self.total, self.start = 0, time.monotonic()
        self.stream = stream or sys.stderr
        self.line = progress and self.stream.isatty()
        text = f"a graph of {ops} op(s) from Dynamo: tracing it to ATen and finding its regions"
        log.info("prism: %s", text)
        self._show(f"prism: {text}")

    def regions(self, total: int, ops: int) -> None:
        """The graph, in ATen, has `ops` ops and `total` regions to superoptimize."""
        self.total = total
        log.info("prism: %d region(s) to superoptimize in a graph of %d ATen op(s); their searches and tunings "
                 "start now, on threads", total, ops)

    def region(self, k: int, cone: Any) -> None:
        """Region `k` (from 1) is next: its result is waited for, or computed now."""
        text = f"region {k}/{self.total}: {cone.name} ({len(cone.nodes)} ops)"
        log.info("prism: %s", text)
        self._show(f"prism: {text}: searching and tuning ({time.monotonic() - self.start:.0f} s)")

    def done(self, record: dict[str, Any]) -> str:
        """The summary of the graph's compile (`record`: its history entry), said and returned."""
        text = (f"prism: {len(record['replaced'])} region(s) fused, {len(record['left'])} op(s) or part(s) left "
                f"to torch, {time.monotonic() - self.start:.1f} s")
        log.info("%s", text)
        if self.line:
            self.stream.write("\r\033[K" + text + "\n")
            self.stream.flush()
        return text

    def _show(self, text: str) -> None:
        if self.line:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
