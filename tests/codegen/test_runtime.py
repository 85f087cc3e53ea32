"""CompiledGraph: argument checks, the module written to the cache and imported, and the plan it runs."""

import pytest

import prism
from prism import codegen
from prism.errors import InputError


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path))
    w = prism.workloads.get("rmsnorm")
    return codegen.compile_graph(w.fused({"n": 4, "d": 64}, grid=2, loop=2))


def test_checks_count_shape_dtype_and_device(compiled):
    x, w = prism.workloads.get("rmsnorm").inputs({"n": 4, "d": 64}, 0)
    with pytest.raises(InputError, match="takes 2 tensor"):
        compiled(x)
    with pytest.raises(InputError, match="input W should have shape"):
        compiled(x, w[:32])
    with pytest.raises(InputError, match="input X should have dtype float16"):
        compiled(x.float(), w)
    with pytest.raises(InputError, match="must be a torch.Tensor"):
        compiled(x, w.tolist())
    with pytest.raises(InputError, match="CUDA tensors"):      # this process does not interpret
        compiled(x, w)


def test_module_is_written_to_the_cache_and_imported(compiled, tmp_path):
    module = compiled.module
    files = list(tmp_path.glob("prism_*.py"))
    assert len(files) == 1 and files[0].read_text() == compiled.source
    assert callable(module.launch_kernel_0)
    assert type(module.kernel_0).__name__ == "JITFunction"
    assert codegen.compile_graph(compiled.graph).module is module     # same source: same module


def test_plan_lists_buffers_and_steps(compiled):
    plan = compiled.plan
    assert [b.shape for b in plan.buffers] == [(4, 64), (64, 64), (4, 64)]
    assert plan.inputs == (0, 1) and plan.outputs == (2,)
    assert [s.kernel.name for s in plan.steps] == ["kernel_0"] and plan.steps[0].outputs == (2,)


def test_compile_graph_wants_a_kernel_graph():
    with pytest.raises(InputError):
        codegen.compile_graph(prism.BlockGraph())


def test_outputs_that_are_inputs_come_back_as_given(tmp_path, monkeypatch):
    g = prism.KernelGraph()
    x = g.input((4,), "float32")
    g.output(x, g.exp(x))
    cg = codegen.compile_graph(g)
    assert [s.kernel.name for s in cg.plan.steps] == ["kernel_0_exp"]
    assert cg.plan.outputs[0] == cg.plan.inputs[0]
