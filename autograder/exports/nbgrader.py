"""nbgrader's course layout in; nbgrader's gradebook, autograded/ and feedback/ out.

`python -m autograder grade --nbgrader-course COURSE --assignment NAME` grades
COURSE/submitted/<student>/<NAME>/*.ipynb (the paths follow the course's
nbgrader_config.py, if it has one), each as the chapter of the assignment's
notebook (`assign_chapters`: --chapter, else the chapter the instructor's
source/ or release/ copy names, else NAME or the notebook's name when that is
a chapter); a submitted notebook the assignment does not have is left out.
Then, for every result in the results folder (the whole class):

- the gradebook (nbgrader.api.Gradebook at the course's db_url), in one
  transaction: the assignment, the notebook, the student and the submission
  are created if missing, and each **graded function is one grade cell**. The
  cell is named after the function, which is also the `grade_id` of the
  notebook cell that defines it (docs/AUTHORING.md), so nbgrader sees an
  "autograded answer" cell: its max_score is the sum of the points of the
  graders that test that function, and its auto_score the points the student
  got. Only the assignment's chapter's functions become cells: a notebook of
  another chapter scores 0 in each. Tests that name no function go to a cell
  called `autograder`. A manual_score an instructor already set is kept:
  nbgrader counts it instead of the auto_score.
- autograded/<student>/<NAME>/<notebook>.ipynb: the submitted notebook with
  those cells marked as grade cells, so formgrader can open the submission.
- feedback/<student>/<NAME>/<notebook>.html: the per-test feedback, with the
  submission's timestamp.txt and submission_secret.txt copied beside it, as
  `nbgrader release_feedback` expects.
- late penalties: nbgrader's own `AssignLatePenalties` with the course's
  `LateSubmissionPlugin` (see `autograder.exports.nbgrader_late`).
"""
from __future__ import annotations

import contextlib
import glob
import html
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Iterator

from dataclasses import replace

from autograder.batch.io import Job
from autograder.harness.atomic import write_text

FALLBACK_CELL = "autograder"
SIDE_FILES = ("timestamp.txt", "submission_secret.txt")


def open_course(root: str | Path, assignment: str):
    """nbgrader's CourseDirectory for `root` (reading its nbgrader_config.py, if any)."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config, PyFileConfigLoader
    root = Path(root).resolve()
    config = Config()
    if (root / "nbgrader_config.py").is_file():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    cd = CourseDirectory(config=config)
    cd.root = str(root)
    cd.assignment_id = assignment
    return cd


def submission_dir(cd, student: str, assignment: str) -> Path:
    return Path(cd.format_path(cd.submitted_directory, student, assignment))


def find_course_jobs(cd, assignment: str) -> list[Job]:
    """A job per submitted notebook: name <student>/<notebook>, student id from the folder name."""
    pattern = re.compile(cd.format_path(cd.submitted_directory, "(?P<student>[^/]+)", assignment, escape=True) + "$")
    excluded = {s.strip() for s in cd.student_id_exclude.split(",") if s.strip()}
    jobs = []
    for folder in map(Path, sorted(glob.glob(cd.format_path(cd.submitted_directory, "*", assignment)))):
        match = pattern.match(str(folder))
        if not match or not folder.is_dir() or match["student"] in excluded:
            continue
        for nb in sorted(folder.glob("*.ipynb")):
            jobs.append(Job(f"{match['student']}/{nb.stem}", nb, match["student"], nb.stem))
    return jobs


# ---------------------------------------------------------------- which chapter each notebook is
def instructor_notebooks(cd, assignment: str) -> dict[str, str | None]:
    """The assignment's notebooks in the course's source/ (else release/) folder: name -> the chapter the
    instructor's copy names; {} when the course has neither."""
    from autograder.assignment import stated_chapter
    for step in (cd.source_directory, cd.release_directory):
        found = sorted(Path(cd.format_path(step, ".", assignment)).glob("*.ipynb"))
        if found:
            return {nb.stem: stated_chapter(nb) for nb in found}
    return {}


def notebook_chapter(notebook: str, assignment: str, theirs: dict[str, str | None]) -> str | None:
    """The chapter notebook `notebook` of `assignment` is graded as: what the instructor's copy names,
    else the assignment's name, else the notebook's name, when that is a chapter; never the student's file."""
    from autograder.paths import chapters
    return theirs.get(notebook) or next((n for n in (assignment, notebook) if n in chapters()), None)


def assign_chapters(cd, assignment: str, jobs: list[Job], chapter: str | None = None) -> tuple[list[Job], list[Job], str]:
    """(the jobs, each with its chapter; the jobs left out: notebooks that are not the assignment's;
    why grading cannot start, or ""). `chapter`: --chapter, which every notebook is graded as."""
    theirs = instructor_notebooks(cd, assignment)
    kept = [j for j in jobs if not theirs or j.notebook in theirs]
    left_out = [j for j in jobs if j not in kept]
    kept = [replace(j, chapter=chapter or notebook_chapter(j.notebook, assignment, theirs)) for j in kept]
    unknown = sorted({j.notebook for j in kept if j.chapter is None})
    if unknown:
        return kept, left_out, (f"cannot tell which chapter assignment {assignment}'s notebooks "
                                f"{', '.join(unknown)} are for: give --chapter NN_name")
    return kept, left_out, ""


