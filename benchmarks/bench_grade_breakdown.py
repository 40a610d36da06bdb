"""Where does the time of grading one submission go?

Two views, measured in the same run, on the same machine:

1. **One submission, one command** (`python -m autograder grade NOTEBOOK`): a fresh
   Python that imports torch and pytest, starts the sandbox, loads the reference and
   grades. Its phases are timed in a fresh process, against a bare
   `python -c "import torch"` (the floor of any fresh grader process).
2. **A warm worker** (what each `--jobs N` worker of a class run is): the sandbox, the
   imports and the reference are ready; each submission costs reading, the student's
   cells, the graders' calls on the student side, the wire, the graders' own work on
   the trusted side (reference values, known mistakes, comparisons) and pytest itself.

The solution of the chapter is the submission. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_grade_breakdown.py [CHAPTER] [-n 10] [--isolation auto]
"""
from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections import defaultdict
from pathlib import Path

ROOT = Path(os.environ.get("BENCH_ROOT") or Path(__file__).resolve().parent.parent)  # a baseline's tree
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class Clock:
    """Named running totals of seconds (and counts)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.counts[name] += 1


def timed(fn, clock: Clock, name: str):
    """`fn`, adding each call's duration to `clock[name]`."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.add(name, time.perf_counter() - started)
    return run


def wrap(owner, attr: str, clock: Clock, name: str):
    """Replace `owner.attr` by a version that adds its duration to `clock[name]`; returns the original."""
    original = getattr(owner, attr)
    setattr(owner, attr, timed(original, clock, name))
    return original


