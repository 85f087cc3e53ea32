"""Progress reporting shared by the search, the tuner and the command line.

Long phases call `progress(phase, done, total)` as work completes ("generate", "verify", "compile",
"profile", ...); `done` counts finished units out of `total`, in whatever unit the phase works in
(subtrees, candidates, kernels). The library never prints: the command line turns the calls into
progress bars (`Bars`), and other callers may log them or pass nothing.
"""

from __future__ import annotations

import sys
from typing import Callable, TextIO

__all__ = ["Progress", "Bars", "report"]

Progress = Callable[[str, int, int], None]


def report(progress: Progress | None, phase: str, done: int, total: int) -> None:
    """Call `progress` if there is one (so callers need no `if` at every step)."""
    if progress is not None:
        progress(phase, done, total)


class Bars:
    """One tqdm bar per phase on `stream` (stderr by default): count, rate, time left. A bar closes
    when its phase reaches its total, when the next phase starts, or on leaving a `with Bars()` block."""

    LABELS = {"generate": "search: structures", "verify": "search: verify", "search": "search: concrete",
              "space": "tune: space", "rank": "tune: rank", "compile": "tune: compile", "profile": "tune: profile"}

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.phase: str | None = None
        self.bar = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if phase != self.phase or self.bar is None:
            self.close()
            self.phase = phase
            self.bar = tqdm(total=total, desc=self.LABELS.get(phase, phase), file=self.stream, leave=True,
                            dynamic_ncols=True, mininterval=0.2)
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar, self.phase = None, None

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # an interrupted phase's bar ends before any message that follows it
