"""The `prism` command line: check, optimize, search, tune, show, bench.

Every command prints a human summary (or, with --json, one JSON document on stdout), shows progress
bars on stderr for the long phases, and ends with a meaningful exit code (`EXIT_*`). Errors end as
one line on stderr, never a traceback: a `PrismError` or an unusable file is the user's to fix
(exit 2); anything else is a bug in Prism and says so (exit 3; PRISM_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from prism.errors import InputError, PrismError

if TYPE_CHECKING:
    from prism.options import SearchOptions

__all__ = ["main", "load_program", "Program"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
WORKLOAD_NAMES = "rmsnorm, rmsnorm_mlp, swiglu, attention, qk_attention, lora, rmsnorm_linear, gqa, ntrans, moe"
"""prism.workloads.names(), spelled out: `prism --help` imports no torch (tests/cli keep the two equal)."""

PROGRAM_TEXT = f"""\
PROGRAM is a workload name ({WORKLOAD_NAMES}) or a
Python file that defines a prism.KernelGraph at module level (one, or one named `program`)."""

OUTPUT_TEXT = """\
output: results go to prism-out/NAME (a workload at its first config, or a program file's name) or
prism-out/NAME-K1V1-K2V2 at another config (rmsnorm --config 1: prism-out/rmsnorm-n8-d1024); --out
chooses. Files are written whole and together once the work is done: a command stopped by Ctrl-C or
an error leaves none, and no empty folder."""

CACHE_TEXT = """\
cache: tuned kernels and search results are kept and reused (`prism cache` says where and how big,
`prism cache clear` empties it and deletes the generated modules; --no-cache ignores it)."""

EXIT_TEXT = """\
exit codes: 0 done; 1 the work ran but its result failed (a numeric mismatch, no verified graph);
2 bad invocation or input; 3 an internal error (a bug: please report it); 130 interrupted."""

EPILOG = "\n\n".join((PROGRAM_TEXT, OUTPUT_TEXT, CACHE_TEXT, EXIT_TEXT)) + "\n"
"""`prism --help`'s notes; each command's help has the ones that concern it, and the exit codes."""


# -- programs: a workload name or a file ------------------------------------------------------------

@dataclass
class Program:
    """What a command works on: a name for files and titles, the kernel graph, and (for a workload)
    its torch reference, which the final numeric check compares against."""

    name: str
    graph: Any
    reference: Callable[..., Any] | None = None
    config: dict[str, int] | None = None
    folder: str = ""
    """Its results' default folder under prism-out/ (default: the name)."""

    def __post_init__(self) -> None:
        self.folder = self.folder or self.name


def load_program(spec: str, config: str | None = None) -> Program:
    """A workload at a config (an index into its configs, or `k=v,...`), or a FILE.py's KernelGraph."""
    from prism import workloads
    from prism.ir import KernelGraph

    if spec.endswith(".py") or os.sep in spec:
        if config is not None:
            raise InputError(f"--config applies to workloads, not to a program file ({spec})")
        return Program(Path(spec).stem, _graph_from_file(Path(spec), KernelGraph))
    w = workloads.get(spec)
    cfg = w.check_config(_parse_config(w, config))
    folder = spec if cfg == w.configs[0] else spec + "-" + "-".join(f"{k}{v}" for k, v in cfg.items())
    return Program(spec, w.build(cfg), w.reference, cfg, folder)


def _parse_config(w: Any, text: str | None) -> dict[str, int]:
    if text is None:
        return w.configs[0]
    if text.isdigit():
        if int(text) >= len(w.configs):
            listed = "; ".join(f"{i}: {','.join(f'{k}={v}' for k, v in c.items())}" for i, c in enumerate(w.configs))
            raise InputError(f"--config {text}: {w.name} has configs {listed}")
        return w.configs[int(text)]
    cfg: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not value.strip().lstrip("-").isdigit():
            raise InputError(f"--config {text!r}: expected an index or k=v pairs like "
                             f"{','.join(f'{k}={v}' for k, v in w.configs[0].items())}")
        cfg[key.strip()] = int(value)
    return cfg


def _graph_from_file(path: Path, kernel_graph: type) -> Any:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        scope = runpy.run_path(str(path), run_name="__prism_program__")
    except PrismError as e:
        raise InputError(f"{path}: building the program failed: {e}") from None
    except SyntaxError as e:
        raise InputError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except (Exception, SystemExit) as e:  # a file's sys.exit(n) must not end prism silently with n
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
        where = f":{lines[-1]}" if lines else ""
        what = f"called sys.exit({e.code!r})" if isinstance(e, SystemExit) else f"raised {type(e).__name__}: {e}"
        raise InputError(f"{path}{where}: running it {what}") from None
    graphs = {k: v for k, v in scope.items() if isinstance(v, kernel_graph) and not k.startswith("_")}
    if len(graphs) != 1 and "program" not in graphs:
        found = ", ".join(sorted(graphs)) or "none"
        raise InputError(f"{path}: define one module-level prism.KernelGraph (or one named `program`); "
                         f"found {found}")
    name, graph = ("program", graphs["program"]) if "program" in graphs else next(iter(graphs.items()))
    try:
        return graph.check()
    except PrismError as e:
        raise InputError(f"{path}: {name}: {e}") from None


# -- output helpers -----------------------------------------------------------------------------

def _say(args: argparse.Namespace, text: str = "") -> None:
    """Human output: stdout unless --json asked for a machine-readable document there."""
    if not args.json:
        print(text, flush=True)


def _emit_json(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(doc, indent=1, default=str))


def _bars(args: argparse.Namespace):
    from prism.progress import Bars

    return Bars(enabled=not args.quiet)


def _out_dir(args: argparse.Namespace, prog: Program) -> Path:
    """The output folder, checked to be writable before any work; made only when the results are written
    (`prism.outputs`), never empty."""
    from prism.outputs import check_writable

    out = Path(args.out) if args.out else Path("prism-out") / prog.folder
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    check_writable(out)
    return out


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _shapes(graph: Any) -> str:
    return ", ".join(f"{t.name}{list(t.shape)}" for t in graph.inputs) + f" {graph.inputs[0].dtype}"


# -- check ---------------------------------------------------------------------------------------

def _check(args: argparse.Namespace) -> int:
    """Run each workload's hand-written fused µGraph in the reference executor; compare with torch."""
    import torch

    from prism import interp, workloads

    names = args.workloads or workloads.names()
    chosen = [(n, workloads.get(n)) for n in names]  # unknown names fail before any output
    for _, w in chosen:
        _parse_config(w, args.config)
    row = "{:<14} {:<26} {:>7} {:>10} {:>10}  {}".format
    _say(args, row("workload", "config", "kernels", "max |err|", "executor s", "result"))
    docs, failed = [], 0
    for name, w in chosen:
        cfg = w.check_config(_parse_config(w, args.config))
        inputs = w.inputs(cfg, seed=0, dtype=torch.float32)
        fused = w.fused(cfg)
        start = time.perf_counter()
        (got,) = interp.run(fused, inputs)
        seconds = time.perf_counter() - start
        want = w.reference(*inputs)
        err = (got - want).abs().max().item()
        ok = torch.allclose(got, want, rtol=1e-4, atol=1e-4)
        failed += not ok
        kernels = sum(n.op == "custom" for n in fused.nodes)
        docs.append({"workload": name, "config": cfg, "kernels": kernels, "max_error": err, "seconds": seconds,
                     "ok": ok})
        _say(args, row(name, ",".join(f"{k}={v}" for k, v in cfg.items()), kernels, f"{err:.2e}", f"{seconds:.2f}",
                       "ok" if ok else "MISMATCH"))
    _say(args, f"{len(names) - failed} of {len(names)} fused kernels match torch (float32, rtol=atol=1e-4)")
    _emit_json(args, {"command": "check", "results": docs, "ok": not failed})
    return EXIT_FAILED if failed else EXIT_OK


# -- search --------------------------------------------------------------------------------------

def _search_options(args: argparse.Namespace) -> SearchOptions:
    """The search's options from the command line's flags (those a command has; the rest keep their defaults)."""
    from prism.options import SearchOptions

    given = {"time_limit": getattr(args, "time_limit", None), "workers": args.workers,
             "max_block_ops": getattr(args, "max_block_ops", None), "modes": getattr(args, "modes", None) or None}
    return SearchOptions.of({k: v for k, v in given.items() if v is not None} | _backend(args), "prism")


def _backend(args: argparse.Namespace) -> dict[str, Any]:
    """--ray [ADDRESS] as the search's and superoptimize's backend arguments."""
    return {} if getattr(args, "ray", None) is None else {"backend": "ray", "ray_address": args.ray or None}


def _search_summary(result: Any) -> dict[str, Any]:
    s = result.stats
    return {"graphs": len(result), "seconds": s["seconds"], "timed_out": s["timed_out"],
            "structures": s["generate"]["structures"], "states": s["generate"].get("states", 0),
            "mappings": s["instantiate"]["mappings"], "verified": s["verify"]["verified"],
            "prefiltered": s["prefilter"]["rejected"], "rejected": s["verify"]["rejected"],
            "unsound": s["cross_check"]["unsound"], "workers": s["workers"]}


def _search_lines(result: Any) -> list[str]:
    s = _search_summary(result)
    return [f"search     {s['graphs']} verified sGraphs from {s['structures']} structures and {s['mappings']} "
            f"mappings in {s['seconds']:.1f} s on {s['workers']} worker(s)"
            + (" (stopped at the time limit)" if s["timed_out"] else ""),
            f"           {s['prefiltered']} failed a numeric prefilter, the verifier rejected {s['rejected']}; "
            f"every verified one cross-checked numerically: {s['unsound']} unsound"]


def _search(args: argparse.Namespace) -> int:
    from prism.outputs import check_writable
    from prism.search import search

    prog = load_program(args.program, args.config)
    out = Path(args.out) if args.out else Path("prism-out") / prog.folder / "search.json"
    if out.is_dir():
        raise InputError(f"--out {out}: is a directory; give a file name such as {out / 'search.json'}")
    check_writable(out.parent)
    _say(args, f"{prog.name}: {_shapes(prog.graph)}")
    with _bars(args) as bars:
        result = search(prog.graph, _search_options(args), progress=bars)
    result.save(out)
    rows = [["#", "grid", "loop", "block ops", "outputs", "kernel ops"]]
    for i, g in enumerate(result.graphs):
        rows.append([str(i), str(g.n_grid), "yes" if g.mapping.loop else "no", str(len(g.structure.graph.ops)),
                     str(len(g.structure.outputs)), str(len(g.structure.kernel_ops))])
    if len(result):
        _say(args, _table(rows))
    for line in _search_lines(result):
        _say(args, line)
    _say(args, f"saved      {out}  (draw one: prism show {out} --index 0)")
    _emit_json(args, {"command": "search", "program": prog.name, "config": prog.config, "result": str(out)}
               | _search_summary(result))
    return EXIT_OK if len(result) else EXIT_FAILED


# -- optimize and tune ---------------------------------------------------------------------------

def _tune_and_write(args: argparse.Namespace, prog: Program, out: Path, given: Any = None) -> int:
    """superoptimize (tuning `given`, the search result `prism tune` read, or searching unless the result
    cache holds the answer), check the chosen kernel numerically, write its files and the summary."""
    from prism.runtime import superoptimize

    with _bars(args) as bars, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "prism: no GPU", RuntimeWarning)  # the summary states it instead
        opt = superoptimize(prog.graph, search_result=given, budget=args.budget, time_budget=args.time_budget,
                            workers=args.workers,
                            cache=not args.no_cache, search_options=_search_options(args), progress=bars,
                            **_backend(args))
        result = given if given is not None else _searched(args, prog, opt, bars)
    check = opt.check(prog.reference)
    if check["ok"] and not args.no_torch:
        opt.against_torch(prog.reference)
    read_here = given is not None and (out / "search.json").resolve() == Path(args.result).resolve()
    files = _write_outputs(out, prog, opt, None if given is not None else result, keep_search=read_here)
    rep = opt.report
    best, base = rep.best, next((e for e in rep.entries if e.origin == "baseline"), None)
    if not args.json:
        print(rep.table())
        print()
        print(f"method     {rep.method_text}" + (" (from the result cache)" if rep.cached else ""))
        if best is not None:
            speed = ""
            key = "measured_us" if best.measured_us is not None else "estimate_us"
            if base is not None and getattr(base, key) and getattr(best, key):
                speed = f" ({getattr(base, key) / getattr(best, key):.2f}x the unfused program)"
            print(f"chosen     {best.label}: {rep.reason}{speed}")
        if rep.space:
            print(f"space      {rep.space_text()}")
        for k, line in enumerate(rep.forms_text()):
            print(("forms      " if k == 0 else " " * 11) + line)
        if rep.seconds:
            print(f"tuning     {rep.seconds_text}" + (" when it was tuned (this run read the result cache)"
                                                        if rep.cached else ""))
        print(f"runs as    {rep.execution}")
        print(f"check      {check['text']}")
        if rep.torch:
            print(f"torch      {rep.torch_text}")
        print(f"files      {out}/: " + ", ".join(sorted(p.name for p in files.values())))
        print(f"picture    {files['picture']}")
        for note in rep.notes:
            print(f"note       {note}")
    summary = {"search": _search_summary(result)} if args.command == "optimize" and result is not None else {}
    _emit_json(args, {"command": args.command, "program": prog.name, "config": prog.config,
                      "shapes": _shapes(prog.graph), "report": rep.to_json(), "check": check,
                      "files": {k: str(v) for k, v in files.items()}} | summary)
    return EXIT_OK if check["ok"] else EXIT_FAILED


