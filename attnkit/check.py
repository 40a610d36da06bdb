"""`python -m attnkit check exercises/NN_name.ipynb`: the chapter's public checks on your notebook.

The notebook runs as "Restart & Run All" would run it (cells tagged
skip-grading are skipped), in a sandbox (bubblewrap where it works, a child
process otherwise), with the same harness as the course's autograder; then
each public check calls your functions on fixed inputs and compares with
the reference solution's answers, recorded when the course was released.

Passing the public checks does not mean passing the hidden graders: those
use other inputs, and test more (edge cases, dtypes, devices, gradients).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CHECKS_DIR = Path(__file__).resolve().parent / "checks"


def checks_dir() -> Path:
    """Where the public checks' files (`NN_name.pt`) are: ATTNKIT_CHECKS, else attnkit/checks/."""
    return Path(os.environ.get("ATTNKIT_CHECKS", CHECKS_DIR))


def available() -> list[str]:
    return sorted(p.stem for p in checks_dir().glob("*.pt"))


def chapter_of(path: Path, given: str | None) -> str | None:
    """The chapter: --chapter, else the notebook's metadata, else its file name."""
    if given:
        return given
    from autograder.harness.notebook import BadSubmission, chapter_from_name, read_submission
    try:
        return read_submission(path).chapter or chapter_from_name(path)
    except BadSubmission:
        return chapter_from_name(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnkit check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", help="your notebook, e.g. exercises/02_attention.ipynb")
    parser.add_argument("--chapter", help="the chapter (NN_name) when the notebook's name does not say")
    parser.add_argument("--isolation", choices=("auto", "bwrap", "process"), default="auto",
                        help="auto: bubblewrap when it works, else a plain child process")
    parser.add_argument("--call-timeout", type=float, default=10.0, help="seconds one call may take")
    parser.add_argument("--out", help="also write the results (Gradescope's results.json format) here")
    args = parser.parse_args(argv)
    path = Path(args.notebook)
    if not path.is_file():
        print(f"{path}: no such file", file=sys.stderr)
        return 2
    chapter = chapter_of(path, args.chapter)
    if chapter not in available():
        print(f"no public checks for chapter {chapter!r} in {checks_dir()} (there are: "
              f"{', '.join(available()) or 'none'}); give --chapter NN_name", file=sys.stderr)
        return 2
    import warnings
    from autograder.harness.sandbox import Limits, ReducedIsolationWarning, Sandbox
    with warnings.catch_warnings():  # your own notebook: a plain child process is isolation enough
        warnings.simplefilter("ignore", ReducedIsolationWarning)
        with Sandbox(Limits(call_seconds=args.call_timeout), isolation=args.isolation) as sandbox:
            from autograder.harness.replay import check_notebook, load_checks
            from autograder.harness.results import function_report, write_json
            result = check_notebook(path, load_checks(checks_dir() / f"{chapter}.pt"), sandbox)
    if args.out:
        write_json(Path(args.out), result)
    print(function_report(result))
    print()
    passed = sum(t["score"] >= t["max_score"] for t in result["tests"])
    print(f"{path}: {passed} of {len(result['tests'])} public checks passed "
          f"({result['score']:g} / {result['max_score']:g} points; sandbox: {sandbox.isolation})")
    print("Passing the public checks does not mean passing the hidden graders: they use other inputs "
          "and test more.")
    ok = result["tests"] and result["score"] >= result["max_score"] and result["extra_data"]["status"] == "graded"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
