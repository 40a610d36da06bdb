"""The pytest plugin that runs a chapter's graders against one submission.

It owns the student process and the reference for the session (the caller
says where the reference comes from: the harness knows no solutions folder),
and turns each test's outcome into a Gradescope test entry: points from `@graded`,
feedback from `GradingFailure` messages and the test's hint only (never the
test's source, its locals or reference values).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from autograder.harness.check import GradingFailure, is_cuda_oom
from autograder.harness.diagnosis import cause_of
from autograder.harness.results import TestResult
from autograder.harness.sandbox import Sandbox
from autograder.harness.student import StudentProcess, cuda_usable

__all__ = ["GradingPlugin", "TestResult", "gpu_lock"]


@dataclass(eq=False)
class GradingPlugin:
    """State of one grading session: the submission's process, the reference, the results."""

    chapter: str
    cells: list
    sandbox: Sandbox
    seed: int = 0
    budget_seconds: float | None = None  # None: the sandbox's Limits.submission_seconds
    only: str | None = None  # grade only the tests of this function (the known-wrong self-test)
    load_reference: Callable[[str], Any] | None = None  # chapter -> the reference's names (the `ref` fixture)
    results: list[TestResult] = field(default_factory=list)
    _student: StudentProcess | None = None
    _started: float = field(default_factory=time.monotonic)

    def student(self) -> StudentProcess:
        if self._student is None:
            self._student = StudentProcess(self.sandbox, self.cells, self.seed)
        return self._student

    def reference(self):
        if self.load_reference is None:
            raise RuntimeError("this grading session was given no reference (GradingPlugin.load_reference)")
        return self.load_reference(self.chapter)

    def close(self) -> None:
        if self._student is not None:
            self._student.close()

    def pytest_collection_modifyitems(self, config, items) -> None:
        if self.only is not None:
            keep = [i for i in items if getattr(i.function, "graded", {}).get("function") == self.only]
            config.hook.pytest_deselected(items=[i for i in items if i not in keep])
            items[:] = keep

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item) -> None:
        budget = self.budget_seconds or self.sandbox.limits.submission_seconds
        if time.monotonic() - self._started > budget:
            pytest.fail(f"grading stopped: the submission used up its {budget:g} s of grading time", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """CUDA tests share the GPU with other graders (--jobs N); one that runs out of GPU memory is
        run again, alone on this machine's GPU, before it can cost the student anything. Without a
        usable GPU they run on the simulated CUDA device, which needs no lock."""
        if not getattr(item.function, "needs_cuda", False) or not cuda_usable(self.sandbox):
            return (yield)
        with gpu_lock(exclusive=False):
            try:
                return (yield)
            except Exception as exc:  # noqa: BLE001
                if not is_cuda_oom(exc):
                    raise
        with gpu_lock(exclusive=True):
            return item.runtest()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if rep.when == "call" or (rep.when == "setup" and not rep.passed):
            self.results.append(to_result(item, rep, call))


GPU_LOCK = os.path.join(tempfile.gettempdir(), "autograder-gpu.lock")


@contextlib.contextmanager
def gpu_lock(exclusive: bool):
    """A machine-wide lock on the GPU: CUDA tests hold it shared, an out-of-memory rerun exclusively."""
    with open(GPU_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def test_name(item) -> str:
    doc = (getattr(item.function, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else item.name


def feedback(call) -> str:
    """What a student may see of a failure."""
    if call.excinfo is None:
        return ""
    exc = call.excinfo.value
    if isinstance(exc, GradingFailure):
        return str(exc)
    if isinstance(exc, AssertionError):
        return "The check failed."
    if call.excinfo.typename in ("Failed", "Skipped"):
        return str(exc)
    return f"Your answer could not be checked (the check stopped with {call.excinfo.typename})."


def to_result(item, rep, call) -> TestResult:
    info = getattr(item.function, "graded", {"function": "", "points": 0.0, "hint": ""})
    points = info["points"]
    name = test_name(item)
    if rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else "skipped"
        return TestResult(name, info["function"], 0.0, 0.0, "skipped", f"Not run: {reason.removeprefix('Skipped: ')}")
    if rep.passed:
        return TestResult(name, info["function"], points, points, "passed", "")
    if rep.when == "setup" and call.excinfo.typename == "Failed":  # pytest.fail: e.g. the time budget is spent
        return TestResult(name, info["function"], 0.0, points, "failed", str(call.excinfo.value))
    if rep.when == "setup":
        return TestResult(name, info["function"], 0.0, points, "failed",
                          f"The grader could not run this test ({call.excinfo.typename} while setting it up); "
                          "tell your instructor.")
    text = feedback(call)
    cause = cause_of(call.excinfo.value) if call.excinfo else ""
    if info["hint"] and not cause:  # a known cause (NaN, a named mistake) leads instead (diagnosis.py)
        text += f"\nHint: {info['hint']}"
    return TestResult(name, info["function"], 0.0, points, "failed", text.strip(), cause)
