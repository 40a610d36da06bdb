"""One notebook per student and chapter: of several notebooks of one chapter from one student
(`erin/hw2 final.ipynb` and `erin/hw2 final (1).ipynb`), the newest is graded and the others are
superseded.

The newest is the one submitted last, as the deadline reads a submission's time (`deadlines.
submission_time`: an LMS's metadata, a timestamp.txt, else the file's modification time); a tie goes
to the later name. A superseded notebook is not graded: its results.json says why (status
"superseded", score 0, `extra_data.superseded_by`), grades.csv lists it with that status, and the LMS
CSV, the deadline, the similarity report and the class report's scores leave it out. Every grading
path chooses the same way, among the notebooks it is given and the results already in OUT, so that
one older notebook regraded alone cannot count again.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from autograder.batch.deadlines import remembered, submission_time
from autograder.batch.ids import Identity
from autograder.batch.io import FINAL, SUPERSEDED, Job, Report, sha256_of, stamp, stored_job, stored_results


@dataclass
class Choice:
    """A student's notebooks of one chapter: the one that counts and the older ones."""

    student: str
    chapter: str
    kept: Job
    superseded: list[Job]
    times: dict[str, tuple[datetime, str]] = field(default_factory=dict)  # name -> (submitted, from where)

    def when(self, job: Job) -> str:
        submitted, source = self.times[job.name]
        return f"submitted {submitted.strftime('%Y-%m-%d %H:%M %Z').strip()}, from its {source}"

    def describe(self) -> str:
        """For the terminal: which notebook counts and which do not."""
        others = "; ".join(f"{job.path} ({self.when(job)})" for job in self.superseded)
        return (f"{self.student}: {1 + len(self.superseded)} notebooks of {self.chapter}; graded the newest, "
                f"{self.kept.path} ({self.when(self.kept)}); not graded (status {SUPERSEDED}): {others}")


def choose(jobs: list[Job], chapter: str | None, out: Path,
           identities: dict[str, Identity] | None = None) -> list[Choice]:
    """The students with several notebooks of one chapter among `jobs` and the results in OUT."""
    stored = stored_results(out)
    given = {job.name for job in jobs}
    candidates = [(job, (identities or {}).get(job.name)) for job in jobs]
    for name, result in stored.items():
        extra = result["extra_data"]
        if name not in given and extra.get("status") in (*FINAL, SUPERSEDED) and Path(extra.get("path") or "").is_file():
            job = stored_job(name, result)
            candidates.append((job, remembered(job, result).get(name)))
    groups: dict[tuple[str, str], list[tuple[Job, Identity | None]]] = {}
    for job, identity in candidates:
        graded_as = job.chapter or chapter
        if job.student and graded_as:
            groups.setdefault((job.student, graded_as), []).append((job, identity))
    choices = []
    for (student, graded_as), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        times = {job.name: submission_time(job, identity) for job, identity in members}
        ordered = sorted((job for job, _ in members), key=lambda job: (times[job.name][0], job.name))
        choices.append(Choice(student, graded_as, ordered[-1], ordered[:-1], times))
    return choices


def superseded_names(choices: list[Choice]) -> set[str]:
    return {job.name for choice in choices for job in choice.superseded}


def superseded_result(choice: Choice, job: Job, max_score: float) -> dict:
    """The results.json of a notebook that does not count: score 0, and why."""
    text = (f"Not graded: {choice.student} handed in a newer notebook of {choice.chapter}, {choice.kept.path} "
            f"({choice.when(choice.kept)}), and only the newest counts. This one, {job.path}, was "
            f"{choice.when(job)}.")
    result = {"score": 0.0, "max_score": max_score, "output": text, "tests": [],
              "extra_data": {"status": SUPERSEDED, "chapter": choice.chapter, "superseded_by": choice.kept.name}}
    return stamp(result, job, sha256_of(job.path))


def mark(report: Report, choices: list[Choice]) -> Report:
    """Put each superseded notebook's result into `report` (the whole class), out of its maximum of the
    notebook that counts; the report's jobs then cover them all."""
    covered = {job.name for job in report.jobs}
    for choice in choices:
        kept = report.results.get(choice.kept.name) or {}
        for job in choice.superseded:
            old = report.results.get(job.name) or {}
            top = float(kept.get("max_score") or old.get("max_score") or 0.0)
            new = superseded_result(choice, job, top)
            if old.get("extra_data", {}).get("superseded_by") == choice.kept.name and old.get("output") == new["output"]:
                continue  # unchanged: its file is not rewritten
            report.results[job.name] = new
            if job.name not in covered:
                report.jobs.append(replace(job, chapter=None))
                covered.add(job.name)
    report.jobs.sort(key=lambda job: job.name)
    return report
