"""Class-scale grading: parallel, resumable, and never stopped by one submission."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import batch
from autograder.batch.io import Job, Report, find_jobs, lms_rows
from tests.batch.toy import CHAPTER, ROOT, make_notebook, toy_chapter  # noqa: F401 - fixture

CLASS = {"alice/98_batch_toy": "ok", "bob": "ok", "carol": "wrong", "dave": "segv", "erin": "loop",
         "frank": "garbage"}
EXPECTED = {"alice__98_batch_toy": ("4", "graded"), "bob": ("4", "graded"), "carol": ("1", "graded"),
            "dave": ("4", "graded"),  # its crashing cell is dropped and the notebook run again without it
            "erin": ("3", "graded"), "frank": ("0", "error")}


def make_class(folder: Path, members: dict[str, str]) -> Path:
    for name, variant in members.items():
        make_notebook(folder / f"{name}.ipynb", variant)
    return folder


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def settings(out: Path, **kw) -> batch.Settings:
    return batch.Settings(out, **{"jobs": 2, "call_timeout": 2.0, "progress": False, **kw})


def no_temp_files(out: Path) -> bool:
    return not list(out.rglob(".tmp-*"))


def test_find_jobs_names_each_notebook_once_and_finds_the_student(tmp_path):
    for rel in ("alice/hw.ipynb", "alice/.ipynb_checkpoints/hw.ipynb", "bob.ipynb", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    jobs = find_jobs([str(tmp_path)])
    assert [(j.name, j.student, j.notebook) for j in jobs] == [("alice__hw", "alice", "hw"), ("bob", "bob", "bob")]


def test_lms_rows_sum_a_students_notebooks_and_leave_out_the_unfinished():
    jobs = [Job("a/1", Path("x"), "a", "1"), Job("a/2", Path("y"), "a", "2"), Job("b/1", Path("z"), "b", "1"),
            Job("c/1", Path("w"), "c", "1")]
    res = lambda score, status: {"score": score, "max_score": 4, "extra_data": {"status": status}}  # noqa: E731
    report = Report(jobs, {"a/1": res(3, "graded"), "a/2": res(1.5, "timeout"), "b/1": res(2, "crashed"),
                           "c/1": None})
    assert lms_rows(report) == ([["a", "4.5"]], ["b", "c"])


def test_a_class_is_graded_in_parallel_then_resumed_not_regraded(toy_chapter, tmp_path):
    subs, out = make_class(tmp_path / "subs", CLASS), tmp_path / "out"
    report = batch.run_batch(find_jobs([str(subs)]), settings(out))
    assert (report.graded, report.skipped, report.interrupted, report.aborted) == (6, 0, False, "")
    rows = {r["submission"]: (r["score"], r["status"]) for r in read_csv(out / "grades.csv")}
    assert rows == EXPECTED
    assert all(r["max"] == "4" for r in read_csv(out / "grades.csv") if r["status"] == "graded")
    erin = json.loads((out / "erin" / "results.json").read_text())
    assert "longer than 2 s" in json.dumps(erin["tests"])  # the endless loop cost one test, not the batch
    assert no_temp_files(out)

    batch.write_lms_csv(tmp_path / "lms.csv", report, ("SIS ID", "Chapter 98"))
    assert read_csv(tmp_path / "lms.csv")[:2] == [{"SIS ID": "alice", "Chapter 98": "4"},
                                                  {"SIS ID": "bob", "Chapter 98": "4"}]

    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    again = batch.run_batch(find_jobs([str(subs)]), settings(out))
    assert (again.graded, again.skipped) == (0, 6)
    assert stamps == {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    assert {r["submission"]: (r["score"], r["status"]) for r in read_csv(out / "grades.csv")} == EXPECTED

    assert len(batch.plan(find_jobs([str(subs)]), out, force=True)[1]) == 6  # --force: all of them again
    make_notebook(subs / "carol.ipynb", "ok")  # a resubmission is a changed file: regraded
    changed = batch.run_batch(find_jobs([str(subs)]), settings(out))
    assert (changed.graded, changed.skipped) == (1, 5)
    assert {r["submission"]: r["score"] for r in read_csv(out / "grades.csv")}["carol"] == "4"


def test_timeouts_and_grader_crashes_never_stop_the_batch(toy_chapter, tmp_path, monkeypatch):
    members = {"a_sleepy": "sleepy", "b_zoe": "ok", "y_boom": "ok", "z_hang": "ok"}
    subs, out = make_class(tmp_path / "subs", members), tmp_path / "out"
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the faulty worker lives in tests/batch/
    faulty = settings(out, submission_timeout=4, kill_after=6, worker="tests.batch.faulty_worker")
    batch.run_batch(find_jobs([str(subs)]), faulty)
    rows = {r["submission"]: (r["score"], r["status"]) for r in read_csv(out / "grades.csv")}
    assert rows == {"y_boom": ("0", "crashed"), "z_hang": ("0", "timeout"), "a_sleepy": ("0", "graded"),
                    "b_zoe": ("4", "graded")}
    assert "longer than 10 s" in json.loads((out / "z_hang" / "results.json").read_text())["output"]
    assert "took longer than" in json.loads((out / "a_sleepy" / "results.json").read_text())["output"]

    rerun = batch.run_batch(find_jobs([str(subs)]), settings(out, jobs=1))
    assert (rerun.graded, rerun.skipped) == (1, 3)  # the crash is retried, the timeout stands
    assert {r["submission"]: r["status"] for r in read_csv(out / "grades.csv")}["y_boom"] == "graded"


def _alive_children(pid: int) -> set[int]:
    """Processes (not zombies) whose parent is `pid`."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if proc.name.isdigit() and int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(proc.name))
    return found


