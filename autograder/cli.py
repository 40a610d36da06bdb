"""Command line: `python -m autograder grade PATH... --out DIR`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.sandbox import Limits, Sandbox  # light: the zygote starts before torch is imported here


def find_notebooks(paths: list[str]) -> list[tuple[str, Path]]:
    """(submission name, file) for each notebook in `paths`; folders are searched recursively."""
    found: list[tuple[str, Path]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(x for x in p.rglob("*") if x.is_file() and x.suffix == ".ipynb"
                            and ".ipynb_checkpoints" not in x.parts):
                found.append(("__".join(f.relative_to(p).with_suffix("").parts), f))
        else:
            found.append((p.stem, p))
    names = [n for n, _ in found]
    return [(n if names.count(n) == 1 else f"{n}-{i}", f) for i, (n, f) in enumerate(found)]


def cmd_grade(args: argparse.Namespace) -> int:
    subs = find_notebooks(args.paths)
    if not subs:
        print("no notebooks found in " + " ".join(args.paths), file=sys.stderr)
        return 2
    out = Path(args.out)
    limits = Limits(call_seconds=args.call_timeout)
    rows = []
    with Sandbox(limits, isolation=args.isolation) as sandbox:  # imports torch in parallel with us
        from autograder.grade import grade_submission
        from autograder.results import summary_table, write_json
        for name, path in subs:
            result = grade_submission(path, sandbox, args.chapter)
            write_json(out / name / "results.json", result)
            extra = result["extra_data"]
            rows.append((name, extra.get("chapter"), result["score"], result["max_score"], extra.get("status")))
    print(summary_table(rows))
    print(f"results in {out}/<submission>/results.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade notebooks; write OUT/<submission>/results.json")
    g.add_argument("paths", nargs="+", help="notebooks, or folders of notebooks")
    g.add_argument("--out", required=True, help="folder for the results")
    g.add_argument("--chapter", help="chapter (NN_name) for notebooks whose metadata does not say")
    g.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel")
    g.add_argument("--isolation", choices=("auto", "bwrap", "process"), default="auto",
                   help="auto: bubblewrap when available, else a plain subprocess (with a warning)")
    g.add_argument("--call-timeout", type=float, default=10.0, help="seconds one student call may take")
    g.set_defaults(func=cmd_grade)
    args = parser.parse_args(argv)
    return args.func(args)