def _write_outputs(out: Path, prog: Program, opt: Any, searched: Any = None,
                   keep_search: bool = False) -> dict[str, Path]:
    """The chosen kernel's files and `searched`, the search result it was tuned from, all at once; that result
    is saved with this program (its graphs hold at every size), so that `prism tune OUT/search.json` tunes it
    again. An older search.json in `out` goes, unless `keep_search` (it is the one `prism tune` read): it did
    not make this kernel."""
    from prism.outputs import write_files
    from prism.search import SearchResult
    from prism.viz import draw_kernel_graph

    title = f"{prog.name}: {opt.report.best.label if opt.report.best else 'chosen'}"
    writers: dict[str, Callable[[Path], Any]] = {
        "kernel.py": lambda p: p.write_text(opt.triton_source),
        "graph.json": lambda p: p.write_text(json.dumps(opt.graph.to_json(), indent=1)),
        "report.json": lambda p: p.write_text(json.dumps(opt.report.to_json(), indent=1)),
        "graph.png": lambda p: draw_kernel_graph(opt.graph, p, title=title),
    }
    if searched is not None:
        mine = SearchResult(prog.graph, searched.graphs, searched.stats, searched.build)
        writers["search.json"] = lambda p: p.write_text(json.dumps(mine.to_json(), indent=1))
    paths = write_files(out, writers, remove=[] if searched is not None or keep_search else ["search.json"])
    return {key: paths[name] for key, name in (("kernel", "kernel.py"), ("graph", "graph.json"),
                                               ("report", "report.json"), ("picture", "graph.png"),
                                               ("search", "search.json")) if name in paths}


