"""JSON round-trip, structural hashes, and the errors corrupt documents raise (prism.ir.serialize)."""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from prism.errors import GraphError, MappingError, SerializationError
from prism.ir import OPS, BlockGraph, KernelGraph, TType
from prism.ir.serialize import dumps, from_json, loads, structural_hash, to_json
from tests.strategies import graphs, kernel_graphs

PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- graphs used below ---------------------------------------------------------------------------


def rmsnorm_program(n: int, d: int, names: tuple[str, str] = ("X", "W")) -> KernelGraph:
    """O = rms_norm(X) @ W, the RMSNorm workload."""
    g = KernelGraph()
    x, w = g.input((n, d), name=names[0]), g.input((d, d), name=names[1])
    g.output(g.matmul(g.rms_norm(x), w))
    return g


def rmsnorm_fused(n: int, d: int, grid: int, loop: int) -> KernelGraph:
    """The hand-written fused RMSNorm kernel of DESIGN.md, wrapped in a kernel graph."""
    b = BlockGraph(grid=(grid,), loop=loop)
    bx = b.input(TType((n, d), "float16"), imap={}, fmap=1)
    bw = b.input(TType((d, d), "float16"), imap={"x": 1}, fmap=0)
    xw = b.accum(b.matmul(bx, bw))
    ss = b.accum(b.sum(b.square(bx), 1))
    b.output(b.div(xw, b.sqrt(b.mul_scalar(ss, 1 / d))), omap={"x": 1})
    g = KernelGraph()
    (o,) = g.custom(b, [g.input((n, d), name="X"), g.input((d, d), name="W")])
    g.output(o)
    return g


def small(n: int = 8, unary: str = "exp", dim: int = 1, eps: float = 0.0, scalar: float = 0.5,
          dtype: str = "float16", grid: tuple[int, ...] = (2,), loop: int = 2, imap_w: dict | None = None,
          fmaps: tuple[int | None, int | None] = (1, 0), omap: dict | None = None, norm_of: str = "o",
          swap_outputs: bool = False, extra_neg: bool = False, names: tuple[str, str] = ("X", "W")) -> KernelGraph:
    """A kernel graph with one custom op; each keyword changes one structural feature."""
    g = KernelGraph()
    x, w = g.input((n, 16), dtype, name=names[0]), g.input((16, 16), dtype, name=names[1])
    b = BlockGraph(grid=grid, loop=loop)
    bx = b.input(x, imap={}, fmap=fmaps[0])
    bw = b.input(w, imap={"x": 1} if imap_w is None else imap_w, fmap=fmaps[1])
    acc = b.accum(b.matmul(bx, bw))
    b.output(b.apply(unary, [acc]), omap={"x": 1} if omap is None else omap)
    (o,) = g.custom(b, [x, w])
    s = g.sum(o, dim)
    r = g.mul_scalar(g.rms_norm(o if norm_of == "o" else x, eps), scalar)
    r = g.neg(r) if extra_neg else r
    g.output(*((s, r) if swap_outputs else (r, s)))
    return g


# ---- round trip ----------------------------------------------------------------------------------


@PROPERTY
@given(graphs())
def test_round_trip_property(g: KernelGraph | BlockGraph) -> None:
    doc = to_json(g)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc  # plain JSON types only
    loaded = loads(dumps(g))
    assert type(loaded) is type(g)
    assert to_json(loaded) == doc
    assert str(loaded) == str(g)
    assert structural_hash(loaded) == structural_hash(g)
    assert structural_hash(loaded, shapes=False) == structural_hash(g, shapes=False)


def _chained_customs(g: KernelGraph) -> bool:
    """A custom op fed by a kernel op fed by another custom op."""
    def fed_by(i: int, kind: Callable[[str], bool]) -> bool:
        return any(kind(g.nodes[n].op) for n, _ in g.nodes[i].inputs)

    ops = [i for i, n in enumerate(g.nodes) if n.op in OPS and fed_by(i, lambda op: op == "custom")]
    return any(g.nodes[j].op == "custom" and any(r[0] in ops for r in g.nodes[j].inputs) for j in range(len(g.nodes)))


def _cross_block_sum(b: BlockGraph) -> bool:
    return len(b.grid) == 3 and any(
        b.nodes[i].op == "saver" and any(size > 1 and dim not in b.nodes[i].attrs["omap"]
                                         for dim, size in zip(b.grid_dims, b.grid)) for i in b.savers)


