"""JSON round-trip and structural hashing for kernel graphs and block graphs, as functions over the graph types.

The graph classes mix in `Stored` (its methods call the functions here) and name their format there, which
is how this module finds the class to rebuild a document with, without importing the graph modules.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

from prism.errors import PrismError, SerializationError
from prism.ir.builder import GraphBuilder, Ref, Tensor
from prism.ir.kinds import KINDS, LOADER, kind_of
from prism.ir.launch import FLAGS, Launch
from prism.ir.ops import DTYPES, OPS, TType, check_dtype
from prism.ir.sizes import Constraint

LAUNCH_FIELDS = ("num_warps", "num_stages", *FLAGS)
"""The fields of a block graph's launch in JSON."""

__all__ = [
    "BLOCK_FORMAT",
    "KERNEL_FORMAT",
    "VERSION",
    "Stored",
    "dumps",
    "from_json",
    "loads",
    "structural_hash",
    "to_json",
]

KERNEL_FORMAT = "prism.kernel_graph"
BLOCK_FORMAT = "prism.block_graph"
VERSION = 1

_FIELDS = {
    KERNEL_FORMAT: ("format", "version", "nodes", "outputs"),
    BLOCK_FORMAT: ("format", "version", "grid", "loop", "nodes"),
}
_CLASSES: dict[str, type] = {}
_OPTIONAL = {KERNEL_FORMAT: ("constraints",), BLOCK_FORMAT: ("launch",)}
"""Fields a document may leave out: a kernel graph proved for all sizes has no constraints (prism.ir.sizes), a
block graph compiled with the default launch (prism.ir.Launch) has no launch."""
_NODE_FIELDS = ("op", "inputs", "attrs", "outputs")
_STRUCTURAL = {KERNEL_FORMAT: ("input", "custom"), BLOCK_FORMAT: tuple(KINDS)}
_ARITY = {"input": 0, **{name: k.arity for name, k in KINDS.items()}}  # custom: as many as its block loads

Doc = dict[str, Any]


class Stored:
    """JSON and hashing as methods of a graph class, which names its format: `class G(..., Stored, format=F)`."""

    FORMAT: ClassVar[str]

    def __init_subclass__(cls, format: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FORMAT = format
        _CLASSES[format] = cls

    def to_json(self) -> Doc:
        """This graph as plain JSON types; `from_json` rebuilds it."""
        return to_json(self)  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: Any) -> Any:
        """Rebuild a graph from `to_json`'s output, replaying (so re-running) every builder check."""
        return from_json(data, expect=cls)

    def structural_hash(self, shapes: bool = True) -> str:
        """Hex sha256 of the structure; input names never count, `shapes=False` ignores all sizes."""
        return structural_hash(self, shapes=shapes)  # type: ignore[arg-type]

# ---- writing ---------------------------------------------------------------------------------


def to_json(graph: Any) -> Doc:
    """The graph as a dict of plain JSON types.

    Nodes are listed in the order they were added, each as `{"op", "inputs": [[node, output], ...],
    "attrs", "outputs": [{"shape", "dtype"}, ...]}`; a block loader adds `"source"` (the full type of
    the tensor it loads) and a custom node's `attrs.block` is a whole block-graph document. Sharing
    is not kept: a block graph used by two custom nodes is written twice and loads as two copies.
    """
    fmt = getattr(graph, "FORMAT", None) if isinstance(graph, Stored) else None
    nodes = [_node_json(graph, i) for i in range(len(graph.nodes))] if fmt else []
    if fmt == KERNEL_FORMAT:
        kept = {"constraints": [c.to_json() for c in graph.constraints]} if graph.constraints else {}
        return {"format": fmt, "version": VERSION, "nodes": nodes, "outputs": [list(r) for r in graph.outputs],
                **kept}
    if fmt == BLOCK_FORMAT:
        launch = {"launch": graph.launch.to_json()} if not graph.launch.default else {}
        return {"format": fmt, "version": VERSION, "grid": list(graph.grid), "loop": graph.loop, **launch,
                "nodes": nodes}
    raise SerializationError(f"to_json: expected a KernelGraph or BlockGraph, got {type(graph).__name__}")