def _searched(args: argparse.Namespace, prog: Program, opt: Any, bars: Any) -> Any:
    """The search result `prism optimize` tuned, for its search.json (None for a program with several
    outputs: each was searched on its own), after the summary's lines on where it came from. A tuned
    result from the result cache comes without one: then it is read from that cache, or searched again."""
    from prism.runtime.pipeline import cached_search

    parts = opt.report.search.get("parts")
    if parts is not None:
        _say(args, "search     per output: " + "; ".join(
            f"{p.get('name', f'output {k}')}: {p.get('graphs', '?')} verified sGraphs ({p.get('source', 'result cache')})"
            for k, p in enumerate(parts)))
        return None
    result = opt.search_result
    if result is None:
        result = cached_search(prog.graph, _search_options(args), progress=bars)
        if result.stats.get("source") == "search cache":
            _say(args, f"search     skipped: the tuned result came from the result cache, its {len(result)} verified "
                 "sGraphs too (--no-cache searches again)")
            return result
    for line in _search_lines(result):
        _say(args, line)
    return result


def _optimize(args: argparse.Namespace) -> int:
    prog = load_program(args.program, args.config)
    out = _out_dir(args, prog)
    _say(args, f"{prog.name}: {_shapes(prog.graph)}")
    return _tune_and_write(args, prog, out)


