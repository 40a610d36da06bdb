"""Late submissions graded from the command line: --due, --late-policy, --late-cap, --extensions."""
from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from autograder import late
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture

DUE = datetime(2026, 12, 1, 23, 59, tzinfo=timezone.utc)


def test_a_policy_takes_a_share_of_the_maximum_per_started_unit_up_to_its_cap():
    per_hour = late.Policy.parse("per-hour:10", cap=50)
    assert [per_hour.penalty(60, 60, s) for s in (0, 1, 3600, 3601, 99 * 3600)] == [0, 6, 6, 12, 30]
    assert per_hour.penalty(10, 60, 99 * 3600) == 10  # never below zero
    assert late.Policy.parse("per-day:25").penalty(60, 60, 86400 + 60) == 30
    assert late.Policy.parse("zero").penalty(42, 60, 1) == 42 and late.Policy.parse("zero").penalty(42, 60, 0) == 0
    assert late.Policy.parse("none").penalty(42, 60, 10**6) == 0
    for bad in ("per-week:5", "per-hour:", "per-hour:150", "zero:1", ""):
        with pytest.raises(ValueError, match="late policy"):
            late.Policy.parse(bad)
    with pytest.raises(ValueError, match="cap"):
        late.Policy.parse("zero", cap=120)


def test_penalising_again_starts_from_the_raw_score_and_clear_takes_it_away():
    output = "Chapter x: 4 / 4 points.\n\nYour code printed"
    result = {"score": 4.0, "max_score": 4.0, "output": output, "extra_data": {}}
    three_hours = late.Lateness(DUE, DUE + timedelta(hours=3), "file mtime")
    late.penalise(result, three_hours, late.Policy.parse("per-hour:10"))
    late.penalise(result, three_hours, late.Policy.parse("per-hour:10"))
    assert result["score"] == 2.8 and result["extra_data"]["late"]["penalty"] == 1.2
    paragraphs = result["output"].split("\n\n")
    assert len(paragraphs) == 3 and paragraphs[1].startswith("Deadline: submitted 2026-12-02 02:59 UTC, 3 h after")
    assert "Penalty: 1.2 points" in paragraphs[1]
    late.clear(result)
    assert result == {"score": 4.0, "max_score": 4.0, "output": output, "extra_data": {}}


def _at(path: Path, when: datetime) -> None:
    os.utime(path, (when.timestamp(), when.timestamp()))


