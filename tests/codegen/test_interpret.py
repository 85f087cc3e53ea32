"""Every generated kernel runs under Triton's interpreter and matches the reference executor.

The cases (tests/codegen/cases.py) run in one subprocess with TRITON_INTERPRET=1, started by conftest.py
when collection ends: the five workloads' fused µGraphs and unfused programs at small sizes, hand-made
µGraphs (split-K, three grid dims, strided inputs and outputs, non-power-of-two tiles, every op, several
outputs, kernel ops between custom ops, long rows, padded broadcasts, float32), and random kernel graphs
("fuzz"). Each buffer sits between NaN guard bands (tests/codegen/interp_runner.py)."""

import pytest

from tests.codegen.cases import CASES


@pytest.mark.parametrize("case", [*CASES, "fuzz"])
def test_interpreted_kernels_match_the_executor(case, interp_results):
    result = interp_results.get(case)
    assert result is not None, f"the runner did not report {case}"
    assert result["ok"], f"{case} failed under the interpreter:\n{result['error']}"
