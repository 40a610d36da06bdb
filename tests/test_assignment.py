"""A submission is graded as the assignment it was handed in for: a notebook of another chapter gets 0
out of the assignment's maximum with a message naming the chapter it looks like, in a folder and in
nbgrader, and none of its grade cells reaches the gradebook."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from autograder.assignment import infer_chapter, looks_like
from autograder.cli import main
from autograder.harness.notebook import read_submission
from autograder.paths import chapters
from tests.batch.toy import (CHAPTER, OTHER, ROOT, add_other_chapter, make_notebook,  # noqa: F401
                             make_other_notebook, toy_chapter)

LOOKS_LIKE = f"looks like the notebook of chapter {OTHER}, not of {CHAPTER}"
OTHER_CHAPTER = f"notebook of chapter {OTHER}, not of {CHAPTER}"


@pytest.fixture
def two_chapters(toy_chapter):
    add_other_chapter(toy_chapter)
    return toy_chapter


def rows(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r["submission"]: r for r in csv.DictReader(f)}


def test_the_content_can_only_refuse(two_chapters, tmp_path):
    ours = read_submission(make_notebook(tmp_path / "a.ipynb")).cells
    theirs = read_submission(make_other_notebook(tmp_path / "b.ipynb", metadata=False)).cells
    assert looks_like(ours, CHAPTER) is None and looks_like(theirs, OTHER) is None
    assert looks_like(theirs, CHAPTER) == OTHER
    assert looks_like([{"source": "x = 1"}], CHAPTER) is None  # an empty notebook is just graded (0 points)


@pytest.mark.parametrize("chapter", chapters())
def test_each_real_exercise_is_told_apart_from_the_next_chapter(chapter):
    cells = read_submission(ROOT / "exercises" / f"{chapter}.ipynb").cells
    other = chapters()[(chapters().index(chapter) + 1) % len(chapters())]
    assert looks_like(cells, chapter) is None and looks_like(cells, other) == chapter


def test_a_folder_is_graded_as_the_one_chapter_its_notebooks_name(two_chapters, tmp_path):
    a, b = make_notebook(tmp_path / "a.ipynb"), make_notebook(tmp_path / "b.ipynb")
    assert infer_chapter([a, b]) == (CHAPTER, "")
    chapter, why = infer_chapter([a, b, make_other_notebook(tmp_path / "x.ipynb")])
    assert chapter is None and f"{CHAPTER}: 2" in why and f"{OTHER}: 1" in why and "--chapter" in why
    assert infer_chapter([a], {OTHER: ["out/old"]})[0] is None  # the class in OUT was graded as another


def test_a_wrong_chapter_notebook_in_a_folder_gets_zero_with_the_message(two_chapters, tmp_path, capsys):
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_notebook(subs / "alice.ipynb")
    make_other_notebook(subs / "xavier.ipynb")  # says it is chapter 99 in its metadata
    make_other_notebook(subs / "yves" / f"{CHAPTER}.ipynb", metadata=False)  # says nothing, named as ours
    assert main(["grade", str(subs), "--out", str(out), "--no-progress"]) == 2  # they disagree: refused
    assert f"{OTHER}: 1" in capsys.readouterr().err and not out.exists()

    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--chapter", CHAPTER]) == 0
    table = rows(out / "grades.csv")
    assert {n: (r["chapter"], r["score"], r["max"], r["status"]) for n, r in table.items()} == {
        "alice": (CHAPTER, "4", "4", "graded"), "xavier": (CHAPTER, "0", "4", "error"),
        f"yves__{CHAPTER}": (CHAPTER, "0", "4", "error")}
    assert OTHER_CHAPTER in json.loads((out / "xavier" / "results.json").read_text())["output"]
    yves = json.loads((out / f"yves__{CHAPTER}" / "results.json").read_text())
    assert LOOKS_LIKE in yves["output"] and yves["extra_data"]["looks_like"] == OTHER


def test_nbgrader_grades_as_the_assignment_and_keeps_foreign_cells_out(two_chapters, tmp_path, capsys):
    from nbgrader.api import Gradebook

    from autograder.exports.nbgrader import open_course
    root = tmp_path / "course"
    make_notebook(root / "source" / "hw1" / f"{CHAPTER}.ipynb")  # the instructor's copy names the chapter
    make_notebook(root / "submitted" / "alice" / "hw1" / f"{CHAPTER}.ipynb")
    make_notebook(root / "submitted" / "alice" / "hw1" / "scratch.ipynb")  # not a notebook of hw1
    make_other_notebook(root / "submitted" / "xavier" / "hw1" / f"{CHAPTER}.ipynb", metadata=False)
    make_other_notebook(root / "submitted" / "yves" / "hw1" / f"{CHAPTER}.ipynb")
    stray = root / "autograder-results" / "hw1" / "alice" / "scratch" / "results.json"  # from an older run
    stray.parent.mkdir(parents=True)
    stray.write_text(json.dumps({"score": 4.0, "max_score": 4.0, "tests": [], "extra_data": {
        "status": "graded", "chapter": CHAPTER, "student": "alice", "notebook": "scratch"}}))
    assert main(["grade", "--nbgrader-course", str(root), "--assignment", "hw1", "--no-progress"]) == 0
    assert "scratch.ipynb" in capsys.readouterr().err

    cd = open_course(root, "hw1")
    with Gradebook(cd.db_url, cd.course_id) as gb:
        assert [nb.name for nb in gb.find_assignment("hw1").notebooks] == [CHAPTER]
        assert {c.name: c.max_score for c in gb.find_notebook(CHAPTER, "hw1").grade_cells} == {"add": 3.0,
                                                                                              "scale": 1.0}
        scores = {s: (gb.find_submission("hw1", s).score, gb.find_submission("hw1", s).max_score)
                  for s in ("alice", "xavier", "yves")}
    assert scores == {"alice": (4.0, 4.0), "xavier": (0.0, 4.0), "yves": (0.0, 4.0)}
    results = root / "autograder-results" / "hw1"
    assert LOOKS_LIKE in json.loads((results / "xavier" / CHAPTER / "results.json").read_text())["output"]
    assert OTHER_CHAPTER in json.loads((results / "yves" / CHAPTER / "results.json").read_text())["output"]


def test_the_chapter_is_kept_with_the_output_folder(two_chapters, tmp_path, capsys):
    """Graded once with --chapter, a class with a wrong-chapter notebook is graded as that chapter by
    every later command without --chapter: a rerun, a --student regrade, one notebook regraded alone."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_notebook(subs / "alice.ipynb")
    make_other_notebook(subs / "xavier.ipynb")  # its metadata names the other chapter
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--chapter", CHAPTER]) == 0
    assert json.loads((out / "assignment.json").read_text())["chapter"] == CHAPTER
    capsys.readouterr()
    for again in ([str(subs)], [str(subs), "--student", "alice"], [str(subs / "xavier.ipynb")]):
        assert main(["grade", *again, "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
        assert f"grading as {CHAPTER}, the chapter kept in {out / 'assignment.json'}" in capsys.readouterr().err
    table = rows(out / "grades.csv")
    assert {n: (r["chapter"], r["score"], r["status"]) for n, r in table.items()} == {
        "alice": (CHAPTER, "4", "graded"), "xavier": (CHAPTER, "0", "error")}
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--chapter", OTHER]) == 0  # replaced
    assert json.loads((out / "assignment.json").read_text())["chapter"] == OTHER


def test_assignment_and_grade_import_in_one_direction():
    """`grade` uses `assignment` (is this notebook the assignment's?); `assignment` reads the graders'
    declarations from `graded`, never from `grade`."""
    import ast
    tree = ast.parse((ROOT / "autograder" / "assignment.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "autograder.grade" not in imported and "autograder.graded" in imported
