"""A cone is Prism's only where Prism is faster than what torch would run for it (prism.capture.against): on a
GPU torch's time is measured; here a stubbed timer stands in for it, on a small `transformers` Llama."""

from __future__ import annotations

import pytest
import torch

import prism.capture as pc
from prism.capture import against
from prism.errors import PrismError

pytest.importorskip("transformers", reason="the model test needs transformers (the test extra installs it)")
# one group under pytest-xdist: the tests compile the same model, searched once into the session's cache
pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.xdist_group("against-llama")]


def _llama():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2)
    # two sequences: a search at batch 1 finds fewer forms of attention with a mask than one at batch 2, and the
    # result cache keys searches without sizes, so a batch of 1 here would leave later tests only those forms
    return transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 128, (2, 8))


def _compiled(model, ids):
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        got = torch.compile(model.forward, backend="prism")(ids, use_cache=False).logits
    return (got - want).abs().max().item(), pc.history[-1]


def test_without_a_gpu_the_record_names_the_cost_model_rule(options):
    err, record = _compiled(*_llama())
    assert err < 1e-4 and record["replaced"]
    assert all(r["rule"] == against.COST_MODEL_RULE and "torch_us" not in r for r in record["replaced"])


def test_a_cone_torch_runs_faster_stays_with_torch_and_says_both_times(options, monkeypatch):
    monkeypatch.setattr(against, "torch_us", lambda *a: 1e-3)      # torch: 1 ns for every cone
    err, record = _compiled(*_llama())
    assert err < 1e-4 and not record["replaced"]
    said = [r["why"] for r in record["left"] if r["why"].startswith("torch 0.00 µs, Prism's best")]
    assert len(said) >= 4 and all(w.endswith("µs: torch runs these ops") for w in said), said


def test_a_cone_prism_runs_faster_is_replaced_and_keeps_torchs_time(options, monkeypatch):
    monkeypatch.setattr(against, "torch_us", lambda *a: 1e9)       # torch: 1000 s for every cone
    err, record = _compiled(*_llama())
    assert err < 1e-4 and len(record["replaced"]) >= 4
    assert all(r["rule"] == against.TIMED_RULE and r["torch_us"] == 1e9 for r in record["replaced"])


def test_a_failed_torch_timing_leaves_the_comparison_out_not_the_model(options, monkeypatch):
    def broken(*a):
        raise RuntimeError("boom")
    monkeypatch.setattr(against, "torch_us", broken)
    err, record = _compiled(*_llama())
    assert err < 1e-4 and record["replaced"]
    assert all(r["rule"] == against.COST_MODEL_RULE for r in record["replaced"])


def test_the_verdict_keeps_prism_only_when_torch_is_slower():
    assert against.verdict(5.0, None) == {"rule": against.COST_MODEL_RULE}
    assert against.verdict(5.0, 6.0) == {"rule": against.TIMED_RULE, "torch_us": 6.0}
    for torch_us in (5.0, 4.0):
        with pytest.raises(PrismError, match=f"torch {torch_us:.2f} µs, Prism's best 5.00 µs"):
            against.verdict(5.0, torch_us)
    assert against.torch_us([], [], [], torch.device("cpu"), "inductor") is None