# ---------------------------------------------------------------- grade cells
def _skipped_here(test) -> bool:
    return any(m.name == "skip" or (m.name == "skipif" and m.args and m.args[0] is True)
               for m in getattr(test, "pytestmark", []))


def function_points(chapter: str | None) -> dict[str, float]:
    """Points per graded function of `chapter`, from its graders' `@graded` declarations."""
    from autograder.grade import grader_file, graded_tests
    if not chapter or not grader_file(chapter).is_file():
        return {}
    points: dict[str, float] = {}
    for test in graded_tests(chapter):
        if not _skipped_here(test):
            key = test.graded["function"] or FALLBACK_CELL
            points[key] = points.get(key, 0.0) + test.graded["points"]
    return points


def result_chapter(result: dict, notebook: str = "") -> str | None:
    """The chapter a result is for; for a file too broken to say, its name if that is a chapter."""
    from autograder.paths import chapters
    chapter = result.get("extra_data", {}).get("chapter")
    return chapter or (notebook if notebook in chapters() else None)


def cell_scores(result: dict, notebook: str = "", known: dict[str, float] | None = None,
                chapter: str | None = None) -> dict[str, tuple[float, float]]:
    """Grade cell -> (score, max_score) for one results.json object.

    Cells come from the graders of `chapter` (the assignment's; default: the result's) and only
    from them: a result graded as another chapter scores 0 in each. For a notebook whose chapter is
    unknown, from `known` (the notebook's grade cells already in the gradebook, each scored 0); else
    one `autograder` cell carries the whole score.
    """
    graded_as = result_chapter(result, notebook)
    chapter = chapter or graded_as
    got: dict[str, float] = {}
    for test in result.get("tests", []) if graded_as == chapter else []:
        key = (test.get("tags") or [FALLBACK_CELL])[0]
        got[key] = got.get(key, 0.0) + float(test.get("score", 0.0))
    cells = dict(function_points(chapter) or known or {})
    if not cells:
        return {FALLBACK_CELL: (float(result["score"]), float(result["max_score"]))}
    return {k: (min(got.get(k, 0.0), m) if m else got.get(k, 0.0), m) for k, m in cells.items()}


# ---------------------------------------------------------------- the gradebook
def _grade_row(gb, cell: str, notebook: str, assignment: str, student: str):
    """The Grade row of a cell, created when the cell was added after the submission."""
    from nbgrader.api import Grade, MissingEntry, SubmittedNotebook
    try:
        return gb.find_grade(cell, notebook, assignment, student)
    except MissingEntry:
        pass
    try:
        snb = gb.find_submission_notebook(notebook, assignment, student)
    except MissingEntry:
        snb = SubmittedNotebook(notebook=gb.find_notebook(notebook, assignment),
                                assignment=gb.find_submission(assignment, student))
        gb.db.add(snb)
    grade = Grade(cell_id=gb.find_grade_cell(cell, notebook, assignment).id, notebook=snb)
    gb.db.add(grade)
    return grade


def _timestamp(cd, student: str, assignment: str) -> str | None:
    path = submission_dir(cd, student, assignment) / "timestamp.txt"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def record_in_gradebook(gb, cd, assignment: str, job: Job, result: dict) -> None:
    """Store one notebook's scores as auto_scores of its grade cells."""
    nb = gb.update_or_create_notebook(job.notebook, assignment)
    cells = cell_scores(result, job.notebook, {c.name: c.max_score for c in nb.grade_cells}, job.chapter)
    for name, (_, max_score) in cells.items():
        gb.update_or_create_grade_cell(name, job.notebook, assignment, max_score=max_score, cell_type="code")
    gb.update_or_create_student(job.student)
    stamp = _timestamp(cd, job.student, assignment)
    gb.update_or_create_submission(assignment, job.student, **({"timestamp": stamp} if stamp else {}))
    for name, (score, _) in cells.items():
        grade = _grade_row(gb, name, job.notebook, assignment, job.student)
        grade.auto_score = score
        grade.needs_manual_grade = False


@contextlib.contextmanager
def tools_on_path() -> Iterator[None]:
    """Put this Python's bin/ on PATH: a new gradebook runs the `alembic` command found there."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old])
    try:
        yield
    finally:
        os.environ["PATH"] = old


@contextlib.contextmanager
def one_transaction(db) -> Iterator[None]:
    """nbgrader's Gradebook commits after every change; within this, those commits only flush and all
    is committed once at the end (or rolled back), so an interrupted export leaves the previous
    gradebook whole."""
    db.commit = db.flush
    try:
        yield
        del db.commit
        db.commit()
    except BaseException:
        db.__dict__.pop("commit", None)
        db.rollback()
        raise


def write_gradebook(cd, assignment: str, graded: list[tuple[Job, dict]]) -> int:
    """Record every (job, result) in the course's gradebook, in one transaction; returns how many."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning
    with tools_on_path(), warnings.catch_warnings(), Gradebook(cd.db_url, cd.course_id) as gb:
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission triggers these
        with one_transaction(gb.db):
            gb.update_or_create_assignment(assignment)
            # results that name their chapter first: they create the grade cells the others get 0 in
            for job, result in sorted(graded, key=lambda jr: result_chapter(jr[1], jr[0].notebook) is None):
                record_in_gradebook(gb, cd, assignment, job, result)
    return len(graded)


