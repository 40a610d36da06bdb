"""A class of chapter 02 as an instructor meets it (issue 40): correct notebooks, a known mistake, an
empty one, an imports cell that fails, an endless loop, another chapter's, two late ones, a near-copy,
a student missing from the roster and two notebooks of one student. Every student gets the grade their
notebook deserves, and every export says the same: results.json, grades.csv, the Canvas CSV, the class
report and the similarity report, also after one late notebook is regraded alone."""
from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from autograder.cli import main
from autograder.graded import graded_tests, max_points
from autograder.report.stats import ClassStats
from tests.class02 import CHAPTER, write

DUE = datetime(2026, 12, 1, 23, 59, tzinfo=timezone.utc)
ON_TIME = DUE - timedelta(hours=3)
CLASS = {  # file: (kind, submitted)
    "alice.ipynb": ("ok", ON_TIME),
    "bob.ipynb": ("mistake", ON_TIME),
    "carol.ipynb": ("empty", ON_TIME),
    "dave.ipynb": ("import_fails", ON_TIME),
    "frank.ipynb": ("loop", ON_TIME),
    "gina.ipynb": ("chapter03", ON_TIME),
    "hugo.ipynb": ("near_copy", ON_TIME),
    "mia.ipynb": ("ok", DUE + timedelta(minutes=30)),  # 1 started hour late: 10%
    "nora.ipynb": ("mistake", DUE + timedelta(minutes=90)),  # 2 started hours late: 20%
    "erin/hw2 final.ipynb": ("mistake", ON_TIME - timedelta(hours=1)),
    "erin/hw2 final (1).ipynb": ("ok", ON_TIME),  # the newest: it counts
    "zoe.ipynb": ("ok", ON_TIME),  # not in the roster
}
ROSTER = {"alice*": "S1001", "bob*": "S1002", "carol*": "S1003", "dave*": "S1004", "erin/*": "S1005",
          "frank*": "S1006", "gina*": "S1007", "hugo*": "S1008", "mia*": "S1009", "nora*": "S1010"}


def points_of(function: str) -> float:
    """What the graders declare one function's tests are worth."""
    return sum(f.graded["points"] for f in graded_tests(CHAPTER) if f.graded["function"] == function)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def exports(out: Path, lms: Path) -> dict[str, dict]:
    """Per submission: its score in results.json, grades.csv and the Canvas CSV (by roster id), its status."""
    results = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/results.json")}
    table = {r["submission"]: r for r in _rows(out / "grades.csv")}
    canvas = {r["SIS User ID"]: r["Attention (02)"] for r in _rows(lms)}
    assert set(results) == set(table)
    found = {}
    for name, result in results.items():
        student = result["extra_data"]["student"]
        found[name] = {"json": result["score"], "csv": float(table[name]["score"]),
                       "status": table[name]["status"], "lms": canvas.get(student), "student": student,
                       "penalty": table[name]["penalty"]}
    return found


def test_a_class_of_chapter_02_gets_the_grades_it_deserves_in_every_export(tmp_path, capsys):
    subs, out, lms = tmp_path / "submissions" / "hw2", tmp_path / "grades" / "hw2", tmp_path / "canvas.csv"
    for rel, (kind, when) in CLASS.items():
        path = write(subs / rel, kind)
        os.utime(path, (when.timestamp(), when.timestamp()))
    (tmp_path / "roster.csv").write_text("file,id\n" + "".join(f"{p},{i}\n" for p, i in ROSTER.items()))
    top = max_points(CHAPTER)
    common = ["--no-progress", "--isolation", "process", "--call-timeout", "2"]
    assert main(["grade", str(subs), "--out", str(out), "--jobs", "2", *common, "--chapter", CHAPTER,
                 "--roster", str(tmp_path / "roster.csv"), "--due", DUE.isoformat(), "--late-policy",
                 "per-hour:10", "--lms-csv", str(lms), "--lms-format", "canvas", "--lms-columns",
                 "SIS User ID,Attention (02)"]) == 0
    err = capsys.readouterr().err
    assert "S1005: 2 notebooks of 02_attention; graded the newest" in err and "zoe.ipynb: no row" in err

    def check() -> dict[str, dict]:
        got = exports(out, lms)
        for name, g in got.items():  # every export says the same
            assert g["json"] == g["csv"], (name, g)
            if g["status"] != "superseded" and g["student"]:
                assert g["lms"] is not None and float(g["lms"]) == g["csv"], (name, g)
        score = {name: g["csv"] for name, g in got.items()}
        assert score["alice"] == score["hugo"] == score["erin__hw2 final (1)"] == score["zoe"] == top
        assert 0 < score["bob"] < top and score["carol"] == 0
        # Jupyter defines nothing after the imports cell fails (every def names `torch` in its
        # annotations): 0 is deserved, and the cells compile as Jupyter's do (issue 40, defect 4).
        assert score["dave"] == 0 and "ModuleNotFoundError" in json.loads(
            (out / "dave" / "results.json").read_text())["output"]
        assert score["frank"] == top - points_of("location_score")  # lost to the endless loop, and no more
        assert (score["gina"], got["gina"]["status"]) == (0, "error")
        assert score["mia"] == round(top * 0.9, 4) and float(got["mia"]["penalty"]) == round(top * 0.1, 4)
        assert score["nora"] == round(score["bob"] - top * 0.2, 4)  # bob's mistake, 2 started hours late
        assert got["erin__hw2 final"]["status"] == "superseded" and float(got["erin__hw2 final (1)"]["lms"]) == top
        assert got["zoe"]["student"] == "" and len(_rows(lms)) == 10  # one row per rostered student
        stats = ClassStats.read(out)
        (chapter,) = stats.chapters()
        assert sorted(chapter.scores()) == sorted(g["csv"] for g in got.values() if g["status"] != "superseded")
        assert [s.name for s in stats.superseded()] == ["erin__hw2 final"]
        return got

    first = check()
    assert main(["grade", str(subs / "mia.ipynb"), "--out", str(out), "--isolation", "process"]) == 0
    assert check()["mia"] == first["mia"]  # regraded alone: still late, in every export

    assert main(["report", str(out)]) == 0
    assert main(["similarity", str(out)]) == 0
    similar = _rows(out / "similarity.csv")
    assert {similar[0]["submission_a"], similar[0]["submission_b"]} == {"alice", "hugo"} or \
        float(similar[0]["similarity"]) >= 0.9
    page = (out / "similarity.html").read_text()
    assert f"<title>Similarity report: {CHAPTER}</title>" in page
