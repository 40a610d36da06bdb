"""The class tables are whole: grades.csv and the LMS CSV keep every student of OUT whatever subset was
(re)graded (--student, --force on one file, one notebook given alone), and the gradebook is written in
one transaction."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from autograder.cli import main
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

CLASS = {"alice": "ok", "bob": "ok", "carol": "wrong", "dave": "ok"}


def table(path: Path, key: str) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r[key]: r for r in csv.DictReader(f)}


def grade(*args: str) -> int:
    return main(["grade", *args, "--no-progress"])


def stamps(out: Path) -> dict[str, str]:
    """Submission -> when its result was written (graded_at and the file's mtime)."""
    return {p.parent.name: f"{json.loads(p.read_text())['extra_data']['graded_at']} {p.stat().st_mtime_ns}"
            for p in out.rglob("results.json")}


def test_regrading_some_students_keeps_every_row(toy_chapter, tmp_path, capsys):
    subs, out, lms = tmp_path / "subs", tmp_path / "out", tmp_path / "lms.csv"
    for name, variant in CLASS.items():
        make_notebook(subs / f"{name}.ipynb", variant)
    assert grade(str(subs), "--out", str(out), "--lms-csv", str(lms), "--jobs", "2") == 0
    want = {name: ("1" if variant == "wrong" else "4") for name, variant in CLASS.items()}
    assert {n: r["score"] for n, r in table(out / "grades.csv", "submission").items()} == want
    before = stamps(out)

    make_notebook(subs / "carol.ipynb", "ok")  # carol fixes her notebook; only she is regraded
    assert grade(str(subs), "--out", str(out), "--lms-csv", str(lms), "--student", "carol", "--student", "bob") == 0
    want["carol"] = "4"
    assert {n: r["score"] for n, r in table(out / "grades.csv", "submission").items()} == want
    assert {n: r["score"] for n, r in table(lms, "student_id").items()} == want
    after = stamps(out)
    assert {n for n in want if after[n] != before[n]} == {"bob", "carol"}  # --student regrades them, no others

    capsys.readouterr()
    assert grade(str(subs / "alice.ipynb"), "--out", str(out), "--force", "--lms-csv", str(lms)) == 0
    assert "1 submission: 1 graded now, 0 already done; all 4 in" in capsys.readouterr().out
    assert len(table(out / "grades.csv", "submission")) == len(table(lms, "student_id")) == 4
    assert stamps(out)["alice"] != after["alice"]

    make_notebook(subs / "dave.ipynb", "wrong")
    assert grade(str(subs / "dave.ipynb"), "--out", str(out)) == 0  # one notebook alone, not the batch engine
    rows = table(out / "grades.csv", "submission")
    assert set(rows) == set(CLASS) and rows["dave"]["score"] == "1"
    assert not list(out.glob("dave-*")) and not list(out.rglob(".tmp-*"))

    capsys.readouterr()
    assert grade(str(subs), "--out", str(out), "--student", "zoe") == 2
    assert "no submission of zoe" in capsys.readouterr().err


def test_an_interrupted_gradebook_export_leaves_the_previous_gradebook(tmp_path):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook

    from autograder.exports.nbgrader import one_transaction, tools_on_path
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with tools_on_path(), Gradebook(url) as gb:  # a new gradebook runs alembic
        gb.update_or_create_assignment("hw1")
    with Gradebook(url) as gb, pytest.raises(KeyboardInterrupt):
        with one_transaction(gb.db):
            gb.update_or_create_student("alice")  # nbgrader commits here: only a flush now
            gb.update_or_create_assignment("hw2")
            raise KeyboardInterrupt
    with Gradebook(url) as gb:
        assert [s.id for s in gb.students] == [] and [a.name for a in gb.assignments] == ["hw1"]
        with one_transaction(gb.db):
            gb.update_or_create_student("alice")
    with Gradebook(url) as gb:
        assert [s.id for s in gb.students] == ["alice"]
