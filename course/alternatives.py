"""Does ANY correct solution work in the notebook? Run it with an alternative solution.

`tests/alternatives/NN_name.py` defines every graded name of chapter NN in a
deliberately different style (other internal attribute names, functional
calls, default initialisation...). It is a plain Python file:

- imports and private helpers (names starting with `_`) go in a cell placed
  before the first graded cell;
- each top-level `def`/`class` named like a graded cell replaces that cell's
  stub in the exercise notebook;
- in a chapter that declares an experiment and claims (`attnkit.claims`), the
  alternative must satisfy every claim on its runs of the claims check
  (`python -m course claims`, recorded in tests/claims/), and HEADLINES is empty;
- in a chapter not yet converted, `HEADLINES = {"glue_name": abs_tolerance, ...}`
  names the values the chapter glues (`attnkit.glue`) that the alternative's run
  must reproduce within that tolerance of the solution's own run (the book page).

`python -m course alternative NN_name` grades the alternative (full marks
expected), executes the spliced exercise notebook top to bottom in a Jupyter
kernel (training and plotting cells included: no cell may fail), and compares
the headlines. Runs are cached in `tests/alternatives/runs.json` by a hash of
everything they depend on, committed, so a fresh clone re-runs only the
chapters that changed.
"""
from __future__ import annotations

import ast
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.exercises import ROOT, SOLUTIONS, exercise_notebook, render

ALTERNATIVES = ROOT / "tests" / "alternatives"
RUNS = ALTERNATIVES / "runs.json"


class AlternativeError(ValueError):
    """The alternative file does not fit its chapter."""


@dataclass
class Alternative:
    """An alternative solution, split into what goes where."""

    prelude: str = ""
    definitions: dict[str, str] = field(default_factory=dict)
    headlines: dict[str, float] = field(default_factory=dict)


def _segment(source: str, node: ast.stmt) -> str:
    """The source of a top-level statement, its decorators included."""
    lines = source.splitlines(keepends=True)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "".join(lines[first - 1:node.end_lineno]).rstrip() + "\n"


def parse(path: Path) -> Alternative:
    """Split an alternative file into its prelude, its graded definitions and its headlines."""
    source = path.read_text()
    alt, prelude = Alternative(), []
    for node in ast.parse(source).body:
        named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if named and not node.name.startswith("_"):
            alt.definitions[node.name] = _segment(source, node)
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["HEADLINES"]:
            alt.headlines = {str(k): float(v) for k, v in ast.literal_eval(node.value).items()}
        else:
            prelude.append(_segment(source, node))
    alt.prelude = "".join(prelude)
    return alt