def _tune(args: argparse.Namespace) -> int:
    from prism.runtime.pipeline import check_search_result
    from prism.search import SearchResult

    result = _load_json_file(args.result, SearchResult.from_json)
    prog = load_program(args.program, args.config) if args.program else Program(
        _result_name(Path(args.result)), result.program)
    check_search_result(result, prog.graph, args.result)
    out = _out_dir(args, prog)
    _say(args, f"{prog.name}: {_shapes(prog.graph)}; {len(result)} sGraphs from {args.result}")
    return _tune_and_write(args, prog, out, result)


def _result_name(path: Path) -> str:
    """The name of a saved search result's program, for its results' folder: the file's, or for the
    search.json of `prism optimize` or `prism search` its folder's (prism-out/rmsnorm/search.json: rmsnorm)."""
    if path.stem != "search":
        return path.stem
    return path.resolve().parent.name or path.stem


def _load_json_file(path: str, loader: Callable[[Any], Any]) -> Any:
    """`loader` of the JSON document in the file at `path`; whatever is wrong with it names the file."""
    if not Path(path).is_file():
        raise InputError(f"{path}: no such file")
    try:
        return loader(json.loads(Path(path).read_text()))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    except PrismError as e:
        raise InputError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: not a file this command reads ({type(e).__name__}: {e})") from None


# -- show ------------------------------------------------------------------------------------------

