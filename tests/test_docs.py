"""Every ```python block of README.md and docs/*.md runs as pasted: saved as a file and piped to `python -`, from a
folder that is not the checkout (only the import path leads there), in the caller's environment. A newcomer's
first copy-paste must not end in a NameError. A block fenced ```python gpu runs where torch sees a GPU. A block
followed by a block fenced ```output prints exactly that (kept for outputs that are the same on every machine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python( gpu)?\n(.*?)^```\n(?:\n?```output\n(.*?)^```$)?", re.S | re.M)


def _blocks() -> list:
    """One pytest param per block, (code, expected output or None), named by its page, line and section
    (`readme-L38-from-torch`)."""
    params = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            sections = re.findall(r"^##? (.*)$", text[:m.start()], re.M)
            slug = re.sub(r"[^a-z0-9]+", "-", (sections[-1] if sections else "").lower()).strip("-")[:30]
            gpu = [pytest.mark.skipif(not torch.cuda.is_available(), reason="a block for a GPU")] if m.group(1) else []
            params.append(pytest.param(m.group(2), m.group(3), id=f"{page.stem.lower()}-L{line}-{slug}", marks=gpu))
    return params


def test_every_python_block_is_found():
    assert len(_blocks()) == sum(p.read_text().count("```python") for p in PAGES) > 0
    assert sum(expected is not None for _, expected in (p.values for p in _blocks())) >= 3


def test_an_output_block_belongs_to_the_block_before_it():
    text = "```python\nprint(1)\n```\n\n```output\n1\n```\n"
    ((code, expected),) = [m.group(2, 3) for m in FENCE.finditer(text)]
    assert (code, expected) == ("print(1)\n", "1\n")


@pytest.mark.parametrize("how", ["file", "stdin"])
@pytest.mark.parametrize("code,expected", _blocks())
def test_a_docs_block_runs_as_pasted(code, expected, how, tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)  # the result cache too: a block's second run finds it warm
    if how == "file":
        (tmp_path / "snippet.py").write_text(code)
        argv, stdin = [sys.executable, "snippet.py"], None
    else:
        argv, stdin = [sys.executable, "-"], code
    p = subprocess.run(argv, input=stdin, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    if expected is not None:
        assert p.stdout == expected


def test_a_block_that_superoptimizes_makes_its_tensors_where_the_kernels_run():
    """On a GPU machine superoptimize tunes for the GPU and its result takes CUDA tensors only: a block that
    made CPU tensors after it once passed on a CPU and failed on a GPU. Each tensor a block makes after
    `superoptimize(` names its device (`opt.device`), so the block runs on either machine."""
    making = re.compile(r"torch\.(randn|rand|zeros|ones|empty)\(|\.inputs\(")
    for param in _blocks():
        if param.marks:          # a block for a GPU makes CUDA tensors
            continue
        code = param.values[0]
        after = code.split("superoptimize(", 1)[1] if "superoptimize(" in code else ""
        for line in after.splitlines():
            assert not making.search(line) or "device" in line, f"{param.id}: {line.strip()}"


def test_every_page_is_linked_from_the_readme_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, page.name
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: {target}"
