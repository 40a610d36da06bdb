"""How long does grading one submission take, against a bare `python -c "import torch"`?

Both are measured in the same run, on the same machine, as the median of a
few repetitions of a fresh command (what an instructor or a student runs).
Target: grading at most 3x the bare import (goal 2x). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_grade_one.py [CHAPTER] [--repeat N]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from autograder.paths import chapters
    parser = argparse.ArgumentParser()
    parser.add_argument("chapter", nargs="?", default=(chapters() or [None])[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    bare = [timed([py, "-c", "import torch"]) for _ in range(args.repeat)]
    with tempfile.TemporaryDirectory() as out:
        notebook = ROOT / "solutions" / f"{args.chapter}.py"
        grade = [timed([py, "-m", "autograder", "grade", str(notebook), "--out", out])
                 for _ in range(args.repeat)]
    b, g = statistics.median(bare), statistics.median(grade)
    print(f"chapter {args.chapter}, median of {args.repeat} runs")
    print(f"  python -c 'import torch'          {b:6.2f} s")
    print(f"  python -m autograder grade (1 nb) {g:6.2f} s")
    print(f"  ratio                             {g / b:6.2f}x  (target <= 3x, goal 2x)")


if __name__ == "__main__":
    main()