def _features(g: KernelGraph | BlockGraph) -> set[str]:
    blocks = [g] if isinstance(g, BlockGraph) else [n.attrs["block"] for n in g.nodes if n.op == "custom"]
    ops = {n.op for n in g.nodes} | {n.op for b in blocks for n in b.nodes}
    found = {f"op {op}" for op in ops}
    found |= {"custom -> op -> custom"} if isinstance(g, KernelGraph) and _chained_customs(g) else set()
    found |= {"3 grid dims, cross-block sum"} if any(_cross_block_sum(b) for b in blocks) else set()
    found |= {"3 outputs"} if isinstance(g, KernelGraph) and len(g.outputs) >= 3 else set()
    return found


FEATURES = sorted({f"op {op}" for op in [*OPS, "custom", "loader", "accum", "saver"]}
                  | {"custom -> op -> custom", "3 grid dims, cross-block sum", "3 outputs"})


@pytest.mark.parametrize("feature", FEATURES)
def test_the_generator_reaches_what_the_property_claims(feature: str) -> None:
    """The round-trip property is only as good as the graphs it sees: the generator makes each feature
    below (searched for, so that no hypothesis version's particular draws decide it)."""
    g = find(graphs(), lambda g: feature in _features(g), settings=settings(max_examples=2000, phases=[Phase.generate]))
    assert feature in _features(g)


def test_round_trip_of_the_design_example() -> None:
    g = rmsnorm_fused(8, 256, grid=16, loop=8)
    loaded = KernelGraph.from_json(g.to_json())
    assert str(loaded) == str(g) and loaded.to_json() == g.to_json()
    block = g.nodes[2].attrs["block"]
    assert str(BlockGraph.from_json(block.to_json())) == str(block)


def test_loaded_graph_behaves_like_a_built_one() -> None:
    """Replay goes through the builders: the loaded custom block is frozen, a loaded block is not."""
    loaded = KernelGraph.from_json(rmsnorm_fused(8, 64, grid=4, loop=4).to_json())
    with pytest.raises(GraphError, match="can no longer change"):
        loaded.nodes[2].attrs["block"].exp(loaded.nodes[2].attrs["block"].tensor((0, 0)))
    b = BlockGraph.from_json(rmsnorm_fused(8, 64, grid=4, loop=4).nodes[2].attrs["block"].to_json())
    b.exp(b.tensor((0, 0)))
    loaded.output(loaded.exp(loaded.output_tensors[0]))


def test_document_layout_is_pinned() -> None:
    """Version 1 of the format, written out; changing it means a new version."""
    g = KernelGraph()
    g.output(g.sum(g.input((4, 2), "float32", name="A"), -1))
    assert to_json(g) == {
        "format": "prism.kernel_graph", "version": 1,
        "nodes": [
            {"op": "input", "inputs": [], "attrs": {"name": "A"},
             "outputs": [{"shape": [4, 2], "dtype": "float32"}]},
            {"op": "sum", "inputs": [[0, 0]], "attrs": {"dim": 1},
             "outputs": [{"shape": [4, 1], "dtype": "float32"}]},
        ],
        "outputs": [[1, 0]],
    }
    b = BlockGraph(grid=(2, 1), loop=3)
    b.output(b.accum(b.input(TType((4, 6), "float32"), imap={"x": 0}, fmap=1)), omap={})
    assert to_json(b) == {
        "format": "prism.block_graph", "version": 1, "grid": [2, 1], "loop": 3,
        "nodes": [
            {"op": "loader", "inputs": [], "attrs": {"index": 0, "imap": {"x": 0}, "fmap": 1},
             "outputs": [{"shape": [2, 2], "dtype": "float32"}], "source": {"shape": [4, 6], "dtype": "float32"}},
            {"op": "accum", "inputs": [[0, 0]], "attrs": {}, "outputs": [{"shape": [2, 2], "dtype": "float32"}]},
            {"op": "saver", "inputs": [[1, 0]], "attrs": {"index": 0, "omap": {}},
             "outputs": [{"shape": [2, 2], "dtype": "float32"}]},
        ],
    }


