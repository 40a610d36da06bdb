"""Find solution code where it must not be: exercises, book pages, the built HTML."""
from __future__ import annotations

import html
import re
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