def dumps(graph: Any, indent: int | None = None) -> str:
    """The graph as JSON text."""
    return json.dumps(to_json(graph), indent=indent, allow_nan=False)


def _node_json(g: GraphBuilder, i: int) -> Doc:
    node = g.nodes[i]
    doc = {"op": node.op, "inputs": [list(r) for r in node.inputs],
           "attrs": {k: _value_json(v, f"node {i} ({node.op}): attribute {k!r}") for k, v in node.attrs.items()},
           "outputs": [_type_json(t) for t in node.outputs]}
    if kind_of(node) is LOADER:
        doc["source"] = _type_json(g.input_types[node.attrs["index"]])
    return doc


def _type_json(t: TType) -> Doc:
    # check_dtype: a TType built by hand may carry a torch.dtype; JSON stores the name.
    return {"shape": list(t.shape), "dtype": check_dtype(t.dtype, "to_json")}


def _value_json(v: Any, where: str) -> Any:
    """An attribute value as JSON: block graphs become nested documents, mappings objects."""
    if isinstance(v, Stored):
        return to_json(v)
    if isinstance(v, Mapping):
        return {str(k): _value_json(x, where) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_value_json(x, where) for x in v]
    if v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)):
        return v
    raise SerializationError(f"to_json: {where} has a value JSON cannot hold: {v!r}")


# ---- reading ---------------------------------------------------------------------------------


def loads(text: str | bytes, expect: type[GraphBuilder] | None = None) -> Any:
    """Parse JSON text (NaN and Infinity are refused: JSON has neither) and load the graph."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (TypeError, ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise SerializationError(f"loads: not valid JSON: {e}") from None
    return from_json(data, expect)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def from_json(data: Any, expect: type[GraphBuilder] | None = None) -> Any:
    """Rebuild a graph from `to_json`'s output; `expect` (KernelGraph or BlockGraph) pins the kind.

    Loading replays the builder calls, so every check the builders make runs again, then compares
    each rebuilt node with the stored one: a file cannot smuggle in a graph the builders would refuse,
    and a file that disagrees with itself is reported, not silently fixed. Anything wrong raises
    SerializationError naming the node (and field) at fault.
    """
    try:
        _check_plain(data, "document")
    except RecursionError:
        raise SerializationError("document: nested too deeply to be a graph") from None
    if expect is not None and _CLASSES.get(getattr(expect, "FORMAT", None)) is not expect:
        raise TypeError(f"from_json: expect must be KernelGraph or BlockGraph, got {expect!r}")
    fmt = _header(data, "document", expect.FORMAT if expect is not None else None)  # type: ignore[union-attr]
    return _kernel_from(data) if fmt == KERNEL_FORMAT else _block_from(data, "")


def _check_plain(v: Any, where: str) -> None:
    """Refuse anything `json.loads` could not have produced, naming where it sits."""
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise SerializationError(f"{where}: non-JSON key {k!r} (object keys must be strings)")
            _check_plain(x, f"{where}.{k}")
    elif isinstance(v, list):
        for k, x in enumerate(v):
            _check_plain(x, f"{where}[{k}]")
    elif isinstance(v, float) and not math.isfinite(v):
        raise SerializationError(f"{where}: non-JSON number {v!r}")
    elif not (v is None or isinstance(v, (bool, int, float, str))):
        raise SerializationError(f"{where}: non-JSON value of type {type(v).__name__}: {v!r}")


def _header(data: Any, where: str, want: str | None) -> str:
    """Check a document's format (`want`, if given), version and field names; return its format."""
    if not isinstance(data, dict):
        raise SerializationError(f"{where}: expected a JSON object, got {type(data).__name__}")
    fmt = _field(data, "format", str, where)
    if fmt not in _FIELDS:
        raise SerializationError(f"{where}: unknown format {fmt!r}; "
                                 f"expected {KERNEL_FORMAT!r} or {BLOCK_FORMAT!r}")
    if want is not None and fmt != want:
        raise SerializationError(f"{where}: expected format {want!r}, got {fmt!r}")
    version = _field(data, "version", int, where)
    if version != VERSION:
        raise SerializationError(f"{where}: unsupported version {version!r} of {fmt}; "
                                 f"this Prism reads version {VERSION}")
    _exact_fields(data, _FIELDS[fmt], where, _OPTIONAL[fmt])
    return fmt


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """d[key], checked to be of JSON type `kind` (a bool is never an int here)."""
    if key not in d:
        raise SerializationError(f"{where}: missing field {key!r}")
    v = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise SerializationError(f"{where}: field {key!r} must be {names}, got {type(v).__name__} {v!r}")
    return v