def test_a_shared_block_is_written_twice_and_loads_as_two_copies() -> None:
    g = KernelGraph()
    b = BlockGraph(grid=(2,), loop=1)
    b.output(b.accum(b.exp(b.input(TType((4,), "float32"), imap={"x": 0}))), omap={"x": 0})
    (o1,) = g.custom(b, [g.input((4,), "float32")])
    (o2,) = g.custom(b, [o1])
    g.output(o2)
    loaded = from_json(to_json(g))
    assert to_json(loaded) == to_json(g) and str(loaded) == str(g)
    assert loaded.nodes[1].attrs["block"] is not loaded.nodes[2].attrs["block"]


def test_scalars_survive_dumps_exactly() -> None:
    g = KernelGraph()
    g.output(g.mul_scalar(g.input((2,)), 1 / 3), g.add_scalar(g.input((2,)), 1e-300))
    loaded = loads(dumps(g, indent=2))
    assert [n.attrs for n in loaded.nodes if n.op != "input"] == [{"value": 1 / 3}, {"value": 1e-300}]


# ---- hashes --------------------------------------------------------------------------------------

_VARIANTS: dict[str, Callable[[], KernelGraph]] = {
    "base": lambda: small(),
    "unary op": lambda: small(unary="relu"),
    "sum dim": lambda: small(dim=0),
    "eps": lambda: small(eps=1e-5),
    "scalar value": lambda: small(scalar=0.25),
    "dtype": lambda: small(dtype="float32"),
    "imap": lambda: small(imap_w={}),
    "fmap": lambda: small(fmaps=(None, None)),
    "omap (cross-block sum)": lambda: small(omap={}),
    "one more grid dim": lambda: small(grid=(2, 1)),
    "wiring": lambda: small(norm_of="x"),
    "output order": lambda: small(swap_outputs=True),
    "extra op": lambda: small(extra_neg=True),
}
_SIZES: dict[str, Callable[[], KernelGraph]] = {
    "input size": lambda: small(n=4),
    "grid size and loop range": lambda: small(grid=(4,), loop=4),
}


@pytest.mark.parametrize("shapes", [True, False])
def test_hash_is_stable_and_hex_sha256(shapes: bool) -> None:
    for build in (small, lambda: rmsnorm_fused(8, 256, 16, 8), lambda: rmsnorm_program(8, 64)):
        h = structural_hash(build(), shapes=shapes)
        assert re.fullmatch("[0-9a-f]{64}", h) and h == structural_hash(build(), shapes=shapes)
    b1, b2 = (rmsnorm_fused(8, 64, 4, 4).nodes[2].attrs["block"] for _ in range(2))
    assert b1.structural_hash(shapes=shapes) == b2.structural_hash(shapes=shapes)


def test_hash_is_pinned() -> None:
    """Hashes key caches on disk: the same graph must hash the same in every process and release."""
    g = KernelGraph()
    g.output(g.sum(g.input((4, 2), "float32", name="A"), -1))
    assert g.structural_hash() == _PINNED_HASH
    assert g.structural_hash(shapes=False) == _PINNED_SHAPE_FREE_HASH


_PINNED_HASH = "f753309f0d0f74437276fd62a719939eff8d3b2199481fce147caecf7b3ee978"
_PINNED_SHAPE_FREE_HASH = "f23bc697a04c4005d0cc7a8e084e6930cfe025c4781332ded3b49928b26d5bbb"


@pytest.mark.parametrize("shapes", [True, False])
def test_every_structural_change_changes_the_hash(shapes: bool) -> None:
    hashes = {name: structural_hash(build(), shapes=shapes) for name, build in _VARIANTS.items()}
    same = [(a, b) for a in hashes for b in hashes if a < b and hashes[a] == hashes[b]]
    assert not same


def test_sizes_change_only_the_shape_hash() -> None:
    base = small()
    for name, build in _SIZES.items():
        assert structural_hash(build()) != structural_hash(base), name
        assert structural_hash(build(), shapes=False) == structural_hash(base, shapes=False), name


def test_input_names_do_not_change_either_hash() -> None:
    for shapes in (True, False):
        assert structural_hash(small(names=("A", "B")), shapes) == structural_hash(small(), shapes)
        assert structural_hash(rmsnorm_program(8, 64, ("P", "Q")), shapes) == \
            structural_hash(rmsnorm_program(8, 64), shapes)


