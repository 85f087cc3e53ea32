"""Whatever the checker proves is true: random well-formed mutants of fused kernels, checked and evaluated.

Seeded with Python's `random` (stable across versions), so every run and every machine draws the same
mutants; a mutant proved equal that evaluates differently fails the test.
"""

from __future__ import annotations

import random

from prism.verify.egraph import check
from prism.verify.fuzz import mutate

from tests.verify.pairs import POSITIVE, numeric_equal

MUTANTS = 400


def test_proven_mutants_are_numerically_equal() -> None:
    rng = random.Random(20261122)
    names = sorted(POSITIVE)
    proved = mistyped = 0
    for k in range(MUTANTS):
        cand, ref = POSITIVE[names[k % len(names)]]
        mutant = cand
        for _ in range(rng.randint(1, 2)):
            mutant = mutate(mutant, rng) or mutant
        assert mutant.type is not None, "mutants are well formed (typed)"
        result = check(mutant, ref, timeout=1.0)
        mistyped += result.reason.startswith("not equal: [")
        if result.equal:
            proved += 1
            assert numeric_equal(mutant, ref), f"proved equal but not equal: {mutant}  vs  {ref}"
    # the draw must exercise the e-graph, not only the type check: some mutants are proved (equal
    # rewrites such as a swapped commutative operand) and some reach the e-graph and are refused there
    assert proved > 0 and MUTANTS - mistyped - proved > 0, (proved, mistyped)
