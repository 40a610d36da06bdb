"""The batch's records on disk: which submissions there are, what was graded, the CSVs.

OUT/<submission>/results.json is the one record of a submission's grading
(written atomically, with the sha256 of the file graded); grades.csv and the
LMS CSV are always rebuilt from those records, so a rerun neither loses nor
double-counts a submission.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from autograder.harness.atomic import write_csv
from autograder.late import CSV_COLUMNS as LATE_COLUMNS, csv_cells as late_cells
from autograder.version import grader_version

FINAL = ("graded", "error", "timeout")  # statuses a rerun keeps
SUPERSEDED = "superseded"  # not graded: a newer notebook of the same student and chapter counts (`duplicates`)
CSV_HEADER = ["submission", "chapter", "score", "max", "status", *LATE_COLUMNS]  # score: after any late penalty


@dataclass(frozen=True)
class Job:
    """One notebook to grade."""

    name: str  # unique in the batch; results go to OUT/<name>/results.json
    path: Path
    student: str  # the id an LMS or nbgrader knows the student by
    notebook: str = ""  # the notebook's name (its file stem)
    chapter: str | None = None  # the assignment it was handed in for, where known per notebook (nbgrader)


@dataclass
class Report:
    """What a batch did; `results` holds every job's results.json object (None: not graded)."""

    jobs: list[Job]
    results: dict[str, dict | None]
    graded: int = 0
    skipped: int = 0
    stale: dict[str, int] = field(default_factory=dict)  # chapter -> results that predate its graders
    interrupted: bool = False
    aborted: str = ""  # why the batch stopped early, if it did

    def rows(self) -> list[list]:
        """grades.csv rows, in job order."""
        return [csv_row(job, self.results.get(job.name)) for job in self.jobs]

    def counts(self) -> dict[str, int]:
        """How many submissions ended in each status ("pending": not graded)."""
        out: dict[str, int] = {}
        for job in self.jobs:
            res = self.results.get(job.name)
            status = res["extra_data"].get("status", "?") if res else "pending"
            out[status] = out.get(status, 0) + 1
        return out


