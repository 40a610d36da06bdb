"""Public checks: recorded requests replayed against a student's notebook.

A public check is a request the harness can send to a student process (a
`call` of a function or a `module` built and called), the reply the
reference gave to it, and the replies known mistakes gave. `make release`
records them (course/release.py) on inputs other than the hidden graders'
and ships them as a tensor file read with `torch.load(weights_only=True)`:
no pickled code, no grader, no solution. Replaying them uses the same
notebook reader, sandbox, student proxy, comparison (`expect_close`, which
names a known mistake) and results format as the autograder.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from autograder.harness.check import GradingFailure, expect, expect_close, expect_unmodified
from autograder.harness.diagnosis import cause_of
from autograder.harness.notebook import BadSubmission, chapter_from_name, read_submission
from autograder.harness.results import TestResult, feedback_lines, results_json
from autograder.harness.sandbox import Sandbox
from autograder.harness.student import StudentError, StudentProcess

FORMAT = 1
RTOL, ATOL = 1e-3, 1e-4  # looser than most graders: a public check flags a wrong idea, not rounding
FIELDS = {"value": "your output", "grads": "the gradients of your output w.r.t. its inputs",
          "attrs": "your module's attribute", "param_grads": "the gradient of your module's parameter"}


def load_checks(path: str | Path) -> dict:
    """A chapter's public checks: {"format", "chapter", "checks": [...]} (read without unpickling code)."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("checks"), list):
        raise ValueError(f"{path} is not a public-checks file of format {FORMAT}")
    return data


def _compare(got: Any, want: Any, what: str, mistakes: dict) -> None:
    """expect_close, through dicts (module attributes, parameter gradients, dict outputs)."""
    if isinstance(want, dict):
        expect(isinstance(got, dict), f"{what} should be a dict, got {type(got).__name__}")
        for key, value in want.items():
            expect(key in got, f"{what} is missing {key!r}")
            sub = {name: m[key] for name, m in mistakes.items() if isinstance(m, dict) and key in m}
            _compare(got[key], value, f"{what} {key!r}" if what.endswith(("attribute", "parameter")) else
                     f"{what}[{key!r}]", sub)
        return
    expect_close(got, want, what, rtol=RTOL, atol=ATOL, mistakes=mistakes)


def check_reply(reply: dict, check: dict) -> None:
    """Raise GradingFailure unless the student's reply matches the reference's (naming a known mistake)."""
    want, request = check["want"], check["request"]
    for key, what in FIELDS.items():
        if key in want:
            mistakes = {name: m[key] for name, m in check.get("mistakes", {}).items() if key in m}
            _compare(reply.get(key), want[key], what, mistakes)
    if request.get("op") == "call":
        expect_unmodified(list(request.get("args", ())), reply.get("inputs", []), str(request.get("name")))


def run_check(student: StudentProcess, check: dict) -> TestResult:
    """One public check: each of its requests, replayed and compared."""
    name, function, points = check["name"], check["function"], float(check.get("points", 1.0))
    try:
        for part in check["parts"]:
            check_reply(student.replay(part["request"]), part)
    except GradingFailure as exc:
        cause = cause_of(exc)  # a known cause (NaN, a named mistake) leads instead of the hint (diagnosis.py)
        text = str(exc) + (f"\nHint: {check['hint']}" if check.get("hint") and not cause else "")
        return TestResult(name, function, 0.0, points, "failed", text.strip(), cause)
    return TestResult(name, function, points, points, "passed", "")


def bad_result(message: str, chapter: str | None, seconds: float) -> dict:
    return results_json(chapter, [], f"This notebook could not be checked: {message}",
                        {"status": "error", "execution_time": round(seconds, 2)})


def check_notebook(path: str | Path, checks: dict, sandbox: Sandbox, seed: int = 0) -> dict:
    """Run `checks` (from `load_checks`) against the notebook at `path`; a results.json object."""
    started = time.monotonic()
    chapter = checks.get("chapter")
    try:
        sub = read_submission(path, chapter)
    except BadSubmission as exc:
        return bad_result(str(exc), chapter or chapter_from_name(Path(path)), time.monotonic() - started)
    student = StudentProcess(sandbox, sub.cells, seed)
    try:
        tests = [run_check(student, check) for check in checks["checks"]]
        report = student.loaded()
        load_failure, printed = student.load_failure, "\n".join(student.printed)
    except StudentError as exc:  # pragma: no cover - run_check turns these into failed checks
        load_failure, tests, report, printed = str(exc), [], {}, ""
    finally:
        student.close()
    score, total = sum(t.score for t in tests), sum(t.max_score for t in tests)
    lines = feedback_lines(f"Chapter {chapter}, public checks: {score:g} / {total:g} points.",
                           load_failure, report, printed, tests)
    extra = {"status": "graded", "execution_time": round(time.monotonic() - started, 2),
             "isolation": sandbox.isolation, "public_checks": True}
    return results_json(chapter, tests, "\n\n".join(lines), extra)