def test_shape_free_hash_is_equal_across_sizes() -> None:
    """The RMSNorm program, and its hand-written fused kernel, at two sizes each."""
    p1, p2 = rmsnorm_program(8, 4096), rmsnorm_program(16, 1024)
    assert structural_hash(p1) != structural_hash(p2)
    assert structural_hash(p1, shapes=False) == structural_hash(p2, shapes=False)
    f1, f2 = rmsnorm_fused(8, 1024, grid=16, loop=16), rmsnorm_fused(16, 1024, grid=64, loop=8)
    assert structural_hash(f1) != structural_hash(f2)
    assert structural_hash(f1, shapes=False) == structural_hash(f2, shapes=False)
    assert structural_hash(f1, shapes=False) != structural_hash(p1, shapes=False)


def test_a_scalar_that_encodes_a_size_still_tells_sizes_apart() -> None:
    """The fused kernel computes the mean as sum * (1/d): scalar values are kept, so d still counts."""
    f1, f2 = rmsnorm_fused(8, 1024, grid=16, loop=16), rmsnorm_fused(8, 4096, grid=16, loop=16)
    assert structural_hash(f1, shapes=False) != structural_hash(f2, shapes=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel_graphs(max_customs=1))
def test_shapes_false_hash_ignores_only_extents(g: KernelGraph) -> None:
    """A graph and its shape-free hash: the hashed document still has every op, map and edge."""
    from prism.ir.serialize import _canonical

    doc, free = to_json(g), _canonical(to_json(g), shapes=False)
    assert [n["op"] for n in free["nodes"]] == [n["op"] for n in doc["nodes"]]
    assert [n["inputs"] for n in free["nodes"]] == [n["inputs"] for n in doc["nodes"]]
    assert "shape" not in json.dumps(free)


# ---- corrupt documents ------------------------------------------------------------------------------


def _set(doc: dict, path: str, value: Any) -> None:
    """Put `value` at `path` ("nodes.3.attrs.dim"); "a|b" with a tuple of values sets several."""
    if "|" in path:
        for p, v in zip(path.split("|"), value):
            _set(doc, p, v)
        return
    *parents, last = _parse(path)
    target = doc
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value


def _parse(path: str) -> list[Any]:
    return [int(k) if k.isdigit() else k for k in path.split(".")]


class _Delete:
    def __repr__(self) -> str:  # a stable test id
        return "DELETE"


_DELETE = _Delete()
_BLOCK = "nodes.2.attrs.block"