def _still_alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.add(pid)
        except OSError:
            pass
    return alive


def test_kill_9_mid_batch_loses_nothing_and_a_rerun_finishes(toy_chapter, tmp_path):
    subs, out = make_class(tmp_path / "subs", {f"s{i:02d}": "ok" for i in range(10)}), tmp_path / "out"
    cmd = [sys.executable, "-m", "autograder", "grade", str(subs), "--out", str(out), "--jobs", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while len(list(out.rglob("results.json"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    workers = _alive_children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(workers) == 2
    for _ in range(50):
        if not _still_alive(workers):
            break
        time.sleep(0.1)
    assert _still_alive(workers) == set()  # the workers died with their parent
    before = {p: p.read_text() for p in out.rglob("results.json")}
    assert 3 <= len(before) < 10
    assert all(json.loads(text)["extra_data"]["status"] == "graded" for text in before.values())  # none half-written

    rerun = batch.run_batch(find_jobs([str(subs)]), settings(out, jobs=1))
    assert (rerun.graded, rerun.skipped) == (10 - len(before), len(before))
    assert before == {p: p.read_text() for p in before}  # nothing graded twice
    rows = read_csv(out / "grades.csv")
    assert sorted(r["submission"] for r in rows) == [f"s{i:02d}" for i in range(10)]
    assert {(r["score"], r["status"]) for r in rows} == {("4", "graded")}
    assert no_temp_files(out)


def test_a_sandbox_that_cannot_start_stops_the_batch_with_its_reason(toy_chapter, tmp_path, monkeypatch):
    subs, out = make_class(tmp_path / "subs", {"ann": "ok", "ben": "ok"}), tmp_path / "out"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no bwrap to be found
    report = batch.run_batch(find_jobs([str(subs)]), settings(out, isolation="bwrap"))
    assert "bubblewrap" in report.aborted and report.graded == 0
    assert {r["status"] for r in read_csv(out / "grades.csv")} == {"pending"}


def test_a_second_run_on_the_same_output_folder_is_refused(tmp_path):
    from autograder.batch.io import locked
    with locked(tmp_path):
        with pytest.raises(RuntimeError, match="another grading run"):
            with locked(tmp_path):
                pass
