"""Hugging Face decoders through `torch.compile(backend="prism")` on the CPU: Llama (grouped-query attention),
Qwen2 (biased projections), Phi3 (fused QKV and gate-up projections, chunked in torch) and GPT-2 (layer norm,
GELU's tanh form, a fused QKV projection), small random
configs built from config objects. A prefill and a 16-step greedy decode with a KV cache give eager's tokens
and logits; each layer's regions are Prism's; Dynamo's switch to dynamic shapes never breaks the model."""

from __future__ import annotations

import collections

import pytest
import torch

import prism.capture as pc
from tests.conftest import example

pytest.importorskip("transformers", reason="the model tests need transformers (the test extra installs it)")
pytestmark = pytest.mark.filterwarnings("ignore")



MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default",
           "aten._scaled_dot_product_flash_attention_for_cpu.default"}
SWIGLU = [  # the regions per layer of Llama, Qwen2 and Phi3, most specific first: a label, the ATen ops that mark
    # it, a count (Q, K and V: one region, of three projections joined by their norm, or Phi3's one projection)
    ("attention", {"aten._scaled_dot_product_flash_attention_for_cpu.default"}, 1),
    ("norm + gate, up, SwiGLU", {"aten.rsqrt.default", "aten.silu.default"}, 1),
    ("output projection + residual", {"aten.transpose.int", "aten.add.Tensor"}, 1),
    ("final norm + LM head", {"aten.alias.default", "aten.rsqrt.default"}, 0),
    ("norm + Q, K, V projections", {"aten.rsqrt.default"}, 1),
    ("down projection + residual", {"aten.add.Tensor"}, 1),
]


def _kinds(record, regions):
    found = collections.Counter()
    for r in record["replaced"]:
        found[next((label for label, ops, _ in regions if ops <= set(r["ops"])), "other")] += 1
    return found