# ---------------------------------------------------------------- autograded/ and feedback/
def write_autograded(cd, assignment: str, job: Job, result: dict) -> Path:
    """A copy of the submission whose graded-function cells are grade cells (what formgrader
    opens); a file that is not a readable notebook is copied as it is."""
    dest = Path(cd.format_path(cd.autograded_directory, job.student, assignment))
    raw = job.path.read_bytes()
    try:
        nb = json.loads(raw)
        cells = [c for c in nb["cells"] if isinstance(c, dict)]
    except (ValueError, KeyError, TypeError):
        nb = None
    if nb is None:
        write_text(dest / f"{job.notebook}.ipynb", raw.decode("utf-8", errors="replace"))
    else:
        points = cell_scores(result, job.notebook, chapter=job.chapter)
        for cell in cells:
            meta = cell["metadata"].get("nbgrader") if isinstance(cell.get("metadata"), dict) else None
            if isinstance(meta, dict) and meta.get("grade_id") in points:
                meta.update(grade=True, points=points[meta["grade_id"]][1])
        write_text(dest / f"{job.notebook}.ipynb", json.dumps(nb, indent=1))
    _copy_side_files(cd, assignment, job.student, dest)
    return dest / f"{job.notebook}.ipynb"


def _copy_side_files(cd, assignment: str, student: str, dest: Path) -> None:
    for name in SIDE_FILES:
        src = submission_dir(cd, student, assignment) / name
        if src.is_file() and not (dest / name).exists():
            shutil.copy2(src, dest / name)


def feedback_html(job: Job, assignment: str, result: dict) -> str:
    """A self-contained HTML page: the score, each function's points, each test's feedback."""
    e = html.escape
    rows = "".join(
        f"<tr class='{'ok' if t.get('status') == 'passed' else 'bad'}'><td>{e(t['name'])}</td>"
        f"<td>{t['score']:g} / {t['max_score']:g}</td><td><pre>{e(t.get('output') or '')}</pre></td></tr>"
        for t in result.get("tests", []))
    cells = "".join(f"<li><code>{e(name)}</code>: {s:g} / {m:g}</li>"
                    for name, (s, m) in cell_scores(result, job.notebook, chapter=job.chapter).items())
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{e(assignment)}: {e(job.notebook)} ({e(job.student)})</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}} td,th{{border-bottom:1px solid #ddd;
padding:.4em;vertical-align:top;text-align:left}} pre{{white-space:pre-wrap;margin:0}} .ok td:nth-child(2){{color:#060}}
.bad td:nth-child(2){{color:#a00}}</style></head><body>
<h1>{e(assignment)} / {e(job.notebook)}</h1>
<p>Student: <b>{e(job.student)}</b>. Score: <b>{result['score']:g} / {result['max_score']:g}</b>.</p>
<h2>By function</h2><ul>{cells}</ul>
<h2>Tests</h2><table><tr><th>test</th><th>points</th><th>feedback</th></tr>{rows}</table>
<h2>Notes</h2><pre>{e(result.get('output', ''))}</pre>
</body></html>
"""


def write_feedback(cd, assignment: str, job: Job, result: dict) -> Path:
    """feedback/<student>/<assignment>/<notebook>.html, written atomically."""
    dest = Path(cd.format_path(cd.feedback_directory, job.student, assignment))
    path = dest / f"{job.notebook}.html"
    write_text(path, feedback_html(job, assignment, result))
    _copy_side_files(cd, assignment, job.student, dest)
    return path


def of_assignment(cd, assignment: str, graded: list[tuple[Job, dict]]) -> list[tuple[Job, dict]]:
    """The results of the assignment's own notebooks (all of them when the course has no source/ or
    release/ copy to say which): a stray notebook's result, even from an earlier run, stays out."""
    theirs = instructor_notebooks(cd, assignment)
    return [(job, result) for job, result in graded if not theirs or job.notebook in theirs]


def export_course(cd, assignment: str, graded: list[tuple[Job, dict]]) -> None:
    """Everything nbgrader should see after a batch: gradebook (with nbgrader's late penalties, which the
    results then carry too), autograded/ and feedback/."""
    from autograder.exports.nbgrader_late import assign_penalties
    graded = of_assignment(cd, assignment, graded)
    write_gradebook(cd, assignment, graded)
    assign_penalties(cd, assignment, graded)
    for job, result in graded:
        write_autograded(cd, assignment, job, result)
        write_feedback(cd, assignment, job, result)
