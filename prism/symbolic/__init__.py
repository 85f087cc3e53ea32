"""sGraphs: symbolic parallel sizes d_p, mapping variables m[T,d,p], tile dims D/σ(T,d), dim matching."""

from prism.symbolic.closure import Target, closure
from prism.symbolic.dims import UNIT, AtomSpace, InvExtent, MVar, TileDim, UnionFind, match_dims
from prism.symbolic.draft import BOp, Draft
from prism.symbolic.mapping import Mapping, MappingProblem, RawMapping, brute_force, enumerate_mappings
from prism.symbolic.structure import Structure, instantiate

__all__ = ["UNIT", "AtomSpace", "BOp", "Draft", "InvExtent", "MVar", "Mapping", "MappingProblem", "RawMapping",
           "Structure", "Target", "TileDim", "UnionFind", "brute_force", "closure", "enumerate_mappings",
           "instantiate", "match_dims"]
