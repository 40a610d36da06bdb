"""Every command of the instructors' pages on grading a class (book/instructors/class.md, then lms.md),
run in order in one bash session against a small class of chapter 02, in a folder that looks like the
instructor repository (its Makefile, requirements, .venv and exercises linked).

The class, in submissions/hw2 as the pages say: alice (the solution), bob (alice's file, handed in two
hours late), carol/02_attention.ipynb (the exercise untouched, late but within her two-day extension),
dave (not a notebook). Submission times are the files' modification times, set here; TZ is UTC, so
the page's due date without a zone is UTC. HOME is a new folder (the secret goes to ~). PYTHONPATH is
this checkout, so the commands run its code even where .venv is shared with another checkout.

(The quickstart's commands run in `make test`: tests/test_doc_commands.py.)
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import jupytext
import pytest

from tests.doc_commands import commands, failed_command, session_script

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "book" / "instructors" / name for name in ("class.md", "lms.md")]


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def make_class(work: Path) -> None:
    hw = work / "submissions" / "hw2"
    (hw / "carol").mkdir(parents=True)
    jupytext.write(jupytext.read(ROOT / "solutions" / "02_attention.py"), hw / "alice.ipynb")
    shutil.copy(hw / "alice.ipynb", hw / "bob.ipynb")
    shutil.copy(ROOT / "exercises" / "02_attention.ipynb", hw / "carol" / "02_attention.ipynb")
    (hw / "dave.ipynb").write_text("{not json")
    for path, when in (("alice.ipynb", "2026-12-01T20:00"), ("bob.ipynb", "2026-12-02T01:30"),
                       ("carol/02_attention.ipynb", "2026-12-02T12:00"), ("dave.ipynb", "2026-12-01T10:00")):
        os.utime(hw / path, (utc(when), utc(when)))


def test_the_class_and_lms_pages_commands_grade_a_class(tmp_path):
    cmds = [c for page in PAGES for c in commands(page.read_text())]
    assert len(cmds) >= 10, [c.text for c in cmds]
    work = tmp_path / "course"
    work.mkdir()
    for name in ("Makefile", "requirements.txt", "pyproject.toml", ".venv", "exercises"):
        (work / name).symlink_to(ROOT / name)
    make_class(work)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), TZ="UTC", PYTHONPATH=str(ROOT))  # this checkout's code, whatever .venv's editable install names
    done = subprocess.run(["bash", "-c", session_script(cmds)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=1800)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"failed at {failed_command(done.stdout)}\n{out[-5000:]}"
    grades = work / "grades" / "hw2"

    rows = {r["submission"]: r for r in csv.DictReader(open(grades / "grades.csv"))}
    assert set(rows) == {"alice", "bob", "carol__02_attention", "dave"}, rows
    top = float(rows["alice"]["max"])
    assert top > 0 and float(rows["alice"]["score"]) == top and rows["alice"]["penalty"] == "0"
    # bob: 2 started hours late at 10% of the maximum an hour
    assert float(rows["bob"]["raw_score"]) == top
    assert float(rows["bob"]["penalty"]) == pytest.approx(0.2 * top, abs=0.01)
    assert float(rows["bob"]["score"]) == pytest.approx(0.8 * top, abs=0.01)
    assert rows["carol__02_attention"]["status"] == "graded" and rows["carol__02_attention"]["penalty"] == "0"
    assert rows["dave"]["status"] == "error"
    assert "grading as 02_attention" in out
    assert "1 submission: 1 graded now" in out  # --student bob

    assert (grades / "report.html").is_file() and "report: grades/hw2/report.html" in out
    pairs = list(csv.DictReader(open(grades / "similarity.csv")))
    assert {pairs[0]["submission_a"], pairs[0]["submission_b"]} == {"alice", "bob"}
    assert pairs[0]["identical_file"] == "yes"
    assert (work / "similarity" / "hw2" / "similarity.html").is_file()

    secret = json.loads((work / "grades" / "hw2-secret" / "alice" / "results.json").read_text())
    assert secret["extra_data"]["inputs"] == "per student" and secret["score"] == secret["max_score"]
    assert (home / "attention-fall-2026.secret").is_file()

    lms = {r["SIS User ID"]: r["Attention (02)"] for r in csv.DictReader(open(grades / "lms.csv"))}
    assert lms == {"S001": rows["alice"]["score"], "S002": rows["bob"]["score"], "S003": "0"}, lms
    assert "dave.ipynb: no row of the roster matches it" in out
