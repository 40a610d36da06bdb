"""Two notebooks of one chapter from one student (`hw2 final.ipynb`, `hw2 final (1).ipynb`): the newest is
graded, the other is superseded (not graded, not counted), on every grading path and in every table."""
from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from autograder.cli import main
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

NOW = datetime.now(timezone.utc)


def _at(path: Path, when: datetime) -> Path:
    os.utime(path, (when.timestamp(), when.timestamp()))
    return path


def _table(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_of_two_notebooks_of_one_student_the_newest_counts_everywhere(toy_chapter, tmp_path, capsys):
    subs, out, lms = tmp_path / "subs", tmp_path / "out", tmp_path / "lms.csv"
    make_notebook(subs / "alice.ipynb", "ok")
    old = _at(make_notebook(subs / "erin" / "hw2 final.ipynb", "wrong"), NOW - timedelta(hours=2))
    new = _at(make_notebook(subs / "erin" / "hw2 final (1).ipynb", "ok"), NOW - timedelta(hours=1))
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--lms-csv", str(lms)]) == 0
    err = capsys.readouterr().err
    assert f"erin: 2 notebooks of {CHAPTER}; graded the newest, {new}" in err and str(old) in err

    def check() -> None:
        assert {r["student_id"]: r["score"] for r in _table(lms)} == {"alice": "4", "erin": "4"}
        rows = {r["submission"]: (r["score"], r["status"]) for r in _table(out / "grades.csv")}
        assert rows == {"alice": ("4", "graded"), "erin__hw2 final": ("0", "superseded"),
                        "erin__hw2 final (1)": ("4", "graded")}
        older = json.loads((out / "erin__hw2 final" / "results.json").read_text())
        assert older["extra_data"]["superseded_by"] == "erin__hw2 final (1)" and "newer notebook" in older["output"]

    check()
    assert main(["grade", str(old), "--out", str(out)]) == 0  # the older one given alone: still not counted
    assert "not graded: erin handed in a newer notebook" in capsys.readouterr().err
    check()
    assert main(["report", str(out)]) == 0
    assert "superseded: erin__hw2 final (a newer notebook of erin counts: erin__hw2 final (1))" in \
        capsys.readouterr().out
    assert "erin__hw2 final (1)" in (out / "report.html").read_text()
