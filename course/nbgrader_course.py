"""`python -m course nbgrader-course DIR`: the chapters as an nbgrader course.

Writes DIR/source/<chapter>/<chapter>.ipynb, the solution notebook with
nbgrader's cell metadata (the solution regions are the same ones
`make exercises` clears), where the cell that defines each graded function
is a grade cell (`grade_id` = the function's name, `points` = the points of
the hidden graders that test it). nbgrader's own tools then work on DIR:
`nbgrader generate_assignment` makes the student notebook (equal, cell for
cell, to exercises/<chapter>.ipynb), `release_assignment`, `collect` and
formgrader do the rest; the grading step is ours:
`python -m autograder grade --nbgrader-course DIR --assignment <chapter>`,
which writes the gradebook's scores for those same grade cells.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from course.exercises import STUB, chapters, read_solution, render

CONFIG = '''# nbgrader's configuration for the course (written by `python -m course nbgrader-course`).
c = get_config()  # noqa: F821 - nbgrader provides it
c.CourseDirectory.course_id = "attention"
# the stub that replaces each solution: the same one as the course's exercises/ notebooks
c.ClearSolutions.code_stub = {"python": %r}
''' % STUB


def source_notebook(chapter: str) -> nbformat.NotebookNode:
    """The chapter's nbgrader source notebook: its graded-function cells are grade cells with points."""
    from autograder.exports.nbgrader import function_points
    points = function_points(chapter)
    nb = read_solution(chapter)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and meta.get("solution") and meta.get("grade_id") in points:
            meta.update(grade=True, points=points[meta["grade_id"]])
    return nb


def write_course(root: Path, names: list[str] | None = None) -> list[Path]:
    """Write DIR/source/<chapter>/<chapter>.ipynb (and DIR/nbgrader_config.py if missing)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "nbgrader_config.py").exists():
        (root / "nbgrader_config.py").write_text(CONFIG)
    written = []
    for chapter in names or chapters():
        path = root / "source" / chapter / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(source_notebook(chapter)))
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m course nbgrader-course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="the nbgrader course folder")
    parser.add_argument("--chapter", action="append", help="only this chapter (repeatable)")
    args = parser.parse_args(argv)
    for path in write_course(Path(args.dir), args.chapter):
        print(f"wrote {path}")
    print(f"next: cd {args.dir} && nbgrader generate_assignment NN_name "
          "(see \"Grading a course\" in book/instructors/nbgrader.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