def graded_cells(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(index, grade_id) of every solution cell of a notebook."""
    return [(i, c.metadata["nbgrader"]["grade_id"]) for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("solution")]


def alternative_notebook(chapter: str, alt: Alternative | None = None) -> nbformat.NotebookNode:
    """The exercise notebook of `chapter` with the alternative's definitions in its graded cells."""
    alt = alt or parse(ALTERNATIVES / f"{chapter}.py")
    nb = exercise_notebook(chapter)
    cells = graded_cells(nb)
    ids = {grade_id for _, grade_id in cells}
    missing = sorted(ids - alt.definitions.keys())
    if missing:
        raise AlternativeError(f"tests/alternatives/{chapter}.py does not define {', '.join(missing)}")
    stray = sorted(alt.definitions.keys() - ids)
    if stray:
        raise AlternativeError(f"tests/alternatives/{chapter}.py defines {', '.join(stray)}, which no graded "
                               "cell has: rename them with a leading underscore (private helpers)")
    for index, grade_id in cells:
        nb.cells[index].source = alt.definitions[grade_id].rstrip("\n")
    prelude = nbformat.v4.new_code_cell(alt.prelude.rstrip("\n"))
    prelude.id = "alternative-prelude"
    nb.cells.insert(cells[0][0], prelude)
    nb.metadata["course"]["alternative"] = True
    return nb


def executed_code(path: Path) -> str:
    """What running `path` (a jupytext solution or a plain alternative) executes: each code cell's
    tags and its code without comments, docstrings or formatting. The prose (markdown cells) is
    left out: rewording the text does not re-run the alternative."""
    import jupytext

    from course.claims import strip_code
    nb = jupytext.read(path)
    return "\n\n".join(f"{sorted(c.metadata.get('tags', []))}\n{strip_code(c.source)}"
                       for c in nb.cells if c.cell_type == "code")


def run_hash(chapter: str) -> str:
    """A hash of what an alternative run depends on: the code of the solution and the
    alternative (not their prose), the graders, this file, the claims record, the attnkit modules."""
    import hashlib

    from course.deps import digest
    record = ROOT / "tests" / "claims" / f"{chapter}.json"
    solution, alternative = SOLUTIONS / f"{chapter}.py", ALTERNATIVES / f"{chapter}.py"
    paths = [ROOT / "autograder" / "graders" / f"test_{chapter}.py", Path(__file__),
             *([record] if record.exists() else [])]
    code = executed_code(solution) + "\n\n" + executed_code(alternative)
    files = digest(paths, source=solution.read_text() + alternative.read_text())
    return hashlib.sha256((files + code).encode()).hexdigest()[:16]


def _load_runs() -> dict:
    return json.loads(RUNS.read_text()) if RUNS.exists() else {}


def _save_run(chapter: str, record: dict) -> None:
    runs = _load_runs()
    runs[chapter] = record
    RUNS.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")


def _grade(nb: nbformat.NotebookNode, chapter: str) -> dict:
    from autograder.grade import grade_submission
    from autograder.harness.sandbox import Sandbox
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{chapter}.ipynb"
        path.write_text(render(nb))
        with Sandbox() as sandbox:
            return grade_submission(path, sandbox)


def _execute(nb: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, str | None]:
    """Run every cell; the notebook (with outputs) and the first error, if any."""
    from nbclient.exceptions import CellExecutionError

    from course.book import execute
    try:
        return execute(nb), None
    except CellExecutionError as exc:
        return nb, str(exc)[-3000:]


def _headlines(alt: Alternative, got: dict[str, str], chapter: str) -> tuple[dict, list[str]]:
    """Each headline's alternative value, solution value and tolerance; and the misses."""
    from attnkit.glue import glued
    from course.book import build_page
    want = glued(nbformat.read(build_page(chapter), as_version=4))
    table, misses = {}, []
    for name, tol in alt.headlines.items():
        if name not in want or name not in got:
            misses.append(f"{name}: glued by {'neither' if name not in want and name not in got else 'only one'} "
                          "of the solution's and the alternative's runs")
            continue
        a, s = float(got[name]), float(want[name])
        table[name] = [a, s, tol]
        if abs(a - s) > tol:
            misses.append(f"{name}: the alternative measured {a:.4g}, the solution {s:.4g} (tolerance {tol:g})")
    return table, misses


def check(chapter: str, force: bool = False) -> dict:
    """Grade and run the alternative of `chapter` (cached); return the run's record."""
    digest = run_hash(chapter)
    cached = _load_runs().get(chapter)
    if cached and cached.get("hash") == digest and cached.get("ok") and not force:
        print(f"{chapter}: up to date (alternative run of {cached['seconds']:.0f} s)")
        return cached
    alt = parse(ALTERNATIVES / f"{chapter}.py")
    nb = alternative_notebook(chapter, alt)
    result = _grade(nb, chapter)
    started = time.monotonic()
    executed, error = _execute(nb)
    seconds = time.monotonic() - started
    from attnkit.glue import glued
    table, misses = _headlines(alt, glued(executed), chapter) if error is None else ({}, [])
    from course.claims import alternative_problems, has_experiment
    if has_experiment(chapter):
        misses += alternative_problems(chapter) + (
            ["HEADLINES must be empty: the chapter's claims test the alternative"] if alt.headlines else [])
    problems = ([f"a cell failed:\n{error}"] if error else []) + misses
    if result["score"] != result["max_score"]:
        lost = [t["name"] for t in result["tests"] if t["score"] < t["max_score"]]
        problems.append(f"graded {result['score']:g}/{result['max_score']:g}; lost: {'; '.join(lost)}")
    record = {"hash": digest, "ok": not problems, "seconds": round(seconds, 1), "score": result["score"],
              "max_score": result["max_score"], "headlines": table, "problems": problems}
    _save_run(chapter, record)
    verdict = "ok" if record["ok"] else "FAILED"
    print(f"{chapter}: alternative {verdict}: {result['score']:g}/{result['max_score']:g} points, "
          f"notebook ran in {seconds:.0f} s; headlines {table}")
    for p in problems:
        print(f"  - {p}")
    return record


def chapters_with_alternatives() -> list[str]:
    """The book's chapters (_toc.yml); each must have an alternative (a missing one fails the run)."""
    from course.book import book_chapters
    return book_chapters()
