"""nbgrader's course layout in; its gradebook, autograded/ and feedback/ out."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from autograder import batch
from autograder.batch.io import Job
from autograder.exports.nbgrader import cell_scores, export_course, find_course_jobs, open_course
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

pytest.importorskip("nbgrader")
STAMP = "2025-03-01 10:00:00.000000 UTC"


def make_course(root: Path) -> Path:
    """submitted/<student>/hw1/98_batch_toy.ipynb for four students; dave is excluded by the config."""
    for student, variant in {"alice": "ok", "bob": "wrong", "carol": "garbage", "dave": "ok"}.items():
        folder = root / "submitted" / student / "hw1"
        make_notebook(folder / f"{CHAPTER}.ipynb", variant)
        (folder / "timestamp.txt").write_text(STAMP)
        (folder / "submission_secret.txt").write_text(f"secret-{student}")
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.student_id_exclude = "dave"\n')
    return root


def test_cell_scores_sum_tests_by_function_and_fall_back_for_unknown_chapters(toy_chapter):
    tests = [{"score": 2.0, "tags": ["add"]}, {"score": 0.0, "tags": ["add"]}, {"score": 1.0, "tags": ["scale"]}]
    graded = {"score": 3.0, "max_score": 4.0, "tests": tests, "extra_data": {"chapter": CHAPTER}}
    assert cell_scores(graded) == {"add": (2.0, 3.0), "scale": (1.0, 1.0)}
    broken = {"score": 0.0, "max_score": 0.0, "tests": [], "extra_data": {"chapter": None}}
    assert cell_scores(broken, CHAPTER) == {"add": (0.0, 3.0), "scale": (0.0, 1.0)}  # the file's name says
    assert cell_scores(broken, "hw", {"q1": 5.0}) == {"q1": (0.0, 5.0)}  # the gradebook's cells
    assert cell_scores(broken, "hw") == {"autograder": (0.0, 0.0)}


def test_a_course_graded_from_the_cli_lands_in_nbgrader(toy_chapter, tmp_path):
    from nbgrader.api import Gradebook
    from nbgrader.plugins.export import CsvExportPlugin

    from autograder.cli import main
    root = make_course(tmp_path / "course")
    cd = open_course(root, "hw1")
    jobs = find_course_jobs(cd, "hw1")
    assert [(j.name, j.student) for j in jobs] == [(f"{s}/{CHAPTER}", s) for s in ("alice", "bob", "carol")]
    assert main(["grade", "--nbgrader-course", str(root), "--assignment", "hw1", "--jobs", "2", "--no-progress",
                 "--lms-csv", str(tmp_path / "lms.csv"), "--lms-columns", "id,hw1"]) == 0
    with open(tmp_path / "lms.csv", newline="") as f:
        assert list(csv.reader(f)) == [["id", "hw1"], ["alice", "4"], ["bob", "1"], ["carol", "0"]]
    assert (root / "autograder-results" / "hw1" / "grades.csv").is_file()

    with Gradebook(cd.db_url, cd.course_id) as gb:
        cells = {c.name: c.max_score for c in gb.find_notebook(CHAPTER, "hw1").grade_cells}
        assert cells == {"add": 3.0, "scale": 1.0}
        scores = {s: (gb.find_submission("hw1", s).score, gb.find_submission("hw1", s).max_score)
                  for s in ("alice", "bob", "carol")}
        assert scores == {"alice": (4.0, 4.0), "bob": (1.0, 4.0), "carol": (0.0, 4.0)}
        CsvExportPlugin(to=str(tmp_path / "grades.csv")).export(gb)  # what `nbgrader export` does
        bob_add = gb.find_grade("add", CHAPTER, "hw1", "bob")
        assert (bob_add.auto_score, bob_add.needs_manual_grade) == (0.0, False)
        bob_add.manual_score = 2.5  # an instructor's override survives a regrade
        gb.db.commit()
    with open(tmp_path / "grades.csv", newline="") as f:
        exported = {r["student_id"]: (r["score"], r["max_score"]) for r in csv.DictReader(f)}
    assert exported == {"alice": ("4.0", "4.0"), "bob": ("1.0", "4.0"), "carol": ("0.0", "4.0")}

    report = batch.plan(jobs, root / "autograder-results" / "hw1")[0]
    export_course(cd, "hw1", [(j, report.results[j.name]) for j in jobs])  # a rerun updates, never duplicates
    with Gradebook(cd.db_url, cd.course_id) as gb:
        assert gb.find_submission("hw1", "bob").score == 3.5
        assert len(gb.find_submission_notebook(CHAPTER, "hw1", "bob").grades) == 2

    feedback = Path(cd.format_path(cd.feedback_directory, "bob", "hw1"))
    page = (feedback / f"{CHAPTER}.html").read_text()
    assert "1 / 4" in page and "add: does it match the reference?" in page and "a - b" in page
    assert (feedback / "timestamp.txt").read_text() == STAMP
    assert (feedback / "submission_secret.txt").read_text() == "secret-bob"
    assert (root / "feedback" / "carol" / "hw1" / f"{CHAPTER}.html").is_file()
    assert not (root / "feedback" / "dave").exists()

    autograded = json.loads((root / "autograded" / "alice" / "hw1" / f"{CHAPTER}.ipynb").read_text())
    marked = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"].get("points")
              for c in autograded["cells"] if c["metadata"].get("nbgrader", {}).get("grade")}
    assert marked == {"add": 3.0, "scale": 1.0}
    assert formgrader_page(root / "autograded" / "alice" / "hw1" / f"{CHAPTER}.ipynb").count("scoring-buttons") == 2


def formgrader_page(path: Path) -> str:
    """The HTML formgrader serves for an autograded notebook (its own exporter and template)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "hw1", "notebook_id": path.stem, "submission_id": "x", "index": 0, "total": 1,
                 "base_url": "/", "student": "alice", "last_name": "", "first_name": "", "notebook_path": str(path)}
    return HTMLExporter(config=config).from_filename(str(path), resources=resources)[0]


def test_job_names_keep_student_and_notebook_apart():
    job = Job("alice/02_attention", Path("x.ipynb"), "alice", "02_attention")
    assert (job.student, job.notebook) == ("alice", "02_attention")
