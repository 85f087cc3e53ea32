"""The symbolic search: generate sGraphs, instantiate mappings, verify, cross-check (`prism.search`)."""

from prism.options import SearchOptions
from prism.search.driver import default_verify, join, search
from prism.search.result import SearchResult, SymbolicGraph

__all__ = ["SearchOptions", "SearchResult", "SymbolicGraph", "default_verify", "join", "search"]
