"""prism.viz: every workload's fused graph and real sGraphs draw to valid PNGs whose labels carry the maps and
tile shapes; symbolic tiles evaluate to the concrete ones; bad paths, indices and objects raise InputError."""

import math
import re

import pytest
from PIL import Image

import prism.workloads as wl
from prism import viz
from prism.errors import InputError

SMALL = wl.get("swiglu").medium_config           # 64-wide tiles: grid 2, loop 2 (tests/workloads/test_workloads_fused)
SMALL_ATT = wl.get("attention").medium_config    # two kernels, grid (b, splits), loop 4


def small(name):
    return wl.get(name).medium_config


def check_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        assert im.format == "PNG" and min(im.size) > 100


def shape(dims):
    return " × ".join(map(str, dims))


def block_panels(graph, picture):
    """(block graph, its panel) for each custom op, checking there is one panel per custom op."""
    kernel, *panels = picture.rows[0]
    assert kernel.title == "kernel graph" and len(panels) == len(graph.blocks)
    return list(zip(graph.blocks, panels))


@pytest.mark.parametrize("name", wl.names())
def test_every_fused_workload_draws_with_its_maps_and_tiles(name, tmp_path):
    g = wl.get(name).fused(small(name))
    check_png(viz.draw_kernel_graph(g, tmp_path / f"{name}.png", title=name))
    pic = viz.describe_kernel_graph(g, name)
    kernel = pic.rows[0][0]
    for t in g.inputs:
        assert (t.name, f"{shape(t.shape)} fp16") in [b.lines for b in kernel.boxes]
    assert [b.lines[1] for b in kernel.boxes if b.kind == "output"] == [t.name for t in g.output_tensors]
    for b, panel in block_panels(g, pic):
        assert f"loop {b.loop}" in panel.title and f"x={b.grid[0]}" in panel.title
        assert len(panel.boxes) == len(b.nodes)
        for node, box in zip(b.nodes, panel.boxes):
            text = "\n".join(box.lines)
            if node.op == "loader":
                a = node.attrs
                assert box.kind == "loader" and box.loop
                assert all(f"{p}:{d}" in box.lines[1] for p, d in a["imap"].items())
                assert f"fmap {a['fmap']}" in box.lines[1] and f"tile {shape(node.outputs[0].shape)}" in text
            elif node.op == "saver":
                tile = b.nodes[node.inputs[0][0]].outputs[0].shape
                assert box.kind == "saver" and not box.loop
                assert all(f"{p}:{d}" in box.lines[1] for p, d in node.attrs["omap"].items())
                assert f"tile {shape(tile)} → {shape(node.outputs[0].shape)}" in text
            else:
                assert box.kind == ("accum" if node.op == "accum" else "op")
                assert box.loop == (b.phase((b.nodes.index(node), 0)) in ("loop", "invariant"))
                assert f"tile {shape(node.outputs[0].shape)}" in text


@pytest.mark.parametrize("name", ["attention", "qk_attention"])
def test_the_safe_online_form_draws_its_running_max(name, tmp_path):
    """The safe forms' loop-carried running max has a colour and a legend entry of its own (it once had
    none, and `prism tune` failed writing graph.png for the tuner's safe split-KV choice)."""
    g = wl.get(name).fused(SMALL_ATT, online=True)
    check_png(viz.draw_kernel_graph(g, tmp_path / f"{name}.png", title=name))
    pic = viz.describe_kernel_graph(g, name)
    boxes = [box for _, panel in block_panels(g, pic) for box in panel.boxes]
    running = [box for box in boxes if box.kind == "running_max"]
    assert len(running) == 1 and running[0].loop
    assert any("running max" in label for *_, label in viz._legend(pic))


def test_rmsnorm_labels_read_as_the_maps_are_written():
    g = wl.get("rmsnorm").fused({"n": 8, "d": 1024})
    [(_, panel)] = block_panels(g, viz.describe_kernel_graph(g))
    boxes = {b.lines[0]: b.lines[1:] for b in panel.boxes}
    assert panel.title == "kernel 0: grid x=16 · loop 16"
    assert boxes["t0 = load X"] == ("imap {} · fmap 1", "tile 8 × 64")
    assert boxes["t1 = load W"] == ("imap {x:1} · fmap 0", "tile 64 × 64")
    assert boxes["t3 = accum(t2)"] == ("tile 8 × 64",)
    assert boxes["save t10 → out0"] == ("omap {x:1}", "tile 8 × 64 → 8 × 1024")