def _exact_fields(d: Mapping[str, Any], allowed: Sequence[str], where: str, optional: Sequence[str] = ()) -> None:
    for key in allowed:
        if key not in d:
            raise SerializationError(f"{where}: missing field {key!r}")
    extra = sorted(set(d) - set(allowed) - set(optional))
    if extra:
        raise SerializationError(f"{where}: unexpected field(s) {extra}")


def _type_from(v: Any, where: str) -> TType:
    if not isinstance(v, dict):
        raise SerializationError(f"{where}: a type must be an object {{'shape', 'dtype'}}, got {v!r}")
    _exact_fields(v, ("shape", "dtype"), where)
    shape, dtype = v["shape"], v["dtype"]
    if not isinstance(shape, list) or not shape or any(type(d) is not int or d < 1 for d in shape):
        raise SerializationError(f"{where}: shape must be a non-empty list of positive ints, got {shape!r}")
    if dtype not in DTYPES:
        raise SerializationError(f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return TType(tuple(shape), dtype)


def _ref_from(v: Any, g: GraphBuilder, here: int, total: int, where: str) -> Ref:
    """A stored [node, output] pair, which must name an output of an earlier node."""
    if not isinstance(v, list) or len(v) != 2 or any(type(x) is not int for x in v):
        raise SerializationError(f"{where} must be a [node, output] pair of ints, got {v!r}")
    n, k = v
    if not 0 <= n < total:
        raise SerializationError(f"{where} refers to nonexistent node {n} (the graph has {total} nodes)")
    if n == here:
        raise SerializationError(f"{where} refers to its own node {n} (a cycle)")
    if n > here:
        raise SerializationError(f"{where} refers to node {n}, which comes later (a forward reference or "
                                 "a cycle: nodes must be listed so that every input comes first)")
    count = len(g.nodes[n].outputs)
    if not 0 <= k < count:
        raise SerializationError(f"{where} refers to output {k} of node {n}, which has {count} output(s)")
    return (n, k)


def _kernel_from(data: Doc) -> Any:
    g = _CLASSES[KERNEL_FORMAT]()
    nodes = _field(data, "nodes", list, "document")
    _replay(g, nodes, KERNEL_FORMAT, "")
    refs = _field(data, "outputs", list, "document")
    outs = [g.tensor(_ref_from(r, g, len(nodes), len(nodes), f"outputs[{k}]")) for k, r in enumerate(refs)]
    if outs:
        _guard("outputs", lambda: g.output(*outs))
    stored = _field(data, "constraints", list, "document") if "constraints" in data else []
    constraints = [Constraint.from_json(c, f"constraints[{k}]") for k, c in enumerate(stored)]
    _guard("constraints", lambda: setattr(g, "constraints", constraints))
    return g


def _block_from(data: Doc, prefix: str) -> Any:
    where = f"{prefix}block graph"
    grid = _field(data, "grid", list, where)
    loop = _field(data, "loop", int, where)
    launch = data.get("launch", {})
    if not isinstance(launch, dict):
        raise SerializationError(f"{where}: launch must be an object of {', '.join(LAUNCH_FIELDS)}, got {launch!r}")
    _exact_fields(launch, (), f"{where} launch", LAUNCH_FIELDS)
    b = _guard(where, lambda: _CLASSES[BLOCK_FORMAT](grid=tuple(grid), loop=loop, launch=Launch(**launch)))
    _replay(b, _field(data, "nodes", list, where), BLOCK_FORMAT, f"{prefix}block graph ")
    return b


def _guard(where: str, build: Callable[[], Any]) -> Any:
    """Run a builder call; a PrismError it raises becomes a SerializationError saying where."""
    try:
        return build()
    except SerializationError:
        raise
    except PrismError as e:
        raise SerializationError(f"{where}: {e}") from e


class _Attrs(Mapping[str, Any]):
    """A stored node's attributes: a missing one is a SerializationError naming the node."""

    def __init__(self, attrs: Doc, where: str) -> None:
        self.attrs, self.where = attrs, where

    def __getitem__(self, key: str) -> Any:
        if key not in self.attrs:
            raise SerializationError(f"{self.where}: missing attribute {key!r}")
        return self.attrs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.attrs)

    def __len__(self) -> int:
        return len(self.attrs)

    def get(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


@dataclass(frozen=True)
class _Stored:
    """One stored node with its fields checked and its inputs resolved to tensors of the graph being rebuilt."""

    op: str
    tensors: list[Tensor]
    attrs: _Attrs
    outputs: list[TType]
    doc: Doc
    where: str


def _replay(g: GraphBuilder, nodes: list[Any], fmt: str, prefix: str) -> None:
    """Re-run the builder call behind each stored node, then check it rebuilt the same node."""
    for i, doc in enumerate(nodes):
        stored = _read_node(g, nodes, i, prefix)
        replay = _replayer(stored.op, fmt, stored.where)
        _guard(stored.where, lambda: replay(g, stored))
        _compare(g, i, doc, stored.where)


def _read_node(g: GraphBuilder, nodes: list[Any], i: int, prefix: str) -> _Stored:
    doc, where = nodes[i], f"{prefix}node {i}"
    if not isinstance(doc, dict):
        raise SerializationError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    name = _field(doc, "op", str, where)
    where = f"{where} ({name})"
    _exact_fields(doc, _NODE_FIELDS + (("source",) if name == LOADER.name else ()), where)
    tensors = [g.tensor(_ref_from(r, g, i, len(nodes), f"{where}: input {k}"))
               for k, r in enumerate(_field(doc, "inputs", list, where))]
    if name in _ARITY and len(tensors) != _ARITY[name]:
        raise SerializationError(f"{where}: takes {_ARITY[name]} input(s), got {len(tensors)}")
    attrs = _Attrs(_field(doc, "attrs", dict, where), where)
    outputs = [_type_from(t, f"{where}: output {k}") for k, t in enumerate(_field(doc, "outputs", list, where))]
    return _Stored(name, tensors, attrs, outputs, doc, where)


def _replayer(name: str, fmt: str, where: str) -> Callable[[Any, _Stored], Any]:
    """The replay function for op `name` in a document of format `fmt`."""
    if name in OPS or name in _STRUCTURAL[fmt]:
        return _replay_block if fmt == BLOCK_FORMAT else _REPLAY.get(name, _replay_op)
    other = next(f for f in _FIELDS if f != fmt)
    if name in _STRUCTURAL[other]:
        raise SerializationError(f"{where}: op {name!r} belongs in a {other}, not a {fmt}")
    raise SerializationError(f"{where}: unknown op {name!r}; known ops: {', '.join([*OPS, *_STRUCTURAL[fmt]])}")


def _compare(g: GraphBuilder, i: int, doc: Doc, where: str) -> None:
    """The rebuilt node must be the stored one: types, attributes, everything."""
    rebuilt = _node_json(g, i)
    for key in rebuilt:
        if not _same(rebuilt[key], doc[key]):
            shown = _show_types if key in ("outputs", "source") else repr
            raise SerializationError(f"{where}: stored {key} {shown(doc[key])} differ from the re-derived "
                                     f"{shown(rebuilt[key])}")


def _same(a: Any, b: Any) -> bool:
    """JSON equality in which true is not 1 (Python's == says it is), but 1 and 1.0 are one number."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _show_types(v: Any) -> str:
    types = v if isinstance(v, list) else [v]
    return "[" + ", ".join(f"{t['dtype']}[{', '.join(map(str, t['shape']))}]" for t in types) + "]"


# ---- replay: kernel graphs' own nodes here, block-graph nodes through their kinds ---------------------


def _replay_op(g: Any, s: _Stored) -> Any:
    return g.apply(s.op, s.tensors, s.attrs)


def _replay_input(g: Any, s: _Stored) -> Any:
    if len(s.outputs) != 1:
        raise SerializationError(f"{s.where}: an input has exactly one output type, got {len(s.outputs)}")
    return g.input(s.outputs[0].shape, s.outputs[0].dtype, name=s.attrs["name"])


def _replay_custom(g: Any, s: _Stored) -> Any:
    block_doc = s.attrs["block"]
    _header(block_doc, f"{s.where}: attribute 'block'", BLOCK_FORMAT)
    return g.custom(_block_from(block_doc, f"{s.where}: "), s.tensors)


def _replay_block(b: Any, s: _Stored) -> Any:
    source = _type_from(s.doc["source"], f"{s.where}: source") if "source" in s.doc else None
    return kind_of(s).build(b, s, s.tensors, source)


_REPLAY: dict[str, Callable[[Any, _Stored], Any]] = {"input": _replay_input, "custom": _replay_custom}

# ---- hashing ---------------------------------------------------------------------------------


def structural_hash(graph: Any, shapes: bool = True) -> str:
    """Hex sha256 of the graph's canonical JSON.

    Input names are left out: they are labels for people, not structure, so two graphs differing
    only in input names hash equal (inputs are still told apart by position). With `shapes=False`
    every extent is left out too (input, tile and output shapes keep only their rank; grid sizes keep
    only which grid dims exist; the loop range goes), so one program at two sizes hashes equal. Ops,
    attributes (a sum's dim, eps, scalar values), dtypes, maps and wiring always count. A scalar that
    encodes a size (`mul_scalar(t, 1 / d)`) is an attribute, so it still tells sizes apart.
    """
    doc = _canonical(to_json(graph), shapes)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(doc: Doc, shapes: bool) -> Doc:
    """The document with input names (and with shapes=False, every extent) removed."""
    out = dict(doc)
    if doc["format"] == BLOCK_FORMAT and not shapes:
        out["grid"] = ["x", "y", "z"][: len(doc["grid"])]
        del out["loop"]
        out.pop("launch", None)
    out["nodes"] = [_canonical_node(n, shapes) for n in doc["nodes"]]
    return out


def _canonical_node(node: Doc, shapes: bool) -> Doc:
    out = dict(node)
    if node["op"] == "input":
        out["attrs"] = {}
    if node["op"] == "custom":
        out["attrs"] = {"block": _canonical(node["attrs"]["block"], shapes)}
    if not shapes:
        out["outputs"] = [_rank_only(t) for t in node["outputs"]]
        if "source" in node:
            out["source"] = _rank_only(node["source"])
    return out


def _rank_only(t: Doc) -> Doc:
    return {"rank": len(t["shape"]), "dtype": t["dtype"]}