class TestTimer:
    """A pytest plugin that sums the duration of the tests' call phase."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def pytest_runtest_makereport(self, item, call):
        if call.when == "call":
            self.clock.add("test calls", call.duration)


def timed_reference(clock: Clock, load):
    """`load_reference`, with each of the reference's plain functions timed (classes left alone, so
    that isinstance checks against them still work)."""

    @functools.lru_cache(maxsize=None)
    def load_timed(chapter: str):
        ns = load(chapter)
        return types.SimpleNamespace(**{k: timed(v, clock, "reference functions")
                                        if isinstance(v, types.FunctionType) else v for k, v in vars(ns).items()})

    return load_timed


def warm_breakdown(chapter: str, n: int, isolation: str) -> dict:
    """Grade the solution `n` times in one warm process, timing each part; mean seconds per submission."""
    import torch
    import autograder.grade as grade
    from autograder.harness import student as student_mod
    from autograder.harness.sandbox import Limits, Sandbox
    from autograder.reference import load_reference

    torch.set_num_threads(1)
    clock = Clock()
    notebook = ROOT / "solutions" / f"{chapter}.py"
    with Sandbox(Limits(threads=1), isolation=isolation) as sandbox:
        load_reference(chapter)
        grade.grade_submission(notebook, sandbox, chapter)  # warm-up, not counted
        gc.collect()
        gc.freeze()  # as a batch worker does once it is ready (autograder/batch/worker.py)
        wrap(grade, "read_submission", clock, "reading")
        wrap(sandbox, "spawn", clock, "fork of the zygote")
        wrap(student_mod.StudentProcess, "_start", clock, "student start (fork + cells)")
        original_request = student_mod.StudentProcess._request

        def request(self, req, what):
            before = clock.seconds["student start (fork + cells)"]
            started = time.perf_counter()
            reply = original_request(self, req, what)
            spent = time.perf_counter() - started - (clock.seconds["student start (fork + cells)"] - before)
            clock.add("round trips", spent)
            clock.add("student calls", reply.get("busy", 0.0))
            return reply

        student_mod.StudentProcess._request = request
        grade.load_reference = timed_reference(clock, load_reference)
        timer = TestTimer(clock)
        if "extra_plugins" in inspect.signature(grade.run_graders).parameters:
            grade.run_graders = with_plugin(wrap_run(grade.run_graders, clock), timer)
        else:  # an older autograder: hand pytest the timer directly
            main = grade.pytest.main
            grade.pytest.main = lambda args, plugins=(): main(args, plugins=[*plugins, timer])
            grade.run_graders = wrap_run(grade.run_graders, clock)
        wrap(grade, "grade_submission", clock, "total")
        for _ in range(n):
            result = grade.grade_submission(notebook, sandbox, chapter)
        student_mod.StudentProcess._request = original_request
    s = {k: v / n for k, v in clock.seconds.items()}
    start = s.get("student start (fork + cells)", 0.0)
    in_tests = s.get("student start in the tests", 0.0)  # a restart after a crash, or a lazy start
    parts = {
        "reading the notebook": s.get("reading", 0.0),
        "student: fork of the zygote": s.get("fork of the zygote", 0.0),
        "student: running the cells": start - s.get("fork of the zygote", 0.0),
        "student: answering the graders' calls": s.get("student calls", 0.0),
        "wire (encode, send, decode) and waiting": s.get("round trips", 0.0) - s.get("student calls", 0.0),
        "trusted: reference functions": s.get("reference functions", 0.0),
        "trusted: rest of the tests (reference modules, mistakes, comparisons)":
            s.get("test calls", 0.0) - s.get("round trips", 0.0) - in_tests - s.get("reference functions", 0.0),
        "pytest itself (collection, fixtures, reports)": s.get("run graders", 0.0) - s.get("test calls", 0.0),
        "results.json and ending the process": s.get("total", 0.0) - s.get("reading", 0.0)
            - s.get("run graders", 0.0) - (start - in_tests),
    }
    return {"parts": parts, "total": s.get("total", 0.0), "calls": clock.counts["round trips"] / n,
            "score": f"{result['score']:g}/{result.get('max_score', 0):g}"}


def with_plugin(run, plugin):
    """run_graders(plugin, extra_plugins=()), with `plugin` added to the extra plugins however they are
    passed (grade_submission passes them by position)."""
    @functools.wraps(run)
    def run_with(grading, extra_plugins=()):
        return run(grading, (*extra_plugins, plugin))
    return run_with


def wrap_run(run, clock: Clock):
    """run_graders, timed; the student starts inside it (none on the normal path) are noted apart."""
    @functools.wraps(run)
    def run_timed(*args, **kwargs):
        started, before = time.perf_counter(), clock.seconds["student start (fork + cells)"]
        try:
            return run(*args, **kwargs)
        finally:
            clock.add("run graders", time.perf_counter() - started)
            clock.add("student start in the tests", clock.seconds["student start (fork + cells)"] - before)
    return run_timed


def one_shot_phases(chapter: str, isolation: str) -> dict:
    """(Run in a fresh process.) The phases of `python -m autograder grade NOTEBOOK`, in its order."""
    marks = [("start", time.perf_counter())]
    from autograder.harness.sandbox import Limits, Sandbox
    sandbox = Sandbox(Limits(), isolation=isolation)  # its zygote imports torch alongside this process
    import pytest  # noqa: F401
    import torch  # noqa: F401
    marks.append(("import torch and pytest", time.perf_counter()))
    import autograder.grade as grade
    grade.for_one_notebook()  # as the command does
    from autograder.reference import load_reference
    marks.append(("import the autograder", time.perf_counter()))
    load_reference(chapter)
    marks.append(("load the reference (while the zygote imports)", time.perf_counter()))
    sandbox.spawn = timed_first(sandbox.spawn, marks, "wait for the zygote, fork the student process")
    grade.grade_submission(ROOT / "solutions" / f"{chapter}.py", sandbox, chapter)
    marks.append(("grade (student's cells, graders, results)", time.perf_counter()))
    sandbox.close()
    marks.append(("close the sandbox", time.perf_counter()))
    return {name: t - marks[i][1] for i, (name, t) in enumerate(marks[1:])}


def timed_first(spawn, marks: list, name: str):
    """`spawn`, with a mark before its first call and after it."""
    def timed(*args, **kwargs):
        if len(marks) == 4:
            marks.append(("pytest start-up, until the first test starts the student", time.perf_counter()))
            result = spawn(*args, **kwargs)
            marks.append((name, time.perf_counter()))
            return result
        return spawn(*args, **kwargs)
    return timed


FLOOR = 'python -c "import torch" (the floor)'


def fresh(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    from autograder.paths import chapters
    parser = argparse.ArgumentParser()
    parser.add_argument("chapter", nargs="?", default="03_transformer", choices=chapters())
    parser.add_argument("-n", type=int, default=10, help="submissions graded in the warm worker")
    parser.add_argument("--repeat", type=int, default=3, help="fresh commands timed for the one-shot view")
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--warm-only", action="store_true", help="only the warm worker's breakdown")
    parser.add_argument("--baseline", metavar="REV", help="also the warm breakdown of commit REV's autograder "
                        "(a git worktree; without the student's own timing, its calls count as wire)")
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    parser.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases:
        print(json.dumps(one_shot_phases(args.chapter, args.isolation)))
        return
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(warm_breakdown(args.chapter, args.n, args.isolation)))
        return
    if args.warm_only:
        return print_warm(args)
    py = sys.executable
    bare = statistics.median(fresh([py, "-c", "import torch"]) for _ in range(args.repeat))
    whole = statistics.median(fresh([py, "-m", "autograder", "grade", f"solutions/{args.chapter}.py",
                                     "--isolation", args.isolation, "--out", "/tmp/_bench_breakdown"])
                              for _ in range(args.repeat))
    runs = [json.loads(subprocess.run([py, __file__, args.chapter, "--phases", "--isolation", args.isolation],
                                      check=True, cwd=ROOT, capture_output=True, text=True).stdout)
            for _ in range(args.repeat)]
    print(f"chapter {args.chapter}, isolation {args.isolation}")
    print(f"\n1. one submission, one command (median of {args.repeat})")
    print(f"  {FLOOR:<58} {bare:6.2f} s")
    print(f"  {'python -m autograder grade NOTEBOOK':<58} {whole:6.2f} s  = {whole / bare:.2f}x the floor")
    for name in runs[0]:
        print(f"    {name:<56} {statistics.median(r[name] for r in runs):6.2f} s")
    print_warm(args)


def print_warm(args) -> None:
    old = baseline_breakdown(args) if args.baseline else None
    warm = warm_breakdown(args.chapter, args.n, args.isolation)  # last: it freezes the gc
    print(f"\n2. a warm worker, mean of {args.n} submissions ({warm['score']}, {warm['calls']:.0f} calls each)")
    if old:
        print(f"    {'':<72} {'now':>8}  {'baseline':>8}")
    for name, seconds in warm["parts"].items():
        then = f"  {old['parts'][name]:6.3f} s" if old else ""
        print(f"    {name:<72} {seconds:6.3f} s{then}  {100 * seconds / warm['total']:5.1f}%")
    then = f"  {old['total']:6.3f} s" if old else ""
    print(f"  {'total per submission':<74} {warm['total']:6.3f} s{then}")
    print(f"  200 submissions on 2 workers, at this rate: {100 * warm['total']:.0f} s plus start-up")
    if old:
        from _baseline import describe
        print(f"  baseline: {describe(args.baseline)}; it reports no student-side time, so its "
              "student calls count as wire")


def baseline_breakdown(args) -> dict:
    """The warm breakdown of the autograder of commit `args.baseline`, in a fresh process."""
    from _baseline import worktree
    with worktree(args.baseline) as tree, tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, __file__, args.chapter, "-n", str(args.n), "--isolation", args.isolation,
                        "--json-out", out.name], check=True, cwd=tree, env={**os.environ, "BENCH_ROOT": str(tree)})
        return json.loads(Path(out.name).read_text())


if __name__ == "__main__":
    main()
