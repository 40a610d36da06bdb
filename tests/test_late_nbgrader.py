"""Late submissions in nbgrader: its LateSubmissionPlugin (penalty_method) and its extensions decide."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

pytest.importorskip("nbgrader")
DUE = "2026-12-01 23:59:00.000000 UTC"


def _course(root: Path) -> Path:
    """hw1 due at DUE with penalty_method zero: alice 3 minutes late, bob on time, carol 3 minutes late
    with a 10-minute extension."""
    stamps = {"alice": "2026-12-02 00:02:00.000000 UTC", "bob": "2026-12-01 23:00:00.000000 UTC",
              "carol": "2026-12-02 00:02:00.000000 UTC"}
    for student, stamp in stamps.items():
        folder = root / "submitted" / student / "hw1"
        make_notebook(folder / f"{CHAPTER}.ipynb", "ok")
        (folder / "timestamp.txt").write_text(stamp)
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    return root


@pytest.mark.filterwarnings("ignore:Object of type <SubmittedAssignment> not in session")  # nbgrader's add_submission
def test_nbgrader_zeroes_a_late_notebook_and_respects_an_extension(toy_chapter, tmp_path):
    from nbgrader.api import Gradebook
    from nbgrader.plugins.export import CsvExportPlugin

    from autograder.cli import main
    from autograder.exports.nbgrader import open_course, tools_on_path
    root = _course(tmp_path / "course")
    cd = open_course(root, "hw1")
    with tools_on_path(), Gradebook(cd.db_url, cd.course_id) as gb:  # what `nbgrader db assignment add` does
        gb.update_or_create_assignment("hw1", duedate=DUE)
        gb.update_or_create_student("carol")
        gb.add_submission("hw1", "carol")
        gb.grant_extension("hw1", "carol", minutes=10)
    assert main(["grade", "--nbgrader-course", str(root), "--assignment", "hw1", "--jobs", "2", "--no-progress"]) == 0

    with Gradebook(cd.db_url, cd.course_id) as gb:
        penalties = {s: gb.find_submission("hw1", s).late_submission_penalty for s in ("alice", "bob", "carol")}
        CsvExportPlugin(to=str(tmp_path / "export.csv")).export(gb)  # what `nbgrader export` does
    assert penalties == {"alice": 4.0, "bob": 0.0, "carol": 0.0}
    with open(tmp_path / "export.csv", newline="") as f:
        exported = {r["student_id"]: (r["raw_score"], r["late_submission_penalty"], r["score"])
                    for r in csv.DictReader(f)}
    assert exported == {"alice": ("4.0", "4.0", "0.0"), "bob": ("4.0", "0.0", "4.0"), "carol": ("4.0", "0.0", "4.0")}

    out = root / "autograder-results" / "hw1"
    with open(out / "grades.csv", newline="") as f:
        rows = {r["submission"]: (r["score"], r["raw_score"], r["penalty"]) for r in csv.DictReader(f)}
    assert rows == {f"alice/{CHAPTER}": ("0", "4", "4"), f"bob/{CHAPTER}": ("4", "4", "0"),
                    f"carol/{CHAPTER}": ("4", "4", "0")}
    alice = json.loads((out / "alice" / CHAPTER / "results.json").read_text())
    assert alice["score"] == 0 and "penalty_method='zero'" in alice["extra_data"]["late"]["policy"]
    assert "3 min after the due date" in alice["output"]
    carol = json.loads((out / "carol" / CHAPTER / "results.json").read_text())["extra_data"]["late"]
    assert (carol["extension"], carol["seconds_late"]) == ("0.166667h", 0)
    feedback = (root / "feedback" / "alice" / "hw1" / f"{CHAPTER}.html").read_text()
    assert "Score: <b>0 / 4</b>" in feedback and "Deadline: submitted" in feedback
