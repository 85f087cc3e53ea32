"""Decoder families of `transformers` beyond test_hf_models.py's four, through `torch.compile(backend="prism")`:
each family's small random config (examples/hf_decode.py's `config`), a prefill and one decode step with a KV
cache, gives eager's logits, with no failure inside the backend, and Prism searches its cones.

The families are those whose small config builds under 3M parameters and runs eagerly here, with attention
as each writes it (SDPA, eager matmuls, ALiBi, partial rotary, parallel blocks, post-norms, `1 + weight`
norms); `python benchmarks/families.py` runs every family `transformers` ships, with the searches unlimited.
Here each search keeps to blocks of at most 6 ops: a norm with its projection or attention's core still fits,
and a family compiles in seconds instead of a minute. The limit is a count, not a time, so what is found does
not depend on the machine's load."""

from __future__ import annotations

import pytest
import torch

import prism.capture as pc
from tests.conftest import example

pytest.importorskip("transformers", reason="the model tests need transformers (the test extra installs it)")
pytestmark = pytest.mark.filterwarnings("ignore")

FAMILIES = ("mistral", "gemma", "qwen3", "olmo2", "glm4", "nemotron", "falcon", "mpt", "cohere", "phi", "stablelm",
            "starcoder2", "gpt_neox", "gptj", "opt", "gpt_bigcode", "codegen", "persimmon", "granite", "helium")
"""Not here: Gemma-2 and BLOOM, whose compiles take about two minutes each even under this limit (Gemma-2's
soft-capped attention and BLOOM's ALiBi leave many small cones); benchmarks/families.py runs them."""


@pytest.mark.parametrize("name", FAMILIES)
def test_a_family_gives_eagers_logits_on_a_prefill_and_a_decode_step(name, options, monkeypatch):
    monkeypatch.setattr(pc.OPTIONS, "search", pc.OPTIONS.search | {"max_block_ops": 6})
    hf = example("hf_decode")
    prompt = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    want, want_ids = hf.decode(hf.model(name), prompt, 2)
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
