"""Hugging Face decoders through `torch.compile(backend="prism")`: a prefill and a greedy decode with a KV cache.

Small random configs (no weights are downloaded): Llama (grouped-query attention), Qwen2 (Q/K/V biases), Phi3
(fused QKV and gate-up projections, split in torch) and GPT-2 (layer norm with bias, GELU's tanh form, a fused
QKV projection). Each step's logits are compared
with the same model run eagerly, and what Prism fused is printed, per kind of region:

    python examples/hf_decode.py                     # llama, 16 new tokens
    python examples/hf_decode.py --model gpt2 --tokens 4

Needs `transformers` (`pip install transformers`, or the test extra).
"""

from __future__ import annotations

import argparse
import collections
import inspect
import logging
from typing import Any

import torch

MODELS = ("llama", "qwen2", "phi3", "gpt2")
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4, max_position_embeddings=256)
TINY = SMALL | dict(num_key_value_heads=2, head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                   # mixtures of experts
                   num_experts=4, num_local_experts=4, n_routed_experts=4, moe_intermediate_size=32,
                   num_experts_per_tok=2, n_group=1, topk_group=1,
                   # latent attention (DeepSeek's low-rank Q and KV)
                   q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                   # the decoder of an encoder-decoder family (BART's)
                   d_model=64, decoder_ffn_dim=128, encoder_ffn_dim=128, decoder_attention_heads=4,
                   encoder_attention_heads=4,
                   # per-layer input embeddings (Gemma-3n's, Gemma-4's)
                   vocab_size_per_layer_input=128)
"""Any other family's config: its defaults with these sizes (names a config does not have set attributes no
layer reads), and FAMILY's changes, which make the sizes agree where a family derives one from another."""
FAMILY: dict[str, dict[str, Any]] = {
    "codegen": dict(rotary_dim=8), "gptj": dict(rotary_dim=8), "gpt_neox": dict(rotary_pct=0.5),
    "zaya": dict(num_experts_per_tok=1), "dots1": dict(n_shared_experts=1), "mamba2": dict(num_heads=8),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]]), "gemma3n_text": dict(num_kv_shared_layers=0),
    # hybrids whose two small layers must still hold an attention layer (the cache's length is read there)
    "bamba": dict(attn_layer_indices=[1]), "bailing_hybrid": dict(layer_group_size=2),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1),
}
HYBRID = {"qwen3_next": ("layer_types", "linear_attention", "full_attention"),
          "qwen3_5_text": ("layer_types", "linear_attention", "full_attention"),
          "qwen3_5_moe_text": ("layer_types", "linear_attention", "full_attention"),
          "granitemoehybrid": ("layer_types", "mamba", "attention"), "lfm3": ("layer_types", "conv", "full_attention"),
          "recurrent_gemma": ("block_types", "recurrent", "attention")}
"""Hybrids that list their layers' kinds, as (the list's name, the kind without attention, attention): their
layers alternate the two, so that a small model holds an attention layer too."""
LATENT = dict(num_key_value_heads=SMALL["num_attention_heads"])
"""Latent attention (a config with `kv_lora_rank`, DeepSeek's) keeps a KV head per query head."""
DERIVED = {"falcon": ("head_dim",), "xlstm": ("v_head_dim",)}
"""Sizes a family's config derives and will not be given."""


