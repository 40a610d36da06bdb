"""Are the exercise notebooks generated from solutions/, in sync, and free of solution code?"""
from __future__ import annotations

import pytest

from course.exercises import EXERCISES, chapters, exercise_notebook, out_of_sync, read_solution
from course.leaks import find_leaks, solution_lines


def test_exercises_are_in_sync_with_solutions():
    assert not out_of_sync(), "exercises/ is stale: run `make exercises` and commit the result"


@pytest.mark.parametrize("chapter", chapters())
def test_every_solution_cell_becomes_a_stub(chapter):
    solution = read_solution(chapter)
    exercise = exercise_notebook(chapter)
    graded = [c for c in solution.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert graded, "a chapter needs graded cells"
    for sol, ex in zip(solution.cells, exercise.cells):
        if sol in graded:
            assert "raise NotImplementedError()" in ex.source
            assert "### BEGIN SOLUTION" not in ex.source
    assert exercise.metadata["course"]["chapter"] == chapter
    assert all(not c.get("outputs") for c in exercise.cells if c.cell_type == "code")


@pytest.mark.parametrize("chapter", chapters())
def test_solution_lines_are_found_when_present(chapter, tmp_path):
    lines = solution_lines(chapter)
    assert lines, "the leak check has nothing to look for"
    leaky = tmp_path / "page.html"
    leaky.write_text("<pre>" + sorted(lines)[0].replace("<", "&lt;") + "</pre>")
    assert find_leaks([leaky]), "the leak check missed a solution line"


def test_no_solution_code_in_exercises():
    files = sorted(EXERCISES.glob("*.ipynb"))
    assert files
    assert not find_leaks(files)
