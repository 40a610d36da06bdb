"""Find solution code where it must not be: exercises, book pages, the built HTML.

Two checks: `find_leaks` looks for solution lines, verbatim, in any file; `near_copies` looks in the
given (non-solution) code of notebooks for near-copies of a graded solution, whitespace, comments and
names ignored.
"""
from __future__ import annotations

import html
import io
import json
import keyword
import re
import textwrap
import tokenize
from functools import cache
from pathlib import Path

from course.exercises import chapters, exercise_notebook, read_solution

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
MIN_CHARS = 12  # shorter lines (`return out`) are too common to be evidence


def solution_lines(chapter: str) -> set[str]:
    """Distinctive lines inside the chapter's solution regions that the exercise does not show."""
    lines, inside = set(), False
    for cell in read_solution(chapter).cells:
        for line in cell.source.splitlines():
            if BEGIN in line:
                inside = True
            elif END in line:
                inside = False
            elif inside:
                text = line.strip()
                if len(text) >= MIN_CHARS and not text.startswith(("#", '"""', "'''")):
                    lines.add(text)
    visible = "\n".join(c.source for c in exercise_notebook(chapter).cells)
    return {ln for ln in lines if ln not in visible}


def normalise(text: str) -> str:
    """Text with HTML tags and entities removed and whitespace squeezed, for matching code."""
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return re.sub(r"[ \t]+", " ", text)


def find_leaks(paths: list[Path]) -> list[tuple[Path, str]]:
    """(file, solution line) for every solution line found in `paths`.

    A file named for a chapter (`03_transformer.html`, `.ipynb`) is searched for that chapter's
    solution lines only: a line one chapter asks for (`B, T, D = x.shape`) may be given code in
    another. Any other file is searched for every chapter's."""
    own = {ch: {re.sub(r"[ \t]+", " ", ln) for ln in solution_lines(ch)} for ch in chapters()}
    every = set().union(*own.values()) if own else set()
    leaks = []
    for path in paths:
        needles = own.get(path.stem, every)
        text = normalise(path.read_text(errors="ignore"))
        leaks += [(path, n) for n in sorted(needles) if n in text]
    return leaks


# ---------------------------------------------------------------- near-copies in given code
SHAPE_MIN_TOKENS = 8  # a shorter statement (`for _ in _ ( _ ) :`) is an idiom, not evidence
MIN_SHARED = 3  # statements a given cell may share with one graded solution (all eight chapters: 2 at most)
GENERIC = {"_", ",", "=", "(", ")", "[", "]", "{", "}", ":", "S"}  # `_ , _ = _ ( _ )`: any code's shape
LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}


def code_shapes(source: str) -> set[str]:
    """The statements of `source` with whitespace, comments and names dropped: every name that is not a
    keyword or an attribute (`.topk`) becomes `_`, every string `S`; statements of fewer than
    SHAPE_MIN_TOKENS tokens, lone strings (docstrings) and statements of only names, calls, brackets and
    commas (`_ , _ = _ ( _ )`: no attribute, operator, keyword or number, so no evidence) are left out."""
    code = "\n".join(ln for ln in textwrap.dedent(source).splitlines() if not ln.lstrip().startswith(("%", "!")))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return set()
    shapes, statement, previous = set(), [], ""
    for tok in tokens:
        if tok.type in LAYOUT:
            continue
        if tok.type == tokenize.NEWLINE:
            if len(statement) >= SHAPE_MIN_TOKENS and not set(statement) <= GENERIC:
                shapes.add(" ".join(statement))
            statement, previous = [], ""
            continue
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) and previous != ".":
            statement.append("_")
        else:
            statement.append("S" if tok.type == tokenize.STRING else tok.string)
        previous = tok.string
    return shapes


def solution_regions(source: str) -> list[str]:
    """The code between each `### BEGIN SOLUTION` and `### END SOLUTION` of a cell."""
    regions, inside = [], None
    for line in source.splitlines():
        if BEGIN in line:
            inside = []
        elif END in line and inside is not None:
            regions.append("\n".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    return regions


@cache
def graded_shapes() -> dict[str, set[str]]:
    """{"NN_name: grade_id": the statement shapes of that graded cell's solution regions}, every chapter."""
    shapes = {}
    for chapter in chapters():
        for cell in read_solution(chapter).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                shapes[f"{chapter}: {grade_id}"] = set().union(*map(code_shapes, solution_regions(cell.source)))
    return shapes


def notebook_code(path: Path) -> list[str]:
    """The sources of the code cells of a notebook file (.ipynb)."""
    cells = json.loads(path.read_text()).get("cells", [])
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c.get("cell_type") == "code"]


def near_copies(notebooks: dict[str, list[str]]) -> list[tuple[str, int, str, list[str]]]:
    """(notebook, code cell number, graded cell, shared statements) for every given code cell (the code
    cells of an exercise notebook, `{name: sources}`) that shares MIN_SHARED or more statement shapes
    (`code_shapes`) with the solution of one graded cell of any chapter: given code that answers a graded
    exercise, whatever its names, comments and layout."""
    found = []
    for name, cells in notebooks.items():
        for number, source in enumerate(cells):
            shapes = code_shapes(source)
            for graded, solution in graded_shapes().items():
                shared = sorted(shapes & solution)
                if len(shared) >= MIN_SHARED:
                    found.append((name, number, graded, shared))
    return found
