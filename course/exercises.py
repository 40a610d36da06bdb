"""Generate `exercises/NN_name.ipynb` from `solutions/NN_name.py` with nbgrader's ClearSolutions."""
from __future__ import annotations

import hashlib
from pathlib import Path

import jupytext
import nbformat
from nbgrader.preprocessors import ClearOutput, ClearSolutions

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def chapters() -> list[str]:
    """Every chapter with a solution notebook."""
    return sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.py"))


def read_solution(chapter: str) -> nbformat.NotebookNode:
    """The solution notebook, with stable cell ids and the chapter in its metadata."""
    nb = jupytext.read(SOLUTIONS / f"{chapter}.py", fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata.setdefault("course", {})["chapter"] = chapter
    nb.metadata.setdefault("language_info", {"name": "python"})
    for i, cell in enumerate(nb.cells):
        cell.id = hashlib.sha1(f"{chapter}:{i}".encode()).hexdigest()[:12]
        cell.metadata.pop("lines_to_next_cell", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def clear_solutions(nb: nbformat.NotebookNode, keep_outputs: bool = False) -> nbformat.NotebookNode:
    """nbgrader's ClearSolutions (stubs raise NotImplementedError); outputs cleared unless asked."""
    nb, _ = ClearSolutions(code_stub={"python": STUB}, enforce_metadata=True).preprocess(nb, {})
    if not keep_outputs:
        nb, _ = ClearOutput().preprocess(nb, {})
    return nb


def exercise_notebook(chapter: str) -> nbformat.NotebookNode:
    """The student version of `chapter`."""
    return clear_solutions(read_solution(chapter))


def render(nb: nbformat.NotebookNode) -> str:
    """The notebook's file text, exactly as committed."""
    return nbformat.writes(nb) + "\n"


def write_exercises() -> list[Path]:
    """(Re)generate every exercise notebook; return the paths written."""
    EXERCISES.mkdir(exist_ok=True)
    written = []
    for chapter in chapters():
        path = EXERCISES / f"{chapter}.ipynb"
        path.write_text(render(exercise_notebook(chapter)))
        written.append(path)
    return written


def out_of_sync() -> list[str]:
    """Chapters whose committed exercise notebook differs from what `solutions/` generates."""
    stale = []
    for chapter in chapters():
        path = EXERCISES / f"{chapter}.ipynb"
        if not path.exists() or path.read_text() != render(exercise_notebook(chapter)):
            stale.append(chapter)
    return stale
