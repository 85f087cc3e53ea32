"""The workload registry and configs: names, lookups, config checking, graph shapes, fused parameters."""

import pytest
import torch

import prism
import prism.workloads as wl
from prism.errors import InputError, MappingError, PrismError
from prism.workloads import WorkloadError

NAMES = ["rmsnorm", "rmsnorm_mlp", "swiglu", "attention", "qk_attention"]
SMALL = {"n": 4, "d": 128}
SMALL_ATT = {"b": 2, "g": 4, "h": 256, "d": 16}


def test_names_are_the_papers_five_in_its_order_then_the_others():
    assert wl.paper_names() == NAMES and wl.names() == NAMES + ["lora", "rmsnorm_linear", "gqa", "ntrans", "moe"]
    assert [wl.get(n).name for n in wl.names()] == wl.names()
    assert [wl.get(n).display for n in wl.names()] == ["RMSNorm", "RMSNorm-MLP", "SwiGLU", "Attention",
                                                       "QK-Attention", "LoRA", "RMSNorm-linear", "GQA", "nTrans",
                                                       "MoE expert"]


def test_a_workload_is_refused_without_a_valid_small_config():
    import dataclasses

    with pytest.raises(WorkloadError, match="missing key"):
        dataclasses.replace(wl.get("lora"), small={"n": 4})


@pytest.mark.parametrize("bad", ["RMSNorm", "mlp", "", None, 3])
def test_unknown_name_lists_the_known_ones(bad):
    with pytest.raises(WorkloadError) as e:
        wl.get(bad)
    assert isinstance(e.value, PrismError)
    assert repr(bad) in str(e.value)
    assert all(n in str(e.value) for n in NAMES)


def test_real_configs_are_the_papers():
    assert wl.get("rmsnorm").configs == [{"n": 8, "d": 4096}, {"n": 8, "d": 1024}]
    assert wl.get("rmsnorm_mlp").configs == [{"n": 8, "d": 1024}, {"n": 16, "d": 1024}]
    assert wl.get("swiglu").configs == [{"n": 8, "d": 1024}, {"n": 8, "d": 4096}]
    att = [{"b": 2, "g": 8, "h": 8192, "d": 128}, {"b": 2, "g": 8, "h": 16384, "d": 128}]
    assert wl.get("attention").configs == att
    assert wl.get("qk_attention").configs == att


def test_configs_are_fresh_copies():
    w = wl.get("rmsnorm")
    w.configs[0]["d"] = 1
    assert w.configs[0]["d"] == 4096


@pytest.mark.parametrize("name", NAMES)
def test_build_shapes_and_dtypes(name):
    w = wl.get(name)
    for cfg in w.configs + [w.medium_config]:
        g = w.build(cfg)
        assert [t.name for t in g.inputs] == w.input_names
        assert {t.dtype for t in g.inputs + g.output_tensors} == {"float16"}
        if w.dims == ("n", "d"):
            n, d = cfg["n"], cfg["d"]
            assert g.inputs[0].shape == (n, d)
            assert all(t.shape == (d, d) for t in g.inputs[1:])
            assert [t.shape for t in g.output_tensors] == [(n, d)]
        else:
            b, q, h, d = cfg["b"], cfg["g"], cfg["h"], cfg["d"]
            assert [t.shape for t in g.inputs] == [(b, q, d), (b, d, h), (b, h, d)]
            assert [t.shape for t in g.output_tensors] == [(b, q, d)]
    assert {t.dtype for t in w.build(w.medium_config, dtype=torch.float32).inputs} == {"float32"}


def test_build_uses_the_programs_ops():
    ops = lambda name: [n.op for n in wl.get(name).build(wl.get(name).medium_config).nodes if n.op != "input"]
    assert ops("rmsnorm") == ["rms_norm", "matmul"]
    assert ops("rmsnorm_mlp") == ["rms_norm", "matmul", "matmul", "mul"]
    assert ops("swiglu") == ["matmul", "matmul", "silu", "mul"]
    softmax = ["max", "sub", "exp", "sum", "div"]  # max-subtracted: the program itself never overflows
    assert ops("attention") == ["matmul", *softmax, "matmul"]
    assert ops("qk_attention") == ["rms_norm", "matmul", *softmax, "matmul"]
    norm = [n for n in wl.get("rmsnorm").build(SMALL).nodes if n.op == "rms_norm"][0]
    assert norm.attrs["eps"] == 1e-6


