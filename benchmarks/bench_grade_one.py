"""How long does grading one submission take, against a bare `python -c "import torch"`?

Both are measured in the same run, on the same machine, as the median of a
few repetitions of a fresh command (what an instructor or a student runs).
Target: grading at most 3x the bare import (goal 2x). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_grade_one.py [CHAPTER] [--repeat N] [--baseline REV]

`--baseline REV` also times the autograder of commit REV (a git worktree), interleaved with ours.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _baseline import describe, worktree  # noqa: E402


def timed(cmd: list[str], cwd: Path = ROOT) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from autograder.paths import chapters
    parser = argparse.ArgumentParser()
    parser.add_argument("chapter", nargs="?", default=(chapters() or [None])[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", metavar="REV")
    args = parser.parse_args()
    py = sys.executable
    notebook = ROOT / "solutions" / f"{args.chapter}.py"
    bare, grade, old = [], [], []
    with tempfile.TemporaryDirectory() as out, \
            (worktree(args.baseline) if args.baseline else contextlib.nullcontext()) as tree:
        cmd = [py, "-m", "autograder", "grade", str(notebook), "--out", out]
        for _ in range(args.repeat):  # interleaved, so that a change of load hits all three alike
            bare.append(timed([py, "-c", "import torch"]))
            grade.append(timed(cmd))
            if tree:
                old.append(timed(cmd, cwd=tree))
    b, g = statistics.median(bare), statistics.median(grade)
    print(f"chapter {args.chapter}, median of {args.repeat} runs")
    print(f"  python -c 'import torch'          {b:6.2f} s")
    print(f"  python -m autograder grade (1 nb) {g:6.2f} s  = {g / b:.2f}x  (target <= 3x, goal 2x)")
    if old:
        o = statistics.median(old)
        print(f"  the same, baseline {describe(args.baseline)}")
        print(f"                                    {o:6.2f} s  = {o / b:.2f}x")


if __name__ == "__main__":
    main()
