"""What a student wrote: the code of a notebook's graded cells, matched to the exercise's starter.

A graded cell is one the starter notebook (exercises/NN_name.ipynb) marks as an nbgrader solution
cell; its `grade_id` names the graded function or class. A student's cell counts for that id when
it carries the same nbgrader metadata or, when Jupyter or an editor dropped the metadata (or for a
jupytext `.py` notebook), when it defines a top-level function or class of that name. Everything
else in the notebook (the given code, the demos, the plots) is left out of the comparison.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.harness.notebook import BadSubmission, parse_ipynb, parse_text
from autograder.paths import ROOT

DEFINES_RE = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)


def exercises_dir() -> Path:
    """The folder of starter notebooks (`NN_name.ipynb`)."""
    return ROOT / "exercises"


@dataclass
class Written:
    """One notebook's graded cells: grade_id -> the code written there, in the starter's order."""

    chapter: str | None
    cells: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """One Python text of every graded cell, each under a `# --- grade_id` line."""
        return "".join(f"# --- {name}\n{source.rstrip()}\n\n" for name, source in self.cells.items())


def read_notebook(path: Path) -> dict:
    """The notebook's JSON (a jupytext `.py` notebook read as one); BadSubmission if unreadable."""
    raw = Path(path).read_bytes()
    return parse_text(raw) if Path(path).suffix == ".py" else parse_ipynb(raw)


def code_cells(nb: dict) -> list[tuple[str | None, str]]:
    """(nbgrader grade_id or None, source) of each code cell."""
    out = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        grading = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
        out.append((grading.get("grade_id") if grading.get("solution") else None, source))
    return out


def defined_names(source: str) -> list[str]:
    """The top-level functions and classes a cell defines (by a regex when it does not parse)."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError):
        return DEFINES_RE.findall(source)
    return [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def chapter_of(nb: dict) -> str | None:
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    course = meta.get("course") if isinstance(meta.get("course"), dict) else {}
    return course.get("chapter") if isinstance(course.get("chapter"), str) else None


def starter(chapter: str, path: Path | None = None) -> Written:
    """The starter's graded cells (the stubs: signatures, docstrings, `raise NotImplementedError()`)."""
    nb = read_notebook(path or exercises_dir() / f"{chapter}.ipynb")
    return Written(chapter, {gid: src for gid, src in code_cells(nb) if gid})


def written(nb: dict, start: Written) -> Written:
    """What notebook `nb` (from `read_notebook`) has in the graded cells of `start`; a cell left as the
    starter gave it is left out."""
    found: dict[str, list[str]] = {gid: [] for gid in start.cells}
    for gid, source in code_cells(nb):
        target = gid if gid in found else next((n for n in defined_names(source) if n in found), None)
        if target is not None and source.strip() != start.cells[target].strip():
            found[target].append(source)
    return Written(start.chapter, {gid: "\n\n".join(srcs) for gid, srcs in found.items() if srcs})


__all__ = ["BadSubmission", "Written", "chapter_of", "read_notebook", "starter", "written"]