def evaluate(label, sizes):
    """A symbolic tile like '4/d_x × 64/(d_y·d_i) × 1' at concrete sizes, written like a concrete tile."""
    def dim(d):
        m = re.fullmatch(r"(\d+)(?:/\(?([d_xyzi·]+)\)?)?", d)
        assert m, d
        return str(int(m[1]) // math.prod(sizes[s] for s in (m[2] or "").split("·") if s))
    return " × ".join(dim(d) for d in label.split(" × "))


def test_symbolic_tiles_are_symbols_and_evaluate_to_the_concrete_tiles(searched, tmp_path):
    _, _, result = searched("swiglu")
    names = result.names
    for i, sg in enumerate(result.graphs):
        pic = viz.describe_symbolic_graph(sg, names)
        block = pic.rows[0][1]   # its first kernel (a partials form's second is drawn at every d_ = 1)
        loop = 2 if sg.mapping.loop else 1
        assert ("loop d_i" in block.title) == bool(sg.mapping.loop)
        assert ("loop none" in block.title) == (not sg.mapping.loop)
        tiles = [line[5:] for b in block.boxes for line in b.lines if line.startswith("tile ")]
        assert any("d_" in t for t in tiles)
        concrete = result.instantiate(i, grid=(2,) * sg.n_grid, loop=loop)
        (_, cblock), *_ = block_panels(concrete, viz.describe_kernel_graph(concrete))
        sizes = {"d_x": 2, "d_y": 2, "d_z": 2, "d_i": loop}
        for sbox, cbox in zip(block.boxes, cblock.boxes):
            assert sbox.lines[:-1] == cbox.lines[:-1] and sbox.kind == cbox.kind and sbox.loop == cbox.loop
            want, got = cbox.lines[-1].removeprefix("tile "), sbox.lines[-1].removeprefix("tile ")
            if sbox.kind == "saver":  # the full shape after the arrow is concrete in both
                (got, full), (want, cfull) = got.split(" → "), want.split(" → ")
                assert full == cfull or sg.mapping.partials   # partials lie side by side: as wide as the splits
            assert evaluate(got, sizes) == want
    check_png(viz.draw_result(result, tmp_path / "one.png", index=len(result) - 1))
    check_png(viz.draw_symbolic_graph(result.graphs[0], names, tmp_path / "sg.png", title="first"))


def test_partials_and_tail_forms_draw_their_second_kernel(tmp_path):
    """A partials form's first kernel saves each split's maxima (nodes after the sGraph's ops: drawn with their
    operand's symbolic tile); its second kernel is no sGraph op, so it is drawn at every d = 1, and a tail form
    says which kernel runs it."""
    from prism.ir.kinds import MAX
    from prism.search import search

    w = wl.get("attention")
    result = search(w.build(w.small_config), workers=1, max_block_ops=12, max_grid=2)   # room for safe split forms
    maxima = 0
    for kind in ("partials", "tail"):
        forms = [i for i, g in enumerate(result.graphs) if g.mapping.partials and g.mapping.tail == (kind == "tail")]
        assert forms
        for i in forms:
            pic = viz.describe_symbolic_graph(result.graphs[i], result.names)
            kernel, first, second = pic.rows[0]
            assert "d_" in first.title and "tiles at every d_ = 1" in second.title
            assert ("run by kernel 0's last block per row" in second.title) == (kind == "tail")
            assert any("(the tail of kernel 0)" in line for b in kernel.boxes for line in b.lines) == (kind == "tail")
            maxima += any(n.op == MAX.name for n in result.instantiate(i).blocks[0].nodes)
        check_png(viz.draw_result(result, tmp_path / f"{kind}.png", index=forms[0]))
    assert maxima, "a safe split form (its maxima saved after the sGraph's ops) is among them"


def test_a_result_draws_as_a_contact_sheet(searched, tmp_path):
    _, _, result = searched("swiglu")
    check_png(viz.draw_result(result, str(tmp_path / "sheet.png")))


def test_bad_paths_indices_and_objects_raise_input_error(searched, tmp_path):
    _, _, result = searched("swiglu")
    g = wl.get("swiglu").fused(SMALL)
    with pytest.raises(InputError, match="does not exist"):
        viz.draw_kernel_graph(g, tmp_path / "missing" / "g.png")
    with pytest.raises(InputError, match="file path"):
        viz.draw_kernel_graph(g, 42)
    for index in (len(result), -1, "0"):
        with pytest.raises(InputError, match="out of range"):
            viz.draw_result(result, tmp_path / "r.png", index=index)
    with pytest.raises(InputError, match="expected a KernelGraph"):
        viz.draw_kernel_graph(result, tmp_path / "r.png")
    with pytest.raises(InputError, match="expected a SymbolicGraph"):
        viz.draw_symbolic_graph(g, ["X"], tmp_path / "r.png")
    with pytest.raises(InputError, match="expected a SearchResult"):
        viz.draw_result(g, tmp_path / "r.png")
    with pytest.raises(InputError, match="input"):
        viz.draw_symbolic_graph(result.graphs[0], ["X"], tmp_path / "r.png")
    assert not list(tmp_path.iterdir())
