"""`python -m course nbgrader-course DIR`: nbgrader's own generate_assignment makes our exercise notebook
from it, and our autograder grades the course's submissions into nbgrader's gradebook."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.exports.nbgrader import function_points
from course.exercises import exercise_notebook
from course.nbgrader_course import write_course

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "02_attention"
BIN = str(Path(sys.executable).parent)  # nbgrader, and the alembic it runs, live beside the interpreter


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nbgrader") / "course"
    done = run([sys.executable, "-m", "course", "nbgrader-course", str(root), "--chapter", CHAPTER], ROOT)
    assert done.returncode == 0, done.stderr
    done = run([os.path.join(BIN, "nbgrader"), "generate_assignment", CHAPTER, "--force"], root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root


def test_the_source_notebook_has_a_grade_cell_per_graded_function(tmp_path):
    nb = nbformat.read(write_course(tmp_path, [CHAPTER])[0], as_version=4)
    grade_cells = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            grade_cells[meta["grade_id"]] = meta["points"]
            assert meta["solution"] and "### BEGIN SOLUTION" in cell.source
    assert grade_cells == function_points(CHAPTER)
    assert (tmp_path / "nbgrader_config.py").is_file()


def test_generate_assignment_gives_our_exercise_notebook(course):
    theirs = nbformat.read(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    ours = exercise_notebook(CHAPTER)
    assert [(c.cell_type, c.source) for c in theirs.cells] == [(c.cell_type, c.source) for c in ours.cells]


def test_the_gradebook_knows_the_grade_cells(course):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        notebook = gb.find_notebook(CHAPTER, CHAPTER)
        cells = {c.name: c.max_score for c in notebook.grade_cells}
    assert cells == function_points(CHAPTER)


def test_our_autograder_grades_the_collected_submission(course):
    submitted = course / "submitted" / "alice" / CHAPTER
    submitted.mkdir(parents=True)
    shutil.copy(course / "release" / CHAPTER / f"{CHAPTER}.ipynb", submitted)
    done = run([sys.executable, "-m", "autograder", "grade", "--nbgrader-course", str(course),
                "--assignment", CHAPTER, "--no-progress"], ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(CHAPTER, "alice")
        assert sub.score == 0 and sub.max_score == sum(function_points(CHAPTER).values())
    assert (course / "feedback" / "alice" / CHAPTER / f"{CHAPTER}.html").is_file()
