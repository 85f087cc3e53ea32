"""Every decoder family `transformers` ships a causal-LM class for, beyond test_hf_models.py's four, through
`torch.compile(backend="prism")`: each family's small random config (examples/hf_decode.py's `config`), a
prefill and one decode step with a KV cache, gives eager's logits, with no failure inside the backend, and Prism
searches its cones.

A family is skipped, with the reason, where it cannot run here at all: `transformers` refuses the small sizes,
the small config still has over 3M parameters (too slow on the CPU), or `transformers`' own eager run of it
fails. Each search keeps to blocks of at most 6 ops, so that a family compiles in seconds instead of a minute;
the limit is a count, not a time, so what is found does not depend on the machine's load. At that limit most
cones (a norm with its projections, attention, a gated MLP) have no fused form and stay with torch, `history`
naming the limit: what this test checks is that the backend takes every family's graphs apart and puts them
back together right, whatever it fuses. `python benchmarks/families.py` runs every family with the search's
default limits, and its table says what each fuses. The families share one worker (an xdist group), so a family built like another (most are Llama's
layers renamed) finds its regions in that worker's result cache."""

from __future__ import annotations

import pytest
import torch

import prism.capture as pc
from tests.conftest import example

pytest.importorskip("transformers", reason="the model tests need transformers (the test extra installs it)")
pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.xdist_group("families")]

from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

TESTED = ("llama", "qwen2", "phi3", "gpt2")
"""test_hf_models.py's."""
FAMILIES = [name for name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) if name not in TESTED]


@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_gives_eagers_logits_on_a_prefill_and_a_decode_step(name, options, monkeypatch):
    monkeypatch.setattr(pc.OPTIONS, "search", pc.OPTIONS.search | {"max_block_ops": 6})
    hf = example("hf_decode")
    problem = hf.unrunnable(name, 3_000_000)
    if problem:
        pytest.skip(f"{problem[0]}: {problem[1]}")
    prompt = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    try:
        want, want_ids = hf.decode(hf.model(name), prompt, 2)
    except Exception as e:   # transformers' own code, before Prism: the family does not run here
        pytest.skip(f"transformers' eager run of its small config fails: {type(e).__name__}: {e}"[:300])
    torch._dynamo.reset()
    start = len(pc.history)
    got, got_ids = hf.decode(hf.compiled(hf.model(name)), prompt, 2)
    graphs = pc.history[start:]

    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert torch.equal(got_ids, want_ids)
    assert graphs, "nothing was compiled"
    failed = [left for r in graphs for left in r["left"] if "internal error" in left["why"]]
    assert not failed, failed
    # Prism searched the family's cones: each fused, or left with the search's reason (with blocks this small,
    # Cohere's and Granite's cones find no fused form the estimate prefers to the unfused program)
    searched = [left for r in graphs for left in r["left"] if left["what"].startswith("cone ending at")]
    assert sum(len(r["replaced"]) for r in graphs) + len(searched), graphs