def _show(args: argparse.Namespace) -> int:
    """Draw a saved search result (one sGraph), a saved kernel graph, or an optimize output folder."""
    from prism.ir import KernelGraph, printer
    from prism.outputs import write_files
    from prism.search import SearchResult
    from prism.viz import draw_kernel_graph, draw_result, draw_symbolic_graph

    path = Path(args.path)
    if path.is_dir():
        path = path / "graph.json"
    doc = _load_json_file(str(path), lambda d: d)
    if isinstance(doc, dict) and doc.get("format") == "prism.search_result":
        result = _load_json_file(str(path), SearchResult.from_json)
        if not len(result):
            raise InputError(f"{path}: the search result holds no graphs")
        if args.sheet:
            png = Path(args.out) if args.out else path.with_name(f"{path.stem}-sheet.png")
            text = "\n".join(f"#{i}: " + result.describe(i).splitlines()[0] for i in range(len(result)))
            draw = partial(draw_result, result)
        else:
            if not 0 <= args.index < len(result):
                raise InputError(f"--index {args.index}: {path} holds graphs 0..{len(result) - 1}")
            png = Path(args.out) if args.out else path.with_name(f"{path.stem}-{args.index}.png")
            text = result.describe(args.index)
            draw = partial(draw_symbolic_graph, result.graphs[args.index], result.names,
                           title=f"{path.stem} #{args.index} of {len(result)} (sizes symbolic)")
    else:
        graph = _load_json_file(str(path), KernelGraph.from_json)
        png = Path(args.out) if args.out else path.with_suffix(".png")
        text = printer.format_graph(graph)
        draw = partial(draw_kernel_graph, graph, title=path.parent.name if path.name == "graph.json" else path.stem)
    write_files(png.parent, {png.name: draw})
    _say(args, text)
    _say(args, f"picture    {png}")
    _emit_json(args, {"command": "show", "path": str(path), "picture": str(png), "text": text})
    return EXIT_OK


# -- bench -----------------------------------------------------------------------------------------

def _bench(args: argparse.Namespace) -> int:
    from prism import bench
    from prism.outputs import check_writable

    check_writable(args.out)

    if args.report_only:
        files = bench.write_report(bench.load_results(Path(args.out) / "results.json"), args.out)
        res = {"files": files, "records": None}
    else:
        res = _bench_run(args, bench)
    report = Path(args.out) / "report.md"
    if report.is_file():
        _say(args, report.read_text())
    _say(args, "files      " + ", ".join(str(p) for p in res["files"]))
    _emit_json(args, {"command": "bench", "out": args.out, "files": [str(p) for p in res["files"]],
                      "records": res["records"]})
    return EXIT_OK


def _bench_run(args: argparse.Namespace, bench: Any) -> dict[str, Any]:
    names = args.workloads.split(",") if args.workloads else None
    quick = args.quick
    return bench.run(Path(args.out), workloads=names, mirage=not (quick or args.no_mirage),
                     mirage_limit=args.mirage_limit, ablation=not (quick or args.no_ablation),
                     ablation_limit=args.ablation_limit, time_limit=args.time_limit,
                     generality=not args.no_generality, gpu=args.gpu,
                     workers=args.workers, command=" ".join(["prism", *args.argv]),
                     progress=None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True)))


# -- cache -----------------------------------------------------------------------------------------

def _cache(args: argparse.Namespace) -> int:
    """Where the result cache and the generated modules are and how big; `clear` empties both. Reading them never
    creates them."""
    from prism.codegen.load import cache_dir, generated_files
    from prism.runtime.cache import ResultCache

    store = ResultCache()
    cleared = store.clear() if args.action == "clear" and store.path.exists() else 0
    removed = 0
    if args.action == "clear":
        for path in generated_files():
            with contextlib.suppress(FileNotFoundError):   # another process's clear got there first
                path.unlink()
                removed += 1
    entries = len(store) if store.path.exists() else 0
    size = sum(p.stat().st_size for p in store.files())
    modules = generated_files()
    module_bytes = sum(p.stat().st_size for p in modules)
    if args.action == "clear":
        _say(args, f"cleared    {cleared} entries, {removed} generated module(s)")
    _say(args, f"results    {store.path}: {entries} entries (tuned kernels and search results), {size / 1e6:.1f} MB")
    _say(args, f"modules    {cache_dir()}: {len(modules)} generated Triton module(s) and launcher(s), "
         f"{module_bytes / 1e6:.1f} MB, named by a hash of their source, so never stale")
    _say(args, "           $PRISM_CACHE_DIR moves both; `prism optimize --no-cache` ignores the results")
    _emit_json(args, {"command": "cache", "path": str(store.path), "entries": entries, "bytes": size,
                      "cleared": cleared, "modules": str(cache_dir()), "module_files": len(modules),
                      "module_bytes": module_bytes, "modules_removed": removed})
    return EXIT_OK