@pytest.mark.parametrize("name", ["llama", "qwen2", "phi3", "gpt2"])
def test_prefill_and_greedy_decode_match_eager_with_every_layer_fused(name, options):
    hf = example("hf_decode")
    layers, tokens = 2, 16
    # GPT-2 at batch 1: there its learned position embedding is added in the prefill and the decode alike, so
    # each region is searched once. At batch 2 the prefill's add broadcasts over the batch (torch expands the
    # positions first: test_layout.py) and the decode's does not, so the first region is another program, searched
    # again (minutes on 2 cores).
    batch = 1 if name == "gpt2" else 2
    prompt = torch.randint(0, 128, (batch, 8), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    want, want_ids = hf.decode(hf.model(name, layers), prompt, tokens)
    start = len(pc.history)
    got, got_ids = hf.decode(hf.compiled(hf.model(name, layers)), prompt, tokens)
    graphs = pc.history[start:]

    assert torch.equal(got_ids, want_ids)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert len(graphs) <= 3, [r["left"][:1] for r in graphs]   # prefill, first decode step, then dynamic: 2 recompiles
    assert any("per size bucket" in r["chosen"] for r in graphs[-1]["replaced"])  # the dynamic graph's regions
    assert not [left for r in graphs for left in r["left"] if "internal error" in left["why"]]
    for record in graphs:                     # the prefill, the first decode step, the decode steps of any KV length
        assert record["launches"]["rest"] == len(record["launches"]["rest_kernels"])  # counted on every path
        left = {op for r in record["left"] for op in r.get("ops", [])}
        assert not left & MATMULS, [r for r in record["left"] if set(r.get("ops", [])) & MATMULS]
        if name != "gpt2":
            counts = {label: n[name] if isinstance(n, dict) else n for label, _, n in SWIGLU}
            want = {label: n * layers for label, n in counts.items() if n} | {"final norm + LM head": 1}
            assert _kinds(record, SWIGLU) == want, [r["ops"] for r in record["replaced"]]
        if name in ("llama", "qwen2"):   # the norm's three projections: one region, written by one kernel
            qkv = [r for r in record["replaced"] if r["root"].count(",") == 2]
            assert len(qkv) == layers and all(r["launches"] == 1 for r in qkv), [r["root"] for r in record["replaced"]]
        attention = [r for r in record["replaced"] if MATMULS & set(r["ops"]) == {
            "aten._scaled_dot_product_flash_attention_for_cpu.default"}]
        assert len(attention) == layers


def test_float16_and_bfloat16_models_fuse_their_norms(options):
    """HF's RMSNorm upcasts to float32 and back: Prism computes in float32 between loads and stores."""
    hf = example("hf_decode")
    prompt = torch.randint(0, 128, (1, 4), generator=torch.Generator().manual_seed(2))
    for dtype in (torch.float16, torch.bfloat16):
        torch._dynamo.reset()
        with torch.no_grad():
            want = hf.model("llama", 1, dtype)(input_ids=prompt).logits
            got = hf.compiled(hf.model("llama", 1, dtype))(input_ids=prompt).logits
        record = pc.history[-1]
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        norms = [r for r in record["replaced"] if "aten.rsqrt.default" in r["ops"]]
        assert len(norms) == 3, [l for l in record["left"] if "cut from" not in l["why"]]  # Q, K, V; gate, up; lm head


def test_a_padded_batch_fuses_attention_with_its_mask(options):
    """Left padding: the padding mask (float here: transformers builds it with torch.where; boolean SDPA masks are
    tests/capture/test_layout.py's) is an input of the attention region, added to the logits."""
    hf = example("hf_decode")
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    padding = torch.ones(2, 6, dtype=torch.long)
    padding[0, :2] = 0
    torch._dynamo.reset()
    with torch.no_grad():
        want = hf.model("llama", 1)(input_ids=ids, attention_mask=padding).logits
        got = hf.compiled(hf.model("llama", 1))(input_ids=ids, attention_mask=padding).logits
    torch.testing.assert_close(got[padding.bool()], want[padding.bool()], rtol=1e-4, atol=1e-4)
    attention = [r for r in pc.history[-1]["replaced"] if MATMULS & set(r["ops"]) == {
        "aten._scaled_dot_product_flash_attention_for_cpu.default"}]
    assert len(attention) == 1
    assert "float32[2, 1, 6, 6] = input" in attention[0]["program"]     # the mask, one per sequence


def test_a_llama_shaped_decode_step_runs_each_region_as_one_fused_kernel(options):
    """At a real model's sizes (hidden 2048, MLP 5632, float16) no block holds a whole row of weights: each region
    needs a form whose loop walks the contracted dim. Before those existed (the norm's weight and the residual
    had none, and a cut through the MLP's norm left its mean to torch), an H200 ran this step's layer as 12
    launches, regions unfused. Now each region (Q, K and V with their norm; attention; the output projection and
    its residual; the norm, gate, up and SwiGLU; the down projection and its residual; the final norm and the
    LM head) is one fused kernel, and the step matches eager."""
    import copy

    import transformers as tf

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=128, hidden_size=2048, intermediate_size=5632, num_hidden_layers=1,
                            num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=64)
    m = tf.LlamaForCausalLM(config).to(torch.float16).eval()
    cache, key = tf.DynamicCache(), example("hf_decode").cache_keyword(m)
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    with torch.no_grad():
        nxt = m(input_ids=prompt, **{key: cache}, use_cache=True).logits[:, -1:].argmax(-1)
        want = m(input_ids=nxt, **{key: copy.deepcopy(cache)}, use_cache=True).logits
        step = torch.compile(m.forward, backend="prism")
        got = step(input_ids=nxt, **{key: copy.deepcopy(cache)}, use_cache=True).logits
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    replaced = pc.history[-1]["replaced"]
    assert len(replaced) == 6, [r["ops"] for r in replaced]
    assert all(r["launches"] == 1 and r["chosen"] != "unfused program" for r in replaced), [
        (r["root"], r["chosen"], r["launches"]) for r in replaced]
    count = pc.history[-1]["launches"]     # and torch's rest (the embedding, RoPE, the cache) launches too
    assert count["prism"] == 6 and count["prism_later"] == 0 and count["rest"] >= 1, count