@pytest.mark.parametrize("cfg, words", [
    ({"n": 4}, ["missing", "'d'"]),
    ({"n": 4, "d": 128, "k": 1}, ["unknown", "'k'"]),
    ({"d": 128, "m": 4}, ["missing", "'n'", "unknown", "'m'"]),
    ({"n": 0, "d": 128}, ["'n'", "positive int", "0"]),
    ({"n": -1, "d": 128}, ["'n'", "positive int"]),
    ({"n": 4, "d": 2.5}, ["'d'", "positive int", "2.5"]),
    ({"n": 4, "d": "128"}, ["'d'", "positive int"]),
    ({"n": True, "d": 128}, ["'n'", "positive int"]),
    ({"n": None, "d": 128}, ["'n'", "positive int"]),
    ((4, 128), ["dict", "n, d"]),
])
@pytest.mark.parametrize("method", ["build", "fused", "inputs"])
def test_bad_configs_say_which_key(cfg, words, method):
    w = wl.get("rmsnorm")
    call = {"build": lambda: w.build(cfg), "fused": lambda: w.fused(cfg), "inputs": lambda: w.inputs(cfg, 0)}
    with pytest.raises(WorkloadError) as e:
        call[method]()
    assert "rmsnorm" in str(e.value)
    assert all(word in str(e.value) for word in words), str(e.value)


def test_attention_config_keys():
    with pytest.raises(WorkloadError, match=r"missing key\(s\) 'd'.*b, g, h, d"):
        wl.get("attention").build({"b": 2, "g": 8, "h": 8192})


def test_bad_seed_and_dtype():
    w = wl.get("swiglu")
    with pytest.raises(WorkloadError, match="seed"):
        w.inputs(SMALL, -1)
    with pytest.raises(WorkloadError, match="seed"):
        w.inputs(SMALL, 1.5)
    with pytest.raises(prism.errors.DTypeError, match="int8"):
        w.inputs(SMALL, 0, dtype="int8")


def test_reference_checks_its_arguments():
    w = wl.get("rmsnorm_mlp")
    x, wu, wg = w.inputs(SMALL, 0, torch.float32)
    with pytest.raises(InputError, match="expected 3 tensors"):
        w.reference(x, wu)
    with pytest.raises(InputError, match="expected 3 tensors"):
        w.reference(x, wu, "Wgate")
    with pytest.raises(InputError, match="do not fit"):
        w.reference(x, wu, wg[:64])


# ---- fused forms ---------------------------------------------------------------------------------


def _blocks(g):
    return [n.attrs["block"] for n in g.nodes if n.op == "custom"]


@pytest.mark.parametrize("name", NAMES)
def test_fused_has_the_programs_interface(name):
    w = wl.get(name)
    for cfg in w.configs + [w.medium_config]:
        g, f = w.build(cfg), w.fused(cfg)
        assert [(t.name, t.type) for t in f.inputs] == [(t.name, t.type) for t in g.inputs]
        assert [t.type for t in f.output_tensors] == [t.type for t in g.output_tensors]
        assert all(n.op in ("input", "custom") for n in f.nodes)


def test_fused_defaults_at_real_configs():
    (b,) = _blocks(wl.get("rmsnorm").fused({"n": 8, "d": 4096}))
    assert (b.grid, b.loop) == ((64,), 64)
    (b,) = _blocks(wl.get("swiglu").fused({"n": 8, "d": 1024}))
    assert (b.grid, b.loop) == ((16,), 16)
    k1, k2 = _blocks(wl.get("attention").fused({"b": 2, "g": 8, "h": 16384, "d": 128}))
    assert (k1.grid, k1.loop) == ((2, 32), 8)
    assert (k2.grid, k2.loop) == ((2,), 1)