def config(name: str, layers: int = 2) -> Any:
    """A small config of `transformers` family `name` (a key of its causal-LM auto mapping)."""
    import transformers as tf

    depth = {"num_hidden_layers": layers, "decoder_layers": layers, "encoder_layers": layers}
    kind = tf.CONFIG_MAPPING[name]
    latent = LATENT if "kv_lora_rank" in {*vars(kind), *getattr(kind, "__annotations__", {})} else {}
    sizes = TINY | depth | latent | FAMILY.get(name, {})
    if name in HYBRID:
        key, other, attention = HYBRID[name]
        sizes[key] = [other, attention] * (layers // 2) + [other] * (layers % 2)
    return tf.AutoConfig.for_model(name, **{k: v for k, v in sizes.items() if k not in DERIVED.get(name, ())})


def unrunnable(name: str, max_params: int) -> tuple[str, str] | None:
    """Why family `name` has no small model here, as (status, why): "no small config" (transformers refuses
    these sizes, said as it says it) or "too large" (more than `max_params` parameters, counted on the meta
    device, without allocating them); None where it has one."""
    import transformers as tf

    try:
        small = config(name)
        with torch.device("meta"):
            params = sum(p.numel() for p in tf.AutoModelForCausalLM.from_config(small).parameters())
    except Exception as e:
        return "no small config", f"{type(e).__name__}: {e}"[:300]
    return ("too large", f"{params:,} parameters in its small config") if params > max_params else None


def model(name: str, layers: int = 2, dtype: torch.dtype = torch.float32) -> Any:
    """A `transformers` causal LM with a small random config (seeded: the same weights every time): one of
    MODELS, or any family `config` can make small."""
    import transformers as tf

    torch.manual_seed(0)
    if name not in MODELS:
        return tf.AutoModelForCausalLM.from_config(config(name, layers)).to(dtype).eval()
    small = SMALL | dict(num_hidden_layers=layers)
    configs = {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**small, num_key_value_heads=2)),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**small, num_key_value_heads=2)),
        "phi3": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(**small, num_key_value_heads=2, pad_token_id=0,
                                                         bos_token_id=1, eos_token_id=2)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=layers, n_head=4,
                                                         n_positions=256, bos_token_id=1, eos_token_id=2)),
    }
    return configs[name]().to(dtype).eval()


def cache_keyword(m: torch.nn.Module) -> str:
    """The keyword `m`'s forward takes a KV cache by: `cache` in newer `transformers` (5.24 warns that
    `past_key_values` is going), `past_key_values` in older ones."""
    return "cache" if "cache" in inspect.signature(type(m).forward).parameters else "past_key_values"


def decode(m: Any, prompt: torch.Tensor, tokens: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Greedy decoding with a KV cache: each step's logits (the prefill's last position first) and the tokens."""
    from transformers import DynamicCache

    cache, ids, logits = DynamicCache(config=m.config), prompt, []
    out_ids, key = [], cache_keyword(m)
    with torch.no_grad():
        for _ in range(tokens):
            step = m(input_ids=ids, **{key: cache}, use_cache=True).logits[:, -1]
            logits.append(step)
            ids = step.argmax(-1, keepdim=True)
            out_ids.append(ids)
    return logits, torch.cat(out_ids, dim=1)


def compiled(m: Any) -> Any:
    """`m` with its forward compiled by Prism's backend (what `generate` and a decode loop call)."""
    m.forward = torch.compile(m.forward, backend="prism")
    return m


def fused_kinds(history: list[dict[str, Any]]) -> collections.Counter:
    """How many regions of each kind Prism replaced in `history`'s graphs (a kind: the ATen ops it holds)."""
    kinds: collections.Counter = collections.Counter()
    for record in history:
        for r in record["replaced"]:
            ops = sorted({o.split(".")[1] for o in r["ops"] if o.startswith("aten.") and "view" not in o})
            kinds[" ".join(ops)] += 1
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=MODELS, default="llama")
    ap.add_argument("--tokens", type=int, default=16, help="new tokens (the first comes from the prefill)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rest", choices=("inductor", "eager"), default="inductor",
                    help="what runs the ops Prism leaves (Inductor compiles C++ for them on a CPU: minutes)")
    args = ap.parse_args()
    import prism.capture

    prism.capture.OPTIONS.rest = args.rest
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    prompt = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    want, want_ids = decode(model(args.model, args.layers), prompt, args.tokens)
    start = len(prism.capture.history)
    got, got_ids = decode(compiled(model(args.model, args.layers)), prompt, args.tokens)
    error = max((g - w).abs().max().item() for g, w in zip(got, want))
    graphs = prism.capture.history[start:]
    print(f"{args.model}: {args.tokens} tokens, same as eager: {torch.equal(got_ids, want_ids)}; "
          f"max |logits - eager| = {error:.2e}; {len(graphs)} graph(s) compiled")
    for kind, n in sorted(fused_kinds(graphs).items()):
        print(f"fused  {n:3d} x  {kind}")
    for record in graphs:
        for left in record["left"]:
            if left["why"] != "not in a cone Prism took" and not left["why"].startswith("cut from"):
                print(f"torch  {left['what']}: {left['why']}")


if __name__ == "__main__":
    main()
