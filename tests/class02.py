"""Chapter 02 notebooks as a class hands them in: correct, a known mistake, empty, an imports cell that
fails, an endless loop, another chapter's, a near-copy (laid out again). For the tests
that grade a realistic class (tests/test_class02.py, the quickstart in tests/test_doc_commands.py)."""
from __future__ import annotations

import ast
import copy
import re
import runpy
from pathlib import Path

import nbformat

CHAPTER = "02_attention"
ROOT = Path(__file__).resolve().parent.parent


def _solution(chapter: str = CHAPTER) -> nbformat.NotebookNode:
    """The solution notebook without nbgrader's solution markers: what a student hands in."""
    from course.exercises import read_solution
    nb = read_solution(chapter)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = re.sub(r"\n?\s*### (BEGIN|END) SOLUTION", "", cell.source)
    return nb


def _mistake(function: str, name: str) -> str:
    mistakes = runpy.run_path(str(ROOT / "tests" / "mistakes" / f"{CHAPTER}.py"))["MISTAKES"]
    return next(m.code for m in mistakes if m.function == function and m.name == name).strip()


def _reformatted(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A near-copy: every graded cell's code laid out again (ast.unparse: comments and docstring layout
    gone, other spacing and quotes), a comment of the copier's own on top. It computes the same."""
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "# my own solution\n" + ast.unparse(ast.parse(cell.source))
    return nb


def notebook(kind: str) -> nbformat.NotebookNode:
    """One submission: ok, mistake, empty, import_fails, loop, chapter03, near_copy."""
    from course.exercises import exercise_notebook
    if kind == "empty":
        return exercise_notebook(CHAPTER)
    if kind == "chapter03":
        return _solution("03_transformer")
    nb = _solution()
    if kind == "near_copy":
        return _reformatted(nb)
    if kind == "import_fails":  # the imports cell stops at its first line, as in Jupyter
        cell = next(c for c in nb.cells if c.cell_type == "code" and "import torch\n" in c.source)
        cell.source = "import torhc  # a typo\n" + cell.source
        return nb
    extra = {"ok": None, "mistake": _mistake("dot_score", "scaled dot product"),
             "loop": "def location_score(s, W):\n    while True:\n        pass"}[kind]
    if extra:
        nb.cells.append(nbformat.v4.new_code_cell(extra))
    return nb


def write(path: Path, kind: str) -> Path:
    from course.exercises import render
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(copy.deepcopy(notebook(kind))))
    return path