# ---------------------------------------------------------------- finding submissions
def find_jobs(paths: list[str]) -> list[Job]:
    """A job per notebook in `paths` (folders searched recursively); names made unique.

    The student id is the first folder under the given folder (DIR/alice/nb.ipynb
    -> alice), or the file's stem for DIR/alice.ipynb and for files given directly.
    """
    found: list[tuple[str, Path, str]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(x for x in p.rglob("*.ipynb") if x.is_file() and ".ipynb_checkpoints" not in x.parts):
                rel = f.relative_to(p)
                student = rel.parts[0] if len(rel.parts) > 1 else f.stem
                found.append(("__".join(rel.with_suffix("").parts), f, student))
        else:
            found.append((p.stem, p, p.stem))
    counts = Counter(n for n, _, _ in found)
    return [Job(n if counts[n] == 1 else f"{n}-{i}", f, s, f.stem) for i, (n, f, s) in enumerate(found)]


def student_id(job: Job) -> str:
    """The id a student's per-student inputs and the similarity report go by: the batch's student name
    (the first folder under the class folder, or the file's stem). The one place to map it to an LMS id."""
    return job.student


def sha256_of(path: Path) -> str:
    """The file's sha256 ("" if it cannot be read: grading will say why)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


# ---------------------------------------------------------------- results on disk
def result_path(out: Path, job: Job) -> Path:
    return out / job.name / "results.json"


def read_result(out: Path, job: Job) -> dict | None:
    """The job's results.json, or None if missing or unreadable."""
    try:
        res = json.loads(result_path(out, job).read_text())
    except (OSError, ValueError):
        return None
    return res if isinstance(res, dict) and isinstance(res.get("extra_data"), dict) else None


def is_finished(result: dict | None, sha: str) -> bool:
    """Whether a stored result is complete: final status, and graded from this very file."""
    if not result:
        return False
    extra = result["extra_data"]
    return extra.get("status") in FINAL and bool(sha) and extra.get("sha256") == sha


def is_current(result: dict, chapter: str | None, versions: dict[str | None, str],
               inputs: str | None = None) -> bool:
    """Whether a finished result stands: graded as `chapter` (when the batch knows it) by the graders,
    reference and harness as they are now (`versions`: chapter -> grader version, filled as needed), on
    the same inputs (`inputs`: the student's `inputs_id` under a course secret, None for the shared ones)."""
    if result["extra_data"].get("inputs_id") != inputs:
        return False
    graded_as = result["extra_data"].get("chapter")
    if chapter and graded_as != chapter:
        return False
    if graded_as not in versions:
        versions[graded_as] = grader_version(graded_as)
    return result["extra_data"].get("grader_version") == versions[graded_as]


def csv_row(job: Job, result: dict | None) -> list:
    """submission, chapter, score, max, status, then raw_score, penalty, hours_late (empty score for a
    submission not graded yet)."""
    if result is None:
        return [job.name, "", "", "", "pending", *late_cells(None)]
    extra = result.get("extra_data", {})
    return [job.name, extra.get("chapter") or "", f"{result['score']:g}", f"{result['max_score']:g}",
            extra.get("status", "?"), *late_cells(result)]


def write_grades_csv(out: Path, report: Report) -> Path:
    """OUT/grades.csv, atomically."""
    path = out / "grades.csv"
    write_csv(path, CSV_HEADER, report.rows())
    return path


def lms_rows(report: Report) -> tuple[list[list], list[str]]:
    """(student id, score) rows, a student's notebooks summed (a superseded one left out); and the
    students left out because one of their notebooks is not graded yet (pending) or its grading crashed."""
    totals: dict[str, float] = {}
    incomplete: set[str] = set()
    for job in report.jobs:
        res = report.results.get(job.name)
        if res is not None and res["extra_data"].get("status") == SUPERSEDED:
            continue
        if res is None or res["extra_data"].get("status") not in FINAL:
            incomplete.add(job.student)
        else:
            totals[job.student] = totals.get(job.student, 0.0) + float(res["score"])
    rows = [[s, f"{v:g}"] for s, v in sorted(totals.items()) if s not in incomplete]
    return rows, sorted(incomplete)


def write_lms_csv(path: Path, report: Report, columns: tuple[str, str] = ("student_id", "score")) -> list[str]:
    """An LMS gradebook import: one row per student (id, points); returns the students left out."""
    rows, left_out = lms_rows(report)
    write_csv(Path(path), list(columns), rows)
    return left_out


def stamp(result: dict, job: Job, sha: str) -> dict:
    """Add the batch's bookkeeping to a result: which file, which student, when."""
    result.setdefault("extra_data", {}).update(
        submission=job.name, student=job.student, notebook=job.notebook, sha256=sha, path=str(Path(job.path).resolve()),
        graded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return result


# ---------------------------------------------------------------- the whole class
def stored_results(out: Path) -> dict[str, dict]:
    """Every readable results.json under OUT, by submission name (its folder under OUT)."""
    found = {}
    for path in sorted(out.rglob("results.json")):
        name = path.parent.relative_to(out).as_posix()
        result = read_result(out, Job(name, path, ""))
        if result is not None and name != ".":
            found[name] = result
    return found


def stored_job(name: str, result: dict) -> Job:
    """The job a stored result was graded as (from its bookkeeping)."""
    extra = result["extra_data"]
    student = extra["student"] if isinstance(extra.get("student"), str) else name.split("/")[0]  # "": no id
    return Job(name, Path(extra.get("path") or name), student,
               extra.get("notebook") or Path(name).name, extra.get("chapter"))


def whole(report: Report, out: Path) -> Report:
    """Add to `report` every result in OUT that its jobs do not cover (students not (re)graded this
    run), so the class tables are rebuilt from every result; jobs sorted by name."""
    covered = {job.name for job in report.jobs}
    for name, result in stored_results(out).items():
        if name not in covered:
            report.jobs.append(stored_job(name, result))
            report.results[name] = result
    report.jobs.sort(key=lambda job: job.name)
    return report


def same_files_as_before(jobs: list[Job], out: Path) -> list[Job]:
    """`jobs` with the name and student of the result OUT already holds for the same file, if any: a
    notebook given on its own is then the same submission as in the class run (no second row)."""
    by_path = {result["extra_data"].get("path"): (name, result) for name, result in stored_results(out).items()}
    aligned = []
    for job in jobs:
        name, result = by_path.get(str(job.path.resolve()), (None, None))
        extra = {} if result is None else result["extra_data"]
        student = extra["student"] if isinstance(extra.get("student"), str) else job.student  # "": no id
        aligned.append(job if name is None else replace(job, name=name, student=student,
                                                        notebook=extra.get("notebook") or job.notebook))
    return aligned


def select_students(jobs: list[Job], students: list[str]) -> tuple[list[Job], list[str]]:
    """The jobs of these students (by student id or submission name); and the names matching none."""
    wanted = set(students)
    chosen = [job for job in jobs if job.student in wanted or job.name in wanted]
    matched = {job.student for job in chosen} | {job.name for job in chosen}
    return chosen, sorted(wanted - matched)


def failure_result(job: Job, chapter: str | None, status: str, message: str, detail: str = "") -> dict:
    """A zero-score result for a submission whose grading did not finish (timeout, crash)."""
    from autograder.grade import bad_result
    from autograder.harness.notebook import read_submission
    chapter = job.chapter or chapter
    try:
        chapter = read_submission(job.path, chapter).chapter
    except Exception:  # noqa: BLE001 - unreadable: keep the chapter we were given
        pass
    try:
        res = bad_result(message, chapter, 0.0)
    except Exception:  # noqa: BLE001 - the graders themselves may be what is broken
        res = {"score": 0.0, "max_score": 0.0, "output": message, "tests": [],
               "extra_data": {"chapter": chapter}}
    res["output"] = message
    res["extra_data"].update(status=status, grader_error=detail[-4000:])
    return res


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold OUT/.lock (one batch per folder) and remove temp files a killed run left."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another grading run is writing to {out}") from None
        for tmp in out.rglob(".tmp-*"):
            tmp.unlink(missing_ok=True)
        yield
