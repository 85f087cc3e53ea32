"""Generated kernels compile ahead of time for sm_90 (no GPU needed): the five workloads' fused kernels at
the paper's configs, and the hand-made µGraphs that stress padding, split-K and three grid dims."""

import pytest

from prism import codegen
from prism.codegen import CodegenError
from prism.codegen.spec import KernelSpec
from prism.codegen.load import load_module
from tests.child import interpreted
from tests.codegen.cases import AOT_CASES

SHARED_LIMIT = 227 * 1024   # bytes of shared memory a block may use on sm_90


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRISM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "prism-cache"))


@pytest.mark.parametrize("case", list(AOT_CASES))
def test_compiles_for_sm90(case):
    cg = codegen.compile_graph(AOT_CASES[case]())
    results = cg.aot()
    assert results and [r.name for r in results] == [k.name for k in cg.kernels]
    for r in results:
        assert ".target sm_90" in r.ptx and f".entry {r.name}" in r.ptx
        assert r.registers is not None and 0 < r.registers <= 255
        assert r.shared <= SHARED_LIMIT
        if case.startswith("real_"):    # the workloads' kernels must not spill at their default tiles
            assert not r.spills, str(r)


def test_compile_rejects_what_the_interpreter_accepts():
    """A tl.dot of 8 x 8 tiles runs in the interpreter but not on the GPU: the AOT compile says so."""
    source = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def small_dot(a_ptr, o_ptr):\n"
        "    offs = tl.arange(0, 8)\n"
        "    a = tl.load(a_ptr + offs[:, None] * 8 + offs[None, :])\n"
        "    tl.store(o_ptr + offs[:, None] * 8 + offs[None, :], tl.dot(a, a))\n")
    module = load_module(source, "test_small_dot")
    spec = KernelSpec("small_dot", "", source, (1,), {"a_ptr": "*fp16", "o_ptr": "*fp32"}, {},
                      ("float16",), ("float32",), (False,))
    with pytest.raises(CodegenError, match="small_dot.*could not compile"):
        codegen.compile_aot(module.small_dot, spec)


def test_launched_figures_need_cuda_tensors(tmp_path):
    """CompiledGraph.launched (a compile worker's figures on a GPU) runs the kernels, so it takes CUDA tensors: on CPU
    tensors it says so in one InputError, on a machine with a GPU or without; under Triton's interpreter, which builds
    no binaries, too."""
    import torch

    from prism.errors import InputError

    g = AOT_CASES[next(iter(AOT_CASES))]()
    cg = codegen.compile_graph(g)
    with pytest.raises(InputError, match="CUDA tensors"):
        cg.launched([torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in g.inputs])
    code = ("import torch; from prism import codegen, errors; from tests.codegen.cases import AOT_CASES\n"
            "g = AOT_CASES[next(iter(AOT_CASES))]()\n"
            "xs = [torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in g.inputs]\n"
            "try:\n"
            "    codegen.compile_graph(g).launched(xs)\n"
            "except errors.InputError as e:\n"
            "    print(e)\n")
    assert "interpreter" in interpreted(code, tmp_path)[-1]


def test_a_pdl_kernel_waits_for_the_kernel_before_until_it_reads_or_writes():
    """Programmatic dependent launch (prism.ir.Launch.pdl) lets a kernel start while the one before it runs; it is
    right only because every block waits (griddepcontrol.wait) before its first global load or store. The sm_90
    binary has the wait before them and the hint that lets the next kernel launch; the same kernels without PDL
    have neither."""
    cg = codegen.compile_graph(AOT_CASES["pdl_real_attention_safe_split"]())
    plain = codegen.compile_graph(AOT_CASES["real_attention_safe_split"]())
    assert len(cg.kernels) == 2
    for r, spec in zip(cg.aot(), cg.kernels):
        body = r.ptx[r.ptx.index(f".entry {r.name}"):]
        wait = body.index("griddepcontrol.wait")
        first = min(body.index(op) for op in ("ld.global", "st.global") if op in body)
        assert wait < first and "griddepcontrol.launch_dependents" in body
        assert spec.constexprs["PDL"] == 1 and "launch_pdl=True" in spec.source
    assert not any("griddepcontrol" in r.ptx for r in plain.aot())