# (path in the document of small(), new value, what the message must say)
_CORRUPT = [
    ("nodes.3.inputs.0", [5, 0], r"node 3 \(sum\): input 0 refers to node 5, which comes later \(a forward reference"),
    ("nodes.3.inputs.0", [3, 0], r"node 3 \(sum\): input 0 refers to its own node 3 \(a cycle\)"),
    ("nodes.3.inputs.0", [42, 0], r"node 3 \(sum\): input 0 refers to nonexistent node 42 \(the graph has 6 nodes\)"),
    ("nodes.3.inputs.0", [2, 1], r"node 3 \(sum\): input 0 refers to output 1 of node 2, which has 1 output"),
    ("nodes.3.inputs.0", [True, 0], r"node 3 \(sum\): input 0 must be a \[node, output\] pair of ints"),
    (f"{_BLOCK}.nodes.2.inputs.1", [4, 0],
     r"node 2 \(custom\): block graph node 2 \(matmul\): input 1 refers to node 4, which comes later"),
    ("outputs.1", [9, 0], r"outputs\[1\] refers to nonexistent node 9"),
    ("outputs.1", [5, 0], r"outputs: output: t5 is already an output"),
    ("nodes.4.op", "layer_norm", r"node 4 \(layer_norm\): unknown op 'layer_norm'; known ops: matmul, "),
    ("nodes.4.op", "accum", r"node 4 \(accum\): op 'accum' belongs in a prism.block_graph, not a prism.kernel_graph"),
    ("version", 2, r"document: unsupported version 2 of prism.kernel_graph; this Prism reads version 1"),
    ("version", "1", r"document: field 'version' must be int, got str '1'"),
    ("version", True, r"document: field 'version' must be int, got bool True"),
    (f"{_BLOCK}.version", 7, r"node 2 \(custom\): attribute 'block': unsupported version 7"),
    ("format", "prism.graph", r"document: unknown format 'prism.graph'"),
    (f"{_BLOCK}.format", "prism.kernel_graph",
     r"node 2 \(custom\): attribute 'block': expected format 'prism.block_graph', got 'prism.kernel_graph'"),
    ("outputs", _DELETE, r"document: missing field 'outputs'"),
    ("nodes.3.attrs", _DELETE, r"node 3 \(sum\): missing field 'attrs'"),
    ("nodes.3.op", _DELETE, r"node 3: missing field 'op'"),
    (f"{_BLOCK}.loop", _DELETE, r"node 2 \(custom\): attribute 'block': missing field 'loop'"),
    (f"{_BLOCK}.nodes.0.source", _DELETE, r"block graph node 0 \(loader\): missing field 'source'"),
    (f"{_BLOCK}.nodes.0.attrs.imap", _DELETE, r"block graph node 0 \(loader\): missing attribute 'imap'"),
    ("nodes.2.attrs.block", _DELETE, r"node 2 \(custom\): missing attribute 'block'"),
    ("nodes.0.attrs.name", _DELETE, r"node 0 \(input\): missing attribute 'name'"),
    ("nodes.3.attrs.dim", _DELETE, r"node 3 \(sum\): sum: missing attribute\(s\) \['dim'\]"),
    ("nodes.3.color", "red", r"node 3 \(sum\): unexpected field\(s\) \['color'\]"),
    ("nodes.3", 7, r"node 3: expected a JSON object, got int"),
    ("nodes", {}, r"document: field 'nodes' must be list, got dict"),
    # stored types and attributes that disagree with what the builders derive
    ("nodes.3.outputs.0.shape", [8, 16],
     r"node 3 \(sum\): stored outputs \[float16\[8, 16\]\] differ from the re-derived \[float16\[8, 1\]\]"),
    ("nodes.5.outputs.0.dtype", "float32",
     r"node 5 \(mul_scalar\): stored outputs \[float32\[8, 16\]\] differ from the re-derived \[float16\[8, 16\]\]"),
    ("nodes.5.outputs", [],
     r"node 5 \(mul_scalar\): stored outputs \[\] differ from the re-derived \[float16\[8, 16\]\]"),
    (f"{_BLOCK}.nodes.0.outputs.0.shape", [8, 16],
     r"block graph node 0 \(loader\): stored outputs \[float16\[8, 16\]\] differ from the re-derived "
     r"\[float16\[8, 8\]\]"),
    ("nodes.2.outputs.0.shape", [8, 8], r"node 2 \(custom\): stored outputs \[float16\[8, 8\]\] differ"),
    ("nodes.3.attrs.dim", -1, r"node 3 \(sum\): stored attrs \{'dim': -1\} differ from the re-derived \{'dim': 1\}"),
    (f"{_BLOCK}.nodes.1.attrs.index", 0, r"block graph node 1 \(loader\): stored attrs .*'index': 0.* differ"),
    (f"{_BLOCK}.nodes.0.attrs.index", False,
     r"block graph node 0 \(loader\): stored attrs .*'index': False.* differ"),
    ("nodes.0.outputs", [], r"node 0 \(input\): an input has exactly one output type, got 0"),
    ("nodes.0.outputs.0", "float16[8, 16]", r"node 0 \(input\): output 0: a type must be an object"),
    ("nodes.0.outputs.0.shape", [0, 16],
     r"node 0 \(input\): output 0: shape must be a non-empty list of positive ints"),
    ("nodes.0.outputs.0.dtype", "float8", r"node 0 \(input\): output 0: unknown dtype 'float8'"),
    # builder errors during replay, re-raised with the builder's own message
    ("nodes.1.outputs.0.shape", [8, 16],
     r"node 2 \(custom\): custom: input 1 \(W: float16\[8, 16\]\) should have shape"),
    (f"{_BLOCK}.nodes.1.source.shape|{_BLOCK}.nodes.1.outputs.0.shape", ([32, 16], [16, 8]),
     r"block graph node 2 \(matmul\): matmul: inner dims differ: float16\[8, 8\] has 8 columns"),
    (f"{_BLOCK}.nodes.1.attrs.imap", {"w": 1}, r"block graph node 1 \(loader\): input 1 .*imap names grid dim 'w'"),
    (f"{_BLOCK}.nodes.5.inputs", [[2, 0]], r"block graph node 5 \(saver\): output: t2 is computed inside the loop"),
    (f"{_BLOCK}.nodes.3.inputs", [[2, 0], [2, 0]], r"block graph node 3 \(accum\): takes 1 input\(s\), got 2"),
    (f"{_BLOCK}.grid", [0], r"node 2 \(custom\): block graph: BlockGraph: grid must be 1 to 3 positive ints"),
    (f"{_BLOCK}.grid", 2, r"block graph: field 'grid' must be list, got int 2"),
    ("nodes.1.attrs.name", "X", r"node 1 \(input\): input: a tensor named 'X' already exists"),
    ("nodes.5.attrs.value", "half", r"node 5 \(mul_scalar\): mul_scalar: value must be a finite number, got 'half'"),
]