def test_fused_maps_are_the_hand_written_ones():
    (b,) = _blocks(wl.get("rmsnorm_mlp").fused(SMALL, grid=4, loop=2))
    maps = [(b.nodes[i].attrs["imap"], b.nodes[i].attrs["fmap"]) for i in b.loaders]
    assert maps == [({}, 1), ({"x": 1}, 0), ({"x": 1}, 0)]
    assert [b.nodes[i].attrs["omap"] for i in b.savers] == [{"x": 1}]
    assert [n.op for n in b.nodes].count("accum") == 3
    k1, k2 = _blocks(wl.get("qk_attention").fused(SMALL_ATT, splits=2, loop=2))
    maps = [(k1.nodes[i].attrs["imap"], k1.nodes[i].attrs["fmap"]) for i in k1.loaders]
    assert maps == [({"x": 0}, None), ({"x": 0, "y": 2}, 2), ({"x": 0, "y": 1}, 1)]
    assert [k1.nodes[i].attrs["omap"] for i in k1.savers] == [{"x": 0}, {"x": 0}]   # y summed
    assert [k2.nodes[i].attrs["omap"] for i in k2.savers] == [{"x": 0}]
    assert "rms_norm" in [n.op for n in k1.nodes]
    assert "rms_norm" not in [n.op for n in _blocks(wl.get("attention").fused(SMALL_ATT))[0].nodes]


@pytest.mark.parametrize("name, params", [
    ("rmsnorm", {"grid": 3}),          # 128 columns do not split into 3
    ("rmsnorm", {"loop": 0}),
    ("rmsnorm_mlp", {"grid": 256}),    # more blocks than columns
    ("swiglu", {"loop": "2"}),
    ("swiglu", {"grid": 2.0}),
    ("attention", {"splits": 3}),
    ("attention", {"splits": 64, "loop": 8}),   # 512 tiles of a 256-long kv
    ("qk_attention", {"loop": -1}),
    ("qk_attention", {"splits": (2,)}),
])
def test_bad_fused_params_are_mapping_errors(name, params):
    w = wl.get(name)
    with pytest.raises(MappingError):
        w.fused(w.medium_config, **params)


def test_unknown_fused_param_is_named():
    with pytest.raises(WorkloadError, match=r"'tile'.*known: grid, loop"):
        wl.get("rmsnorm").fused(SMALL, tile=64)
    with pytest.raises(WorkloadError, match=r"'grid'.*known: splits, loop"):
        wl.get("attention").fused(SMALL_ATT, grid=2)


def test_io_bytes_is_inputs_plus_output():
    assert wl.get("rmsnorm").io_bytes({"n": 8, "d": 4096}) == 2 * (8 * 4096 + 4096 * 4096 + 8 * 4096)
    assert wl.get("attention").io_bytes({"b": 2, "g": 8, "h": 8192, "d": 128}, "float32") == \
        4 * (2 * 8 * 128 * 2 + 2 * 2 * 128 * 8192)


def test_str_shows_the_program():
    assert str(wl.get("swiglu")) == "swiglu: O = silu(X @ Wgate) * (X @ Wup)"


SWEEP = [(n, cfg) for n in wl.names() for cfg in wl.get(n).sweep_configs]


def test_the_sweep_is_the_papers_evaluation_grid():
    assert wl.get("rmsnorm").sweep_configs == [{"n": n, "d": d} for n in (8, 16) for d in (1024, 2048, 4096)]
    # (batch, heads, queries, kv, head dim) as (batch·heads, queries, kv, head dim)
    assert wl.get("attention").sweep_configs == [{"b": 16, "g": 1, "h": 1024, "d": 128},
                                                 {"b": 16, "g": 128, "h": 1024, "d": 128},
                                                 {"b": 64, "g": 1, "h": 1024, "d": 128},
                                                 {"b": 32, "g": 1, "h": 1024, "d": 128}]
    # GQA keeps batch and heads apart: (batch, KV heads, queries per KV head, kv, head dim)
    assert wl.get("gqa").sweep_configs == [{"b": 2, "k": 8, "g": 1, "h": 1024, "d": 128},
                                           {"b": 2, "k": 8, "g": 128, "h": 1024, "d": 128},
                                           {"b": 2, "k": 32, "g": 1, "h": 1024, "d": 128},
                                           {"b": 4, "k": 8, "g": 1, "h": 1024, "d": 128}]
    assert len(SWEEP) == 30


@pytest.mark.parametrize("name, cfg", SWEEP, ids=[f"{n}-{'-'.join(map(str, c.values()))}" for n, c in SWEEP])
def test_every_sweep_config_fuses_verifies_and_runs(name, cfg):
    w = wl.get(name)
    fused = w.fused(cfg)
    verdict = prism.verify.equivalent(w.build(cfg), fused)
    assert verdict.equal, verdict.reason
    xs = w.inputs(cfg, 0, torch.float32)
    (got,), want = prism.interp.run(fused, xs, torch.float32), w.reference(*xs)
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-4
