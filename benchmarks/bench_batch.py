"""Grading a class: 200 submissions of one chapter with `--jobs 2`, against two floors.

Measured in the same run, on the same machine:
  ours      `python -m autograder grade DIR --jobs J`, all N submissions, wall clock
            (start-up included: imports, sandboxes, references)
  (a)       a bare `python -c "import torch"` per submission, J at a time: the cost of
            any design that starts a fresh Python per submission, before it grades anything
  (b)       nbgrader's `autograde` (serial, a fresh kernel per notebook) on a minimal
            nbgrader course with the same notebooks (skip-grading cells removed, as our
            grader skips them; one trivial grade cell, so nbgrader runs no hidden tests)
(a) and (b) time a sample (--import-sample, --nbgrader-sample) and scale it to N;
the output says so. Submissions: copies of the reference solution, each with its own
student comment, and every tenth one the unsolved exercise notebook (NotImplementedError).
Target: N=200 in at most 3 minutes with --jobs 2 on the 2-core machine. Asserts nothing.

    .venv/bin/python benchmarks/bench_batch.py [CHAPTER] [-n 200] [--jobs 2] [--json FILE]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from _baseline import describe, worktree  # noqa: E402


def make_submissions(chapter: str, n: int, folder: Path) -> list[Path]:
    """n notebooks: the solution with a per-student comment; every tenth the unsolved exercise."""
    from autograder.paths import solutions_dir
    solution = jupytext.read(solutions_dir() / f"{chapter}.py")
    exercise = ROOT / "exercises" / f"{chapter}.ipynb"
    paths = []
    for i in range(n):
        nb = nbformat.read(exercise, as_version=4) if i % 10 == 9 and exercise.exists() else copy.deepcopy(solution)
        nb.cells.insert(0, nbformat.v4.new_code_cell(f"# student s{i:03d}"))
        path = folder / f"s{i:03d}" / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def timed(cmd: list[str], **kw) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - started


def bench_ours(folder: Path, out: Path, jobs: int, tree: Path = ROOT) -> tuple[float, dict]:
    """Seconds to grade `folder` with the autograder of `tree` (this checkout, or a baseline's)."""
    seconds = timed([sys.executable, "-m", "autograder", "grade", str(folder), "--out", str(out),
                     "--jobs", str(jobs), "--no-progress"], cwd=tree)
    counts: dict[str, int] = {}
    for line in (out / "grades.csv").read_text().splitlines()[1:]:
        status = line.rsplit(",", 1)[-1]
        counts[status] = counts.get(status, 0) + 1
    return seconds, counts


def bench_bare_import(sample: int, jobs: int) -> float:
    """Wall clock of `sample` fresh `python -c "import torch"`, `jobs` at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda _: timed([sys.executable, "-c", "import torch"]), range(sample)))
    return time.perf_counter() - started


def nbgrader_course(chapter: str, submissions: list[Path], root: Path) -> None:
    """source/ps (the solution, skip-grading cells removed, one trivial grade cell) and submitted/."""
    from autograder.paths import solutions_dir
    nb = jupytext.read(solutions_dir() / f"{chapter}.py")
    nb.cells = [c for c in nb.cells if "skip-grading" not in c.metadata.get("tags", [])]
    check = nbformat.v4.new_code_cell("assert True")
    check.metadata["nbgrader"] = {"grade": True, "grade_id": "check", "locked": True, "points": 1,
                                  "schema_version": 3, "solution": False, "task": False}
    nb.cells.append(check)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (root / "source" / "ps").mkdir(parents=True)
    nbformat.write(nb, root / "source" / "ps" / f"{chapter}.ipynb")
    (root / "nbgrader_config.py").write_text("c = get_config()\nc.ExecutePreprocessor.timeout = 300\n")
    for path in submissions:
        dest = root / "submitted" / path.parent.name / "ps"
        dest.mkdir(parents=True)
        student = jupytext.read(path)
        student.cells = [c for c in student.cells if "skip-grading" not in c.metadata.get("tags", [])]
        nbformat.write(student, dest / f"{chapter}.ipynb")
        (dest / "timestamp.txt").write_text("2025-01-01 00:00:00.000000 UTC")


def bench_nbgrader(chapter: str, submissions: list[Path], root: Path) -> float:
    """Seconds of `nbgrader autograde` for these submissions (generate_assignment not counted)."""
    nbgrader_course(chapter, submissions, root)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    nbgrader = [sys.executable, "-m", "nbgrader"]
    timed([*nbgrader, "generate_assignment", "ps", "--force"], cwd=root, env=env)
    return timed([*nbgrader, "autograde", "ps"], cwd=root, env=env)


def main() -> None:
    from autograder.paths import chapters
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter", nargs="?", default=(chapters() or [None])[0])
    parser.add_argument("-n", type=int, default=200, help="submissions")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--import-sample", type=int, default=20)
    parser.add_argument("--nbgrader-sample", type=int, default=10, help="0: skip nbgrader")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--baseline", metavar="REV", help="also grade the same submissions with the autograder "
                        "of commit REV (a git worktree), right after ours")
    args = parser.parse_args()
    n, jobs = args.n, args.jobs
    tmp = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    old = None
    try:
        subs = make_submissions(args.chapter, n, tmp / "subs")
        ours, counts = bench_ours(tmp / "subs", tmp / "out", jobs)
        if args.baseline:
            with worktree(args.baseline) as tree:
                old, old_counts = bench_ours(tmp / "subs", tmp / "out-baseline", jobs, tree)
        bare = bench_bare_import(args.import_sample, jobs) * n / args.import_sample
        nbg = (bench_nbgrader(args.chapter, subs[: args.nbgrader_sample], tmp / "course") * n / args.nbgrader_sample
               if args.nbgrader_sample else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {"chapter": args.chapter, "n": n, "jobs": jobs, "cpus": os.cpu_count(),
               "load_average_1min": os.getloadavg()[0], "ours_s": round(ours, 1), "statuses": counts,
               "bare_import_s_extrapolated": round(bare, 1), "import_sample": args.import_sample,
               "nbgrader_s_extrapolated": round(nbg, 1) if nbg else None, "nbgrader_sample": args.nbgrader_sample}
    print(f"chapter {args.chapter}: {n} submissions, --jobs {jobs}, {os.cpu_count()} CPUs "
          f"(1-min load average at the end: {figures['load_average_1min']:.1f})")
    print(f"  python -m autograder grade --jobs {jobs}   {ours:7.1f} s  ({ours / n:.2f} s per submission; {counts})"
          f"  target <= 180 s")
    print(f"  (a) python -c 'import torch' per sub  {bare:7.1f} s  (from {args.import_sample}, {jobs} at a time)"
          f"  ours / (a) = {ours / bare:.2f}")
    if old is not None:
        print(f"  baseline {describe(args.baseline)}")
        print(f"    the same, with the baseline's autograder {old:7.1f} s  ({old_counts})  ours / baseline = "
              f"{ours / old:.2f}")
        figures.update(baseline=args.baseline, baseline_s=round(old, 1))
    if nbg:
        print(f"  (b) nbgrader autograde               {nbg:7.1f} s  (from {args.nbgrader_sample}, serial)"
              f"  ours / (b) = {ours / nbg:.3f}, {nbg / ours:.1f}x faster")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