def _rows(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {r["submission"]: r for r in csv.DictReader(f)}


def test_a_late_submission_is_penalised_an_extension_respected_and_a_new_policy_regrades_nothing(
        toy_chapter, tmp_path, capsys):
    from autograder.cli import main
    subs, out = tmp_path / "subs", tmp_path / "out"
    alice = make_notebook(subs / "alice" / f"{CHAPTER}.ipynb", "ok")
    (subs / "alice" / "timestamp.txt").write_text("2026-12-01 23:00:00.000000 UTC")  # nbgrader's format: on time
    _at(alice, DUE + timedelta(days=9))  # the timestamp file wins over the file's time
    _at(make_notebook(subs / "bob.ipynb", "ok"), DUE + timedelta(hours=3))
    _at(make_notebook(subs / "carol.ipynb", "ok"), DUE + timedelta(hours=3))
    (tmp_path / "ext.csv").write_text("student,extension\ncarol,4h\n")
    assert main(["grade", str(subs), "--out", str(out), "--jobs", "2", "--no-progress", "--due", "2026-12-01T23:59Z",
                 "--late-policy", "per-hour:10", "--late-cap", "50", "--extensions", str(tmp_path / "ext.csv")]) == 0
    assert "deadline: due 2026-12-01 23:59 UTC" in capsys.readouterr().out

    rows = _rows(out)
    assert {n: (r["score"], r["raw_score"], r["penalty"], r["hours_late"]) for n, r in rows.items()} == {
        f"alice__{CHAPTER}": ("4", "4", "0", "0.00"), "bob": ("2.8", "4", "1.2", "3.00"),
        "carol": ("4", "4", "0", "0.00")}
    bob = json.loads((out / "bob" / "results.json").read_text())
    assert bob["score"] == 2.8 and bob["extra_data"]["late"]["submitted_from"] == "file mtime"
    assert "3 h after the due date" in bob["output"] and "Penalty: 1.2 points" in bob["output"]
    carol = json.loads((out / "carol" / "results.json").read_text())["extra_data"]["late"]
    assert (carol["extension"], carol["seconds_late"]) == ("4h", 0)
    alice_late = json.loads((out / f"alice__{CHAPTER}" / "results.json").read_text())["extra_data"]["late"]
    assert alice_late["submitted_from"] == "timestamp.txt"

    graded_at = {p: json.loads(p.read_text())["extra_data"]["graded_at"] for p in out.rglob("results.json")}
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--late-policy", "zero"]) == 0
    assert "0 graded now, 3 already done" in capsys.readouterr().out
    assert {n: r["score"] for n, r in _rows(out).items()} == {f"alice__{CHAPTER}": "4", "bob": "0", "carol": "4"}
    assert json.loads((out / "deadline.json").read_text())["due"] == "2026-12-01T23:59:00+00:00"  # kept
    assert main(["grade", str(subs), "--out", str(out), "--no-progress"]) == 0  # the stored deadline holds
    assert _rows(out)["bob"]["score"] == "0"
    assert graded_at == {p: json.loads(p.read_text())["extra_data"]["graded_at"] for p in out.rglob("results.json")}


@pytest.mark.parametrize("args, message", [
    (["--late-policy", "zero"], "needs both --due"),
    (["--due", "tomorrow", "--late-policy", "zero"], "ISO 8601"),
    (["--due", "2026-12-01T23:59", "--late-policy", "per-hour"], "unknown late policy"),
])
def test_a_half_or_wrong_deadline_is_refused_before_grading(tmp_path, capsys, args, message):
    from autograder.cli import main
    make_notebook(tmp_path / "subs" / "alice.ipynb", "garbage")
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out" / "grades.csv").exists()


def test_a_submission_time_comes_from_lms_metadata_then_timestamp_txt_then_mtime(tmp_path):
    from autograder.batch.deadlines import Deadline, apply, submission_time, summary
    from autograder.batch.ids import Identity
    from autograder.batch.io import Job, Report
    nb = make_notebook(tmp_path / "a" / f"{CHAPTER}.ipynb", "garbage")
    _at(nb, DUE + timedelta(hours=1))
    job = Job("a", nb, "123", CHAPTER)
    assert submission_time(job, None) == (DUE + timedelta(hours=1), "file mtime")
    (tmp_path / "a" / "timestamp.txt").write_text("2026-12-01 23:00:00.000000 UTC")
    assert submission_time(job, None) == (DUE - timedelta(minutes=59), "timestamp.txt")
    metadata = Identity("123", "gradescope", submitted=DUE + timedelta(days=1))
    assert submission_time(job, metadata) == (DUE + timedelta(days=1), "gradescope metadata")

    canvas_late = Identity("123", "canvas", late=True)  # Canvas says late; timestamp.txt says on time
    report = Report([job], {"a": {"score": 0.0, "max_score": 4.0, "output": "", "extra_data": {"status": "error"}}})
    checked = apply(report, Deadline(DUE, late.Policy.parse("zero")), {"a": canvas_late})
    assert (checked.late, checked.lms_late_on_time) == (0, ["a"])
    assert "the LMS marked 1 of them late" in summary(Deadline(DUE, late.Policy.parse("zero")), checked)


def _lms(path: Path) -> dict[str, str]:
    with open(path, newline="") as f:
        return {r["student_id"]: r["score"] for r in csv.DictReader(f)}


def test_a_notebook_regraded_alone_keeps_its_late_penalty_in_every_table(toy_chapter, tmp_path, capsys):
    """The deadline kept in OUT applies to one notebook given alone as to the class, and the LMS CSV the
    class run wrote is rewritten: results.json, grades.csv and lms.csv agree."""
    from autograder.cli import main
    subs, out, lms = tmp_path / "subs", tmp_path / "out", tmp_path / "lms.csv"
    _at(make_notebook(subs / "alice.ipynb", "ok"), DUE - timedelta(hours=1))
    _at(make_notebook(subs / "mia.ipynb", "wrong"), DUE + timedelta(minutes=30))  # 1 started hour late: 10% of 4
    assert main(["grade", str(subs), "--out", str(out), "--no-progress", "--due", DUE.isoformat(),
                 "--late-policy", "per-hour:10", "--lms-csv", str(lms)]) == 0
    assert _rows(out)["mia"]["score"] == "0.6" and _lms(lms) == {"alice": "4", "mia": "0.6"}

    mia = make_notebook(subs / "mia.ipynb", "ok")  # corrected, still 30 minutes late
    _at(mia, DUE + timedelta(minutes=30))
    capsys.readouterr()
    assert main(["grade", str(mia), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "mia" / "results.json").read_text())
    assert result["score"] == 3.6 and result["extra_data"]["late"]["penalty"] == 0.4
    assert "Deadline: submitted" in result["output"] and "Penalty: 0.4 points" in printed
    assert (_rows(out)["mia"]["score"], _rows(out)["mia"]["penalty"]) == ("3.6", "0.4")
    assert _lms(lms) == {"alice": "4", "mia": "3.6"}
