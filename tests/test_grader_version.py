"""A result is current or it is redone: results record their chapter's grader version, and a rerun
after a grader edit regrades exactly the results of that chapter, and says so."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from autograder import batch
from autograder.batch.io import find_jobs
from autograder.version import grader_version
from tests.batch.toy import (CHAPTER, OTHER, add_other_chapter, make_notebook, make_other_notebook,  # noqa: F401
                             toy_chapter)


def settings(out: Path, **kw) -> batch.Settings:
    return batch.Settings(out, **{"jobs": 2, "call_timeout": 5.0, "progress": False, **kw})


def scores(out: Path) -> dict[str, tuple[str, str]]:
    with open(out / "grades.csv", newline="") as f:
        return {r["submission"]: (r["score"], r["max"]) for r in csv.DictReader(f)}


def test_the_version_covers_a_chapters_graders_and_reference_only(toy_chapter):
    add_other_chapter(toy_chapter)
    ours, theirs, none = grader_version(CHAPTER), grader_version(OTHER), grader_version(None)
    assert len({ours, theirs, none}) == 3 and ours == grader_version(CHAPTER)
    solution = toy_chapter / "solutions" / f"{CHAPTER}.py"
    solution.write_text(solution.read_text() + "\n# a comment\n")
    assert grader_version(CHAPTER) != ours and grader_version(OTHER) == theirs


def test_a_grader_edit_regrades_exactly_its_chapters_results(toy_chapter, tmp_path, capsys):
    add_other_chapter(toy_chapter)
    subs, out = tmp_path / "subs", tmp_path / "out"
    for name, variant in {"alice": "ok", "bob": "wrong", "carol": "ok"}.items():
        make_notebook(subs / f"{name}.ipynb", variant)
    other_subs, other_out = tmp_path / "other_subs", tmp_path / "other_out"
    make_other_notebook(other_subs / "xavier.ipynb")
    batch.run_batch(find_jobs([str(subs)]), settings(out, chapter=CHAPTER))
    batch.run_batch(find_jobs([str(other_subs)]), settings(other_out, jobs=1, chapter=OTHER))
    assert scores(out) == {"alice": ("4", "4"), "bob": ("1", "4"), "carol": ("4", "4")}
    result = json.loads((out / "alice" / "results.json").read_text())
    assert result["extra_data"]["grader_version"] == grader_version(CHAPTER)

    grader = toy_chapter / "graders" / f"test_{CHAPTER}.py"
    text = grader.read_text().replace('@graded("scale", points=1', '@graded("scale", points=2')
    grader.write_text(text + '''

@graded("scale", points=1, hint="Multiply.")
def test_scale_by_zero(student, ref):
    """scale: by zero?"""
    expect_close(student.scale(torch.ones(3), 0.0), ref.scale(torch.ones(3), 0.0), "the scaled tensor")
''')
    assert batch.plan(find_jobs([str(other_subs)]), other_out, chapter=OTHER)[1] == []  # another chapter: current
    capsys.readouterr()
    again = batch.run_batch(find_jobs([str(subs)]), settings(out, chapter=CHAPTER))
    assert (again.graded, again.skipped, again.stale) == (3, 0, {CHAPTER: 3})
    assert f"3 results predate the graders (3 of {CHAPTER}" in capsys.readouterr().err
    assert scores(out) == {"alice": ("6", "6"), "bob": ("3", "6"), "carol": ("6", "6")}
    assert batch.run_batch(find_jobs([str(subs)]), settings(out, chapter=CHAPTER)).skipped == 3  # now current


def test_a_result_graded_as_another_chapter_is_not_current(toy_chapter, tmp_path):
    add_other_chapter(toy_chapter)
    subs, out = tmp_path / "subs", tmp_path / "out"
    make_other_notebook(subs / "xavier.ipynb")
    jobs = find_jobs([str(subs)])
    result = batch.stamp({"score": 6.0, "max_score": 6.0, "extra_data": {
        "status": "graded", "chapter": OTHER, "grader_version": grader_version(OTHER)}}, jobs[0],
        batch.sha256_of(jobs[0].path))
    (out / "xavier").mkdir(parents=True)
    (out / "xavier" / "results.json").write_text(json.dumps(result))
    assert batch.plan(jobs, out)[1] == [] and batch.plan(jobs, out, chapter=OTHER)[1] == []
    report, todo = batch.plan(jobs, out, chapter=CHAPTER)  # the class is chapter 98's: xavier's must be redone
    assert [job.name for job, _ in todo] == ["xavier"] and report.stale == {OTHER: 1}
