"""A class's statistics, from the results.json files a `grade` run wrote into OUT.

Per chapter: the final scores (after any late penalty), and, over the
submissions whose graders ran (status "graded"), the share that lost points in
each graded function and in each test, and the known mistakes the feedback
named ("... looks like the result of a known mistake: NAME", see
`autograder.harness.check.expect_close`), each counted once per submission. For
the whole folder: the submissions that could not be graded (error, timeout,
crashed), the ones still pending (grades.csv), the ones superseded by a newer notebook of the same
student (not graded, not in the scores), the late ones and the grading time.
"""
from __future__ import annotations

import csv
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MISTAKE = re.compile(r"known mistake: (?P<name>[^\n]+)")
PROBLEMS = ("error", "timeout", "crashed")


@dataclass(frozen=True)
class Submission:
    """What the report needs of one results.json."""

    name: str
    chapter: str
    status: str
    score: float
    max_score: float
    seconds: float | None  # grading time (extra_data.execution_time)
    message: str  # the feedback's first line
    tests: tuple[dict, ...]
    late: dict | None
    student: str = ""
    superseded_by: str = ""  # status "superseded": the submission of the same student that counts


def _submission(path: Path, out: Path, data: dict) -> Submission:
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    seconds = extra.get("execution_time")
    return Submission(
        name=str(extra.get("submission") or path.parent.relative_to(out).as_posix()),
        chapter=str(extra.get("chapter") or "?"), status=str(extra.get("status") or "?"),
        score=float(data.get("score") or 0.0), max_score=float(data.get("max_score") or 0.0),
        seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
        message=str(data.get("output") or "").strip().split("\n", 1)[0],
        tests=tuple(t for t in data.get("tests") or [] if isinstance(t, dict)),
        late=extra.get("late") if isinstance(extra.get("late"), dict) else None,
        student=str(extra.get("student") or ""), superseded_by=str(extra.get("superseded_by") or ""))


def read_submissions(out: Path) -> tuple[list[Submission], list[str]]:
    """Every readable results.json under OUT, and the files that could not be read."""
    found, unreadable = [], []
    for path in sorted(out.rglob("results.json")):
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not an object")
            found.append(_submission(path, out, data))
        except (OSError, ValueError, TypeError) as exc:
            unreadable.append(f"{path}: {exc}")
    return found, unreadable


def read_pending(out: Path) -> list[str]:
    """The submissions grades.csv lists as not graded yet."""
    try:
        with open(out / "grades.csv", newline="") as f:
            return [r["submission"] for r in csv.DictReader(f) if r.get("status") == "pending"]
    except (OSError, KeyError, csv.Error):
        return []


@dataclass(frozen=True)
class Loss:
    """How many of `n` graded submissions lost points on one function or test."""

    name: str
    function: str
    lost: int
    n: int
    points: float  # the function's or test's maximum

    @property
    def share(self) -> float:
        return self.lost / self.n if self.n else 0.0


@dataclass
class ChapterStats:
    """One chapter's scores, losses and named mistakes."""

    chapter: str
    submissions: list[Submission]

    @property
    def scored(self) -> list[Submission]:
        """Submissions with a final score (graded, error, timeout)."""
        return [s for s in self.submissions if s.status in ("graded", "error", "timeout")]

    @property
    def graded(self) -> list[Submission]:
        return [s for s in self.submissions if s.status == "graded"]

    @property
    def max_score(self) -> float:
        return max((s.max_score for s in self.scored), default=0.0)

    def scores(self) -> list[float]:
        return [s.score for s in self.scored]

    def functions(self) -> list[Loss]:
        """Per graded function, the share of graded submissions that lost points in it (worst first)."""
        per: dict[str, list] = {}
        for sub in self.graded:
            got: dict[str, list[float]] = {}
            for t in sub.tests:
                name = (t.get("tags") or ["(no function)"])[0]
                score, top = got.setdefault(name, [0.0, 0.0])
                got[name] = [score + float(t.get("score", 0)), top + float(t.get("max_score", 0))]
            for name, (score, top) in got.items():
                lost, n, points = per.setdefault(name, [0, 0, 0.0])
                per[name] = [lost + (score < top), n + 1, max(points, top)]
        return sorted((Loss(k, k, *v) for k, v in per.items()), key=lambda x: (-x.share, x.name))

    def tests(self) -> list[Loss]:
        """Per test, the share of graded submissions that lost points on it (worst first)."""
        per: dict[tuple[str, str], list] = {}
        for sub in self.graded:
            for t in sub.tests:
                key = (str(t.get("name", "?")), (t.get("tags") or [""])[0])
                lost, n, points = per.setdefault(key, [0, 0, 0.0])
                top = float(t.get("max_score", 0))
                per[key] = [lost + (float(t.get("score", 0)) < top), n + 1, max(points, top)]
        return sorted((Loss(name, fn, *v) for (name, fn), v in per.items()), key=lambda x: (-x.share, x.name))

    def mistakes(self) -> list[tuple[str, str, int]]:
        """(function, named mistake, submissions that made it), most common first."""
        counts: Counter = Counter()
        for sub in self.graded:
            seen = set()
            for t in sub.tests:
                for match in MISTAKE.finditer(str(t.get("output") or "")):
                    seen.add(((t.get("tags") or [""])[0], match["name"].strip().rstrip(".")))
            counts.update(seen)
        return [(fn, name, n) for (fn, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


@dataclass
class ClassStats:
    """Everything the report shows."""

    out: Path
    submissions: list[Submission]
    unreadable: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, out: Path) -> "ClassStats":
        if not out.is_dir():
            raise ValueError(f"{out} is not a folder of results (python -m autograder grade ... --out {out})")
        subs, unreadable = read_submissions(out)
        if not subs:
            raise ValueError(f"no results.json under {out}: grade the class first "
                             f"(python -m autograder grade SUBMISSIONS --out {out})")
        return cls(out, subs, unreadable, read_pending(out))

    def chapters(self) -> list[ChapterStats]:
        """One per chapter that has graded submissions (a file that is no notebook at all may name no
        chapter, or a wrong one: it is among the problems)."""
        names = sorted({s.chapter for s in self.submissions if s.status == "graded"})
        return [ChapterStats(c, [s for s in self.submissions if s.chapter == c]) for c in names]

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(s.status for s in self.submissions).items()))

    def problems(self) -> list[Submission]:
        return [s for s in self.submissions if s.status in PROBLEMS]

    def superseded(self) -> list[Submission]:
        """Older notebooks of a student whose newer one of the same chapter counts (not graded)."""
        return [s for s in self.submissions if s.status == "superseded"]

    def late(self) -> list[Submission]:
        return [s for s in self.submissions if s.late and s.late.get("seconds_late", 0) > 0]

    def seconds(self) -> list[float]:
        return [s.seconds for s in self.submissions if s.seconds is not None]


def describe(values: list[float]) -> dict[str, float]:
    """mean, median, min and max (empty for no values)."""
    if not values:
        return {}
    return {"mean": statistics.fmean(values), "median": statistics.median(values), "min": min(values),
            "max": max(values)}