@pytest.mark.parametrize("path, value, message", _CORRUPT, ids=[f"{c[0]}={c[1]!r}"[:60] for c in _CORRUPT])
def test_corrupt_document_is_refused(path: str, value: Any, message: str) -> None:
    doc = to_json(small())
    from_json(copy.deepcopy(doc))  # the uncorrupted document loads
    _set(doc, path, value)
    with pytest.raises(SerializationError, match=message):
        from_json(doc)


def test_builder_errors_keep_their_cause() -> None:
    doc = to_json(small())
    _set(doc, f"{_BLOCK}.nodes.1.attrs.imap", {"w": 1})
    with pytest.raises(SerializationError) as info:
        from_json(doc)
    assert isinstance(info.value.__cause__, MappingError)


def test_kind_is_checked_by_the_classmethods() -> None:
    with pytest.raises(SerializationError, match="expected format 'prism.block_graph', got 'prism.kernel_graph'"):
        BlockGraph.from_json(small().to_json())
    block_doc = small().nodes[2].attrs["block"].to_json()
    with pytest.raises(SerializationError, match="expected format 'prism.kernel_graph', got 'prism.block_graph'"):
        KernelGraph.from_json(block_doc)
    assert isinstance(from_json(block_doc), BlockGraph)


@pytest.mark.parametrize("data, message", [
    (42, r"document: expected a JSON object, got int"),
    ([], r"document: expected a JSON object, got list"),
    ({"format": "prism.kernel_graph", "version": 1, "nodes": (), "outputs": []},
     r"document.nodes: non-JSON value of type tuple"),
    ({1: "x"}, r"document: non-JSON key 1"),
    ({"format": object()}, r"document.format: non-JSON value of type object"),
])
def test_non_json_data_is_refused(data: Any, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        from_json(data)


def test_non_finite_numbers_are_refused() -> None:
    doc = to_json(small())
    _set(doc, "nodes.5.attrs.value", math.nan)
    with pytest.raises(SerializationError, match=r"document.nodes\[5\].attrs.value: non-JSON number nan"):
        from_json(doc)
    with pytest.raises(SerializationError, match="not valid JSON: NaN is not a JSON number"):
        loads(dumps(small()).replace("0.5", "NaN"))


@pytest.mark.parametrize("text", ["{", "", "not json", b"\xff\xfe"])
def test_unparseable_text_is_refused(text: str | bytes) -> None:
    with pytest.raises(SerializationError, match="loads: not valid JSON"):
        loads(text)


def test_to_json_refuses_what_is_not_a_graph() -> None:
    with pytest.raises(SerializationError, match="expected a KernelGraph or BlockGraph, got int"):
        to_json(42)  # type: ignore[arg-type]


# ---- fuzzing: any corruption ends in a SerializationError, or in a graph equal to the document -----------

_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([0.5, 1.0, -2.0]),
                  st.sampled_from(["", "x", "y", "float32", "exp", "loader", "custom", "prism.block_graph"]),
                  st.lists(st.integers(-1, 9), max_size=3), st.just({}), st.just({"x": 0}))


def _paths(v: Any, prefix: tuple = ()) -> list[tuple]:
    """Every position in a document, parents before children."""
    out = [prefix] if prefix else []
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        out.extend(_paths(x, prefix + (k,)))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=4))
def test_any_corruption_is_refused_cleanly(data: st.DataObject, g: KernelGraph | BlockGraph) -> None:
    doc = to_json(g)
    # top-level fields have their own tests above; fuzz everything below them
    path = data.draw(st.sampled_from([p for p in _paths(doc) if len(p) > 1]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(_JUNK)
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    try:
        loaded = from_json(doc)
    except SerializationError:
        return
    assert json.loads(json.dumps(to_json(loaded))) == json.loads(json.dumps(doc))

