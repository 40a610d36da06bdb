"""Grade one submission with the hidden graders: check the file, run the chapter's graders against the
reference solution, build results.json (the harness does the running; this module knows where the
graders and the solutions are)."""
from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path
import pytest
import torch

from autograder.assignment import looks_like
from autograder.graded import grader_file, graded_functions, graded_tests, max_points  # noqa: F401 - also read from here
from autograder.harness.notebook import BadSubmission, chapter_from_name, read_submission
from autograder.paths import chapters, graders_dir
from autograder.reference import load_reference
from autograder.harness.plugin import GradingPlugin, TestResult
from autograder.harness.results import feedback_lines, results_json
from autograder.harness.sandbox import Sandbox
from autograder.version import grader_version
from autograder.harness.seeds import PerStudentInputs, inputs_id
from autograder.harness.student import cuda_usable


def for_one_notebook() -> None:
    """Settings for a process that grades one notebook and exits (the command with one file, Gradescope).

    The reference cache is off (nothing to reuse, and a miss runs a helper twice), and torch runs on
    one thread here: the trusted side's tensors are tiny, and an OpenMP pool spinning against the
    sandbox's processes for the cores made loading the reference 7 times slower on 2 cores
    (benchmarks/bench_grade_breakdown.py).
    """
    os.environ.setdefault("AUTOGRADER_REFERENCE_CACHE", "off")
    torch.set_num_threads(1)


def bad_result(message: str, chapter: str | None, seconds: float, **extra) -> dict:
    """Score 0 out of the chapter's maximum with a clear message, for a file that cannot be graded."""
    try:
        total = max_points(chapter) if chapter in chapters() else 0.0
    except Exception:  # noqa: BLE001 - a broken grader file must not crash the batch here
        total = 0.0
    return results_json(chapter, [], f"This submission could not be graded: {message}",
                        {"status": "error", "execution_time": round(seconds, 2),
                         "grader_version": grader_version(chapter), **extra}, max_score=total)


# pytest plugins the graders do not use (they take only the `student` and `ref` fixtures). Each costs
# time in every session: `logging` installs handlers around every test phase, `unraisableexception`
# runs gc.collect() at the end of the session (benchmarks/bench_grade_breakdown.py). Graders fail
# through `expect` (GradingFailure), so pytest's assertion rewriting (`--assert=plain`: off) buys
# nothing, and setting it up reads every installed package's metadata each session.
UNUSED_PLUGINS = ("logging", "unraisableexception", "threadexception", "faulthandler", "pastebin",
                  "junitxml", "doctest", "stepwise", "setuponly", "setupplan", "legacypath", "tmpdir",
                  "monkeypatch", "recwarn", "subtests", "unittest")


def run_graders(plugin: GradingPlugin, extra_plugins: tuple = ()) -> None:
    """Run the chapter's grader file with pytest, quietly, in this process (`extra_plugins`: e.g. a
    benchmark's timers)."""
    args = [str(grader_file(plugin.chapter)), "-c", str(graders_dir() / "pytest.ini"),
            "--rootdir", str(graders_dir()), "-q", "--no-header", "--tb=no", "-p", "no:randomly",
            "--import-mode=importlib", "--assert=plain", "--capture=sys",
            *(arg for name in UNUSED_PLUGINS for arg in ("-p", f"no:{name}"))]
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(args, plugins=[plugin, *extra_plugins])


def grade_submission(path: str | Path, sandbox: Sandbox, chapter: str | None = None, seed: int = 0,
                     only: str | None = None, inputs_key: bytes | None = None) -> dict:
    """Grade one notebook in a fresh student process of `sandbox`; return its results.json object.

    `only`: run just the tests of that graded function (the scores then cover those tests only).
    `inputs_key`: the student's key (`seeds.student_key`): the hidden inputs are then this student's own.
    """
    started = time.monotonic()
    try:
        sub = read_submission(path, chapter)
    except BadSubmission as exc:
        return bad_result(str(exc), chapter or chapter_from_name(Path(path)), time.monotonic() - started)
    if sub.chapter is None:
        return bad_result("the notebook does not say which chapter it is for; grade it with "
                          "--chapter NN_name", None, time.monotonic() - started)
    if sub.chapter not in chapters():
        return bad_result(f"there are no graders for chapter {sub.chapter!r} "
                          f"(chapters: {', '.join(chapters())})", sub.chapter, time.monotonic() - started)
    other = looks_like(sub.cells, sub.chapter)
    if other:
        return bad_result(f"this looks like the notebook of chapter {other}, not of {sub.chapter}: submit "
                          f"your {sub.chapter} notebook", sub.chapter, time.monotonic() - started, looks_like=other)
    plugin = GradingPlugin(sub.chapter, sub.cells, sandbox, seed, only=only, load_reference=load_reference)
    try:
        run_graders(plugin, (PerStudentInputs(inputs_key, sub.chapter),) if inputs_key else ())
        report = plugin.student().report or {}
        load_failure = plugin.student().load_failure
        printed = "\n".join(plugin.student().printed)
    finally:
        plugin.close()
    tests: list[TestResult] = plugin.results
    score = sum(t.score for t in tests)
    total = sum(t.max_score for t in tests)
    lines = feedback_lines(f"Chapter {sub.chapter}: {score:g} / {total:g} points.", load_failure,
                           report, printed, tests)
    cuda = cuda_usable(sandbox)
    if not cuda and torch.cuda.is_available():
        lines.append("Warning: this grading machine has a GPU, but the sandbox could not use it; the CUDA "
                     "tests ran on a simulated CUDA device instead.")
    extra = {"status": "graded", "execution_time": round(time.monotonic() - started, 2),
             "isolation": sandbox.isolation, "cuda": cuda,  # False: CUDA tests ran on the simulated device
             "grader_version": grader_version(sub.chapter),
             **({"inputs": "per student", "inputs_id": inputs_id(inputs_key)} if inputs_key else {})}
    return results_json(sub.chapter, tests, "\n\n".join(lines), extra)
