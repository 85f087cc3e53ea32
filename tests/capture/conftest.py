"""Fixtures of the torch.compile backend's tests."""

from __future__ import annotations

import pytest

import prism.capture as pc


@pytest.fixture
def options(monkeypatch):
    """Fast settings: the rest runs eagerly, few candidates, small search limits."""
    monkeypatch.setattr(pc.OPTIONS, "rest", "eager")
    monkeypatch.setattr(pc.OPTIONS, "budget", 2)
    # a limit no search here reaches (about 30 s each on 2 idle cores): a search cut short by a busy machine
    # would find fewer graphs, and the test would depend on the load
    monkeypatch.setattr(pc.OPTIONS, "search", {"time_limit": 900.0, "max_grid": 1})
    return pc.OPTIONS
