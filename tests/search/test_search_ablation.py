"""The ablation modes: enumerating imap/fmap/omap during generation changes the work, not the result."""

import pytest

import prism.workloads as wl
from prism.errors import InputError
from prism.search import search
from tests.configs import small_cfg

LIMITS = {"max_block_ops": 11, "max_grid": 1}


@pytest.fixture(scope="module")
def symbolic():
    w = wl.get("rmsnorm")
    result = search(w.build(small_cfg(w)), workers=1, modes="SSS", **LIMITS)
    assert len(result) > 0  # the comparisons below would pass on two empty results
    return result


@pytest.mark.parametrize("modes", ["SSC", "SCS", "CSS", "CCC"])
def test_concrete_maps_find_the_same_graphs_with_more_generation_work(symbolic, modes):
    w = wl.get("rmsnorm")
    concrete = search(w.build(small_cfg(w)), workers=1, modes=modes, **LIMITS)
    assert len(concrete) > 0
    # the same graphs; not in the same order, since a concrete omap is part of a structure's sort key
    assert sorted(concrete.describe(i) for i in range(len(concrete))) == \
        sorted(symbolic.describe(i) for i in range(len(symbolic)))
    assert concrete.stats["modes"] == modes
    assert concrete.stats["generate"]["structures"] > symbolic.stats["generate"]["structures"]
    if modes[:2] != "SS":  # a concrete imap or fmap repeats the structure search per choice
        assert concrete.stats["generate"]["states"] > symbolic.stats["generate"]["states"]


def test_bad_mode_strings_are_refused():
    w = wl.get("rmsnorm")
    with pytest.raises(InputError, match="modes: expected three letters"):
        search(w.build(small_cfg(w)), workers=1, modes="SXS")


def test_the_mirage_style_mode_finds_a_subset_of_the_symbolic_graphs():
    """Fully concrete (maps, grid sizes, loop ranges enumerated; each candidate checked as found):
    at one config it can only find graphs whose tiles some Mirage-style sizes divide."""
    w = wl.get("swiglu")
    program = w.build({"n": 16, "d": 64})
    limits = {"max_block_ops": 9, "max_grid": 1}
    sym = search(program, workers=1, **limits)
    mirage = search(program, workers=1, modes="mirage", **limits)
    found = {mirage.describe(i) for i in range(len(mirage))}
    assert found and found <= {sym.describe(i) for i in range(len(sym))}
    assert mirage.stats["modes"] == "mirage" and mirage.stats["cross_check"]["unsound"] == 0
    assert mirage.stats["generate"]["states"] > sym.stats["generate"]["states"]
