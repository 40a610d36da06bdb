"""Are the exercise notebooks generated from solutions/, in sync, and free of solution code (verbatim or
near-copies in given code)?"""
from __future__ import annotations

import re

import pytest

from course.exercises import EXERCISES, chapters, exercise_notebook, out_of_sync, read_solution
from course.leaks import MIN_SHARED, find_leaks, near_copies, solution_lines, solution_regions


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


def given_code(chapter: str) -> list[str]:
    return [c.source for c in exercise_notebook(chapter).cells if c.cell_type == "code"]


def test_no_given_code_is_a_near_copy_of_a_graded_solution():
    found = near_copies({chapter: given_code(chapter) for chapter in chapters()})
    assert not found, [(name, cell, graded, len(shared)) for name, cell, graded, shared in found]


def test_a_planted_near_copy_is_found_whatever_its_names_comments_and_layout():
    """A graded solution pasted into given code, renamed, recommented and re-indented, is found; the same
    cell with only a few of its statements is not."""
    chapter, grade_id = "01_seq2seq", "beam_search"
    cell = next(c for c in read_solution(chapter).cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    body = "\n".join(solution_regions(cell.source))
    names = sorted(set(re.findall(r"\b(live|finished|scores|cand|top|idx|extended)\b", body)))
    assert len(names) >= 3, "the planted copy renames nothing"
    for k, name in enumerate(names):
        body = re.sub(rf"\b{name}\b", f"renamed_{k}", body)
    body = re.sub(r"#.*", "# a comment of the copy", body).replace("    ", "  ")
    planted = f"def my_search(step_fn, bos_id, eos_id, beam_size, max_len, n_best=1, length_norm=True):\n{body}\n"
    found = near_copies({"planted": given_code(chapter) + [planted]})
    assert found and all(name == "planted" for name, *_ in found), found
    assert f"{chapter}: {grade_id}" in {graded for _, _, graded, _ in found}
    assert max(len(shared) for *_, shared in found) > MIN_SHARED
    few = "\n".join(body.splitlines()[:MIN_SHARED - 1])  # a fragment: under the threshold
    assert not near_copies({"fragment": [f"def f():\n{few}\n    pass\n"]})
