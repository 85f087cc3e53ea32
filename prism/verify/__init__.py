"""Verification: µGraphs as part/comb/red/repl terms, the axioms, the e-graph checker, numeric tests."""

from prism.verify import expr
from prism.verify.equiv import Verdict, equivalent
from prism.verify.numeric import NumericVerdict, random_test

__all__ = ["NumericVerdict", "Verdict", "equivalent", "expr", "random_test"]
