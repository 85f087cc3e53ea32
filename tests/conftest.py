"""Shared fixtures (tuner and runtime tests): small search results per workload (computed once, limited so
that all five take a few seconds) and a private cache directory for generated modules."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

import prism.workloads as wl
from tests.configs import limits, small_cfg

# Property tests draw the same examples on every run (no example database, no wall-clock deadline), so
# the suite is deterministic; the properties must hold whatever examples a hypothesis version draws.
settings.register_profile("prism", derandomize=True, database=None, deadline=None)
settings.load_profile("prism")

_RESULTS: dict = {}



@pytest.fixture(scope="session")
def searched():
    """searched(name) -> (workload, small config, SearchResult), each search run once per session."""
    from prism.search import search

    def get(name: str):
        if name not in _RESULTS:
            w = wl.get(name)
            cfg = small_cfg(name)
            _RESULTS[name] = (w, cfg, search(w.build(cfg), workers=1, **limits(name)))
        return _RESULTS[name]

    return get


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Generated modules and result caches go to a temporary folder, never the user's ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PRISM_CACHE_DIR", str(tmp_path_factory.mktemp("prism-cache")))
    yield
    mp.undo()


def example(name: str) -> ModuleType:
    """The module examples/NAME.py (the examples folder is no package)."""
    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