# -- the parser --------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    from prism.provenance import VERSION

    p = _Parser(prog="prism", description="Prism: a symbolic superoptimizer for tensor programs. "
                                "It searches fused GPU kernels, proves each equal to the program for all "
                                "parallel sizes, then tunes sizes and emits Triton.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"prism {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, *notes: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help, epilog="\n\n".join((*notes, EXIT_TEXT)) + "\n",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("--json", action="store_true", help="print one JSON document on stdout instead of text")
        c.add_argument("--quiet", "-q", action="store_true", help="no progress bars on stderr")
        return c

    def program(c: argparse.ArgumentParser, optional: bool = False) -> None:
        c.add_argument("program", metavar="PROGRAM", nargs="?" if optional else None,
                       help="a workload name or a FILE.py defining a KernelGraph"
                       + (" (default: the program the result was searched for)" if optional else ""))
        c.add_argument("--config", help="workload config: an index (default 0) or k=v pairs, e.g. n=8,d=1024")

    def searching(c: argparse.ArgumentParser) -> None:
        c.add_argument("--time-limit", type=_positive(float), default=3600.0,
                       help="search seconds (default %(default)s)")
        c.add_argument("--workers", type=_positive(int), default=None, help="worker processes (default: all cores)")
        c.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="run the search's checks (and the tuner's compiles) as Ray tasks on the cluster at "
                       "ADDRESS, or on a local Ray "
                       "instance (--workers CPUs) without one; needs pip install 'prism-superopt[ray]'")
        c.add_argument("--max-block-ops", type=_positive(int), default=None,
                       help="block ops per fused kernel, loaders included (default: the search's, from the "
                       "program's size)")

    def tuning(c: argparse.ArgumentParser) -> None:
        c.add_argument("--budget", type=_positive(int), default=16,
                       help="candidates compiled (and timed on a GPU)")
        c.add_argument("--time-budget", type=_positive(float), default=None, metavar="SECONDS",
                       help="seconds of tuning after which no more candidates are refined (default: no limit; "
                       "the first batch is always tried whole)")
        c.add_argument("--no-cache", action="store_true", help="ignore Prism's result cache")
        c.add_argument("--no-torch", action="store_true",
                       help="on a GPU, do not time the program as torch runs it (eager and Inductor) beside the "
                       "chosen kernels")
        c.add_argument("--out", help="output folder (default prism-out/NAME, see below)")

    c = command("check", "run each workload's hand-written fused kernel in the reference executor and "
                "compare it with torch (the default command)")
    c.add_argument("workloads", nargs="*", help="workload names (default: all)")
    c.add_argument("--config", help="config of each workload: an index (default 0) or k=v pairs")
    c.set_defaults(run=_check)

    c = command("optimize", "search verified fused kernels for a program, tune their sizes, emit Triton, "
                "check the result numerically; writes kernel.py, graph.json, graph.png, report.json, search.json",
                PROGRAM_TEXT, OUTPUT_TEXT, CACHE_TEXT)
    program(c)
    searching(c)
    tuning(c)
    c.set_defaults(run=_optimize)

    c = command("search", "search verified sGraphs (structure and maps; sizes stay symbolic) and save them",
                PROGRAM_TEXT, OUTPUT_TEXT)
    program(c)
    searching(c)
    c.add_argument("--modes", type=_modes, default="SSS", help="imap/fmap/omap symbolic (S) or concrete (C), "
                   "or 'mirage' (the concrete baseline); default SSS")
    c.add_argument("--out", help="result file (default prism-out/NAME/search.json, see below)")
    c.set_defaults(run=_search)

    c = command("tune", "choose grid sizes and loop ranges for a saved search result at a program's shapes, "
                "emit Triton, check numerically", PROGRAM_TEXT, OUTPUT_TEXT, CACHE_TEXT)
    c.add_argument("result", metavar="RESULT", help="a search result saved by `prism search`")
    program(c, optional=True)
    c.add_argument("--workers", type=_positive(int), default=None, help="compile processes (default: all cores)")
    tuning(c)
    c.set_defaults(run=_tune)

    c = command("show", "draw a saved result as a PNG and print it as text: a search result (one sGraph, "
                "sizes symbolic), a kernel graph JSON, or an `optimize` output folder")
    c.add_argument("path", metavar="RESULT", help="search.json, graph.json, or an optimize output folder")
    c.add_argument("--index", type=int, default=0, help="which sGraph of a search result (default 0)")
    c.add_argument("--sheet", action="store_true", help="a search result's first 12 sGraphs on one sheet")
    c.add_argument("--out", help="PNG path (default: beside RESULT)")
    c.set_defaults(run=_show)

    c = command("bench", "regenerate the paper's evaluation on this machine: search time, unique graphs, the "
                "ablation, and kernel times on a GPU; markdown tables beside the paper's numbers, PNG plots; and "
                "the generality table: every program's search, chosen kernel and numeric check")
    c.add_argument("--out", default="prism-bench", help="output folder; a rerun resumes (default %(default)s)")
    c.add_argument("--workloads", default="", help="comma-separated names (default: all)")
    c.add_argument("--quick", action="store_true", help="symbolic searches and the generality table only, no "
                   "Mirage-style baseline or ablation (minutes, not hours)")
    c.add_argument("--no-generality", action="store_true", help="skip the generality table's tuning and checks")
    c.add_argument("--report-only", action="store_true", help="rewrite report.md and the plots from OUT/results.json; "
                   "measure nothing")
    c.add_argument("--no-mirage", action="store_true", help="skip the Mirage-style concrete baseline")
    c.add_argument("--no-ablation", action="store_true", help="skip the imap/fmap/omap ablation")
    c.add_argument("--mirage-limit", type=_positive(float), default=300.0, help="seconds per concrete search")
    c.add_argument("--ablation-limit", type=_positive(float), default=1800.0, help="seconds per ablation search")
    c.add_argument("--time-limit", type=_positive(float), default=3600.0, help="seconds per symbolic search")
    c.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=None,
                   help="kernel-time benchmark (default: when torch sees a GPU)")
    c.add_argument("--workers", type=_positive(int), default=None, help="worker processes (default: all cores)")
    c.set_defaults(run=_bench)

    c = command("cache", "say where Prism's result cache is (tuned kernels and search results, reused by "
                "optimize and tune) and how big it is, or clear it", CACHE_TEXT)
    c.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                   help="info: where and how big (the default); clear: delete every entry and generated module")
    c.set_defaults(run=_cache)
    p.commands = list(sub.choices)
    return p


