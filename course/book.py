"""Book pages: each chapter's solution executed, then its solutions cleared (outputs kept).

The page a reader sees is the exercise notebook with the solution's outputs
as "expected output". Executed pages are cached by a hash of their inputs.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course.exercises import ROOT, SOLUTIONS, chapters, clear_solutions, read_solution, render

PAGES = ROOT / "book" / "chapters"
REPO = "attention-course/attention-course"  # GitHub owner/name, also in _config.yml
BADGES = """\
```{{admonition}} Work through this chapter
:class: tip
[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/{repo}/blob/main/exercises/{chapter}.ipynb)
[![Binder](https://mybinder.org/badge_logo.svg)](https://mybinder.org/v2/gh/{repo}/main?labpath=exercises%2F{chapter}.ipynb)
[Download the exercise notebook](https://raw.githubusercontent.com/{repo}/main/exercises/{chapter}.ipynb)

The code cells below are the exercise notebook: each `raise NotImplementedError()` is yours to
write. The outputs shown are those of the reference solution, so you know what to expect.
Cells that train or draw are tagged `skip-grading`; the autograder does not run them.
```
"""


def source_hash(chapter: str) -> str:
    """A hash of what the page depends on: the chapter and the attnkit modules it imports."""
    from course.deps import digest
    return digest([SOLUTIONS / f"{chapter}.py"])


def execute(nb: nbformat.NotebookNode, timeout: int = 900) -> nbformat.NotebookNode:
    """Run every cell (as a reader would) in a fresh kernel started at the repo root."""
    os.environ["ATTNKIT_PROGRESS"] = "off"
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    return nb


def build_page(chapter: str, force: bool = False) -> Path:
    """Write `book/chapters/<chapter>.ipynb` unless an up-to-date one is there."""
    PAGES.mkdir(parents=True, exist_ok=True)
    path, digest = PAGES / f"{chapter}.ipynb", source_hash(chapter)
    if path.exists() and not force:
        old = nbformat.read(path, as_version=4)
        if old.metadata.get("course", {}).get("source_hash") == digest:
            print(f"{chapter}: up to date")
            return path
    started = time.monotonic()
    nb = clear_solutions(execute(read_solution(chapter)), keep_outputs=True)
    nb.metadata["course"]["source_hash"] = digest
    badge = nbformat.v4.new_markdown_cell(BADGES.format(repo=REPO, chapter=chapter))
    badge.id = "badges"
    title_at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(title_at + 1, badge)
    path.write_text(render(nb))
    print(f"{chapter}: executed in {time.monotonic() - started:.0f} s")
    return path


def build_pages(force: bool = False) -> list[Path]:
    """Every chapter's page."""
    return [build_page(ch, force) for ch in chapters()]
