"""Settings objects (prism.options): `SearchOptions` and `TuneOptions` group what search, tune and superoptimize
are told; the keyword arguments of before are changes to them and give the same results; a name that is not
an option is a clear InputError. Tuning statuses are typed (prism.tune.report.Status), and reports saved
before that still load."""

from __future__ import annotations

import pytest

import prism
import prism.workloads as wl
from prism.errors import InputError
from prism.search import SearchOptions, search
from prism.tune import TuneOptions, tune
from prism.tune.report import Entry, Status

CFG = {"n": 4, "d": 64}


def _program():
    return wl.get("swiglu").build(CFG)


def test_an_options_object_and_keyword_arguments_search_alike():
    options = SearchOptions(workers=1, max_block_ops=9, max_grid=1)
    by_object, by_keywords = search(_program(), options), search(_program(), workers=1, max_block_ops=9, max_grid=1)
    assert by_object.graphs and [g.key() for g in by_object.graphs] == [g.key() for g in by_keywords.graphs]
    assert by_object.stats["limits"] == by_keywords.stats["limits"]
    changed = search(_program(), options, max_grid=2)   # keywords change the object's fields
    assert changed.stats["limits"]["max_grid"] == 2 and len(changed.graphs) > len(by_object.graphs)


def test_an_options_object_and_keyword_arguments_tune_alike():
    result = search(_program(), workers=1, max_block_ops=9, max_grid=1)
    a = tune(result, _program(), TuneOptions(budget=3, seed=1, compile=False)).report
    b = tune(result, _program(), budget=3, seed=1, compile=False).report
    assert [e.label for e in a.entries] == [e.label for e in b.entries] and a.chosen == b.chosen


@pytest.mark.parametrize("call", [
    lambda: search(_program(), max_blocks=3),
    lambda: search(_program(), {"max_blocks": 3}),
    lambda: tune(None, _program(), bugdet=3),
    lambda: prism.superoptimize(_program(), bugdet=3),
    lambda: prism.superoptimize(_program(), search_options={"max_blocks": 3}),
])
def test_a_name_that_is_no_option_is_named_with_the_options(call):
    with pytest.raises(InputError, match=r"no (search |tuning )?option '(max_blocks|bugdet)'; (they|the run's) are .*"):
        call()


@pytest.mark.parametrize("options, match", [
    (SearchOptions(time_limit=0), "time_limit must be a positive"),
    (SearchOptions(workers=0), "workers must be a positive"),
    (TuneOptions(budget=0), "budget must be a positive"),
    (TuneOptions(explore=2.0), "explore must be a number from 0 to 1"),
])
def test_a_value_that_could_only_do_nothing_is_refused(options, match):
    with pytest.raises(InputError, match=match):
        type(options).of(options, "here")


def test_tuning_statuses_are_typed_and_old_reports_still_load():
    e = Entry.from_json({"candidate": {"graph": 0, "grid": [2], "loop": 1}, "origin": "model",
                         "status": "dropped: does not compile (CompilationError)"})
    assert e.status is Status.DROPPED and e.why == "does not compile (CompilationError)" and not e.ok
    assert e.fate == "dropped: does not compile (CompilationError)"
    back = Entry.from_json(e.to_json())
    assert (back.status, back.why) == (e.status, e.why)
    assert Entry.from_json(back.to_json() | {"status": "chosen", "why": None}).ok