def _positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a positive int or float (a zero or negative limit would do nothing)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {'whole ' if kind is int else ''}number, "
                                             f"got {text!r}")
        return value
    return parse


def _modes(text: str) -> str:
    """An argparse type: a search mode, checked by the search's own parser."""
    from prism.search.concrete import Modes

    try:
        return Modes.parse(text).code
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("modes: ")) from None


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (and exit 2), like every other error of the command line."""

    commands: list[str]
    """The subcommands' names (set by _parser)."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"prism: error: {message} (see {self.prog} --help)\n")


class _Interrupts:
    """Whether a Ctrl-C has arrived in this process. A SIGINT that lands inside an extension module's import (numpy's,
    under torch's) can surface not as KeyboardInterrupt but as an ImportError then or later ("cannot load module
    more than once per process"); a run that fails so after a Ctrl-C was interrupted, and says so, not a bug.

    Library code can also swallow the KeyboardInterrupt itself (torch goes on without numpy when numpy's import
    fails), and the run would go on for as long as its work takes. So the process's entry point arms a backstop
    with the first Ctrl-C: if the process has not ended `GRACE_S` later, it ends then, as interrupted."""

    seen = False
    GRACE_S = 1.0
    _said = threading.Lock()

    @classmethod
    def handler(cls, signum: int, frame: Any) -> None:
        if not cls.seen:
            backstop = threading.Timer(cls.GRACE_S, cls.end)
            backstop.daemon = True
            backstop.start()
        cls.seen = True
        signal.default_int_handler(signum, frame)

    @classmethod
    def end(cls) -> None:
        """Say "interrupted" (unless the main thread or the backstop has) and end the process."""
        if cls._said.acquire(blocking=False):
            print("prism: interrupted", file=sys.stderr)
        _end(EXIT_INTERRUPTED)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code. With no command (or a workload name first) it
    runs `check`, the main job. Ctrl-C at any point, imports included, ends it with one line; once it has,
    further Ctrl-C are ignored (this is the process's entry point), so that one pressed while the process
    exits (it waits for the worker pool's thread) prints no "Exception ignored" traceback. Nor does the exit
    itself: with its workers killed, Python 3.11's process pool can race its own wake-up pipe at exit (its
    manager thread closes the pipe while the exit handler writes to it: "Exception ignored ... Bad file
    descriptor", now and then after a Ctrl-C during a search's checks), so once interrupted the process drops
    such reports; it is ending on the user's word, and nothing they could say would change that.

    As the process's entry point (`argv` None) an interrupted run ends the process at once (`_end`): Python's
    exit joins every process pool's manager thread, and one whose workers were killed mid-task could wait on them
    for minutes (`prism tune`, about one Ctrl-C in 20). A finished run ends through `_finish`, and a Ctrl-C that
    lands while it does ends it at once too. The workers watch their parent and exit with it (prism.pool)."""
    if argv is None:
        signal.signal(signal.SIGINT, _Interrupts.handler)
    try:
        code = _main(list(sys.argv[1:] if argv is None else argv))
    except Exception:
        if not _Interrupts.seen:
            raise
        return _interrupted(argv)
    except KeyboardInterrupt:
        return _interrupted(argv)
    if _Interrupts.seen:    # its KeyboardInterrupt was swallowed on the way: what the run did is not to be trusted
        return _interrupted(argv)
    if argv is None:
        signal.signal(signal.SIGINT, lambda *_: _end(EXIT_INTERRUPTED))
        _finish(code)
    return code


def _interrupted(argv: Sequence[str] | None) -> int:
    """Say "interrupted" once; as the process's entry point, end it (`main`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.unraisablehook = lambda report: None
    if argv is None:
        _Interrupts.end()
    print("prism: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _finish(code: int) -> None:
    """End a finished run's process with `code` the way Python's exit would, with a Ctrl-C meanwhile still ending it
    as interrupted: first the threads an exit waits for (pools' manager threads), then the exit handlers (pools shut
    down, temporary folders removed, logging flushed), then `_end`. Python's own exit goes on to put SIGINT back to
    its default, and a Ctrl-C landing after that killed the process by the signal instead of exit 130."""
    import atexit

    threading._shutdown()        # type: ignore[attr-defined]  # what Python's exit does first
    atexit._run_exitfuncs()
    _end(code)


_ENDING = threading.Lock()
"""Held by the thread that ends the process (`_end`): the main thread and the interrupt's backstop timer can both
get there, and one's `os._exit` must not cut the other's unlinking of a semaphore short (unlinked but still
registered, the resource tracker prints "leaked semaphore objects" and "No such file" after the last line)."""

FINALIZER_WAIT_S = 0.5
"""How long `_end` waits for a multiprocessing finalizer another thread is running (a semaphore's unlink takes
microseconds; a finalizer that joins a queue's feeder thread could take longer, and is not waited for beyond this)."""


def _end(code: int) -> None:
    """End the process now with `code`: its output flushed, multiprocessing's semaphores unlinked (its resource
    tracker would otherwise print "leaked semaphore objects" after the parent's last line), nothing joined.

    Any thread can be running a multiprocessing finalizer when this is called: one whose last reference to a
    pool's queue it dropped, or whichever thread a garbage collection ran in. A semaphore's finalizer unlinks its
    name and then unregisters it from the tracker; `os._exit` between the two leaves the name registered and gone,
    and the tracker says so. So the collector is stopped (no new finalizers start), and the process exits only once
    no other thread is inside one (`_finalizing_elsewhere`, at most FINALIZER_WAIT_S), with this thread's own run
    of the remaining finalizers done. A second thread that gets here waits for the first to end the process
    (`_ENDING`)."""
    import gc
    import multiprocessing.util

    _ENDING.acquire()
    gc.disable()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    deadline = time.monotonic() + FINALIZER_WAIT_S
    while True:
        with contextlib.suppress(Exception):
            multiprocessing.util._run_finalizers(0)   # closes and unlinks (priority >= 0); a queue's join is -5
        if not _finalizing_elsewhere() or time.monotonic() > deadline:
            os._exit(code)
        time.sleep(0.001)


def _finalizing_elsewhere() -> bool:
    """Whether a thread other than this one is inside a multiprocessing finalizer (`_end`)."""
    import multiprocessing.util

    running = multiprocessing.util.Finalize.__call__.__code__
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        while ident != me and frame is not None:
            if frame.f_code is running:
                return True
            frame = frame.f_back
    return False


def _main(argv: list[str]) -> int:
    parser = _parser()  # before anything heavy is imported: `prism --help` imports no torch, no egglog
    if not argv or argv[0] in ("--config", "--json", "--quiet", "-q") or _is_workload(argv[0], parser):
        argv = ["check", *argv]
    args = parser.parse_args(argv)
    args.argv = argv
    if args.command is None:
        parser.error("no command given")
    try:
        return args.run(args)
    except PrismError as e:
        return _failed(args, EXIT_USAGE, "error", str(e))
    except BrokenPipeError:  # the reader went away (`prism ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        return _failed(args, EXIT_USAGE, "error", f"{e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}")
    except Exception as e:
        if _Interrupts.seen:
            raise KeyboardInterrupt from e
        if os.environ.get("PRISM_DEBUG"):
            traceback.print_exc()
        return _failed(args, EXIT_BUG, "internal error", f"{type(e).__name__}: {e} (a bug in Prism; PRISM_DEBUG=1 "
                                                         "shows the traceback)")


def _failed(args: argparse.Namespace, code: int, kind: str, message: str) -> int:
    """`code`, having said `message` on stderr as one line ("prism: error: ..."), and with --json also as the JSON
    document on stdout ({"error": message, "kind": kind, "exit": code}): a script reading stdout gets a document
    either way."""
    print(f"prism: {kind}: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "kind": kind, "exit": code}))
    return code


def _is_workload(word: str, parser: _Parser) -> bool:
    """Whether `word` names a workload (`prism rmsnorm` means `prism check rmsnorm`); importing the
    workloads is left to words that are neither commands nor options."""
    if word.startswith("-") or word in parser.commands:
        return False
    from prism.workloads import names

    return word in names()


if __name__ == "__main__":
    sys.exit(main())
