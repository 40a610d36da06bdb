"""A chapter's stored results as a batch's results folder, so that the class table, the class report,
the similarity report and the exports are the batch's own (`autograder.batch`, `report`, `similarity`).

SERVICE/<chapter>/<student>/results.json holds each student's grade: their last graded attempt
(late penalty applied), with its notebook beside it. The folder is rewritten from the database
whenever an instructor asks for a table, report or export; the database stays the record.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from sqlalchemy import select

from autograder.batch import Report, write_lms_csv
from autograder.batch.ids import lms_report
from autograder.batch.io import locked, whole, write_grades_csv
from autograder.harness.atomic import write_json
from autograder.service.queue import latest_result
from autograder.service.store import Submission


def folder_name(student_id: str) -> str:
    """A student id as a folder name (ids are the LMS's: emails, numbers; never a path)."""
    name = re.sub(r"[^\w@.+-]", "_", student_id).lstrip(".")
    return name or "_"


def graded_last(db, chapter: str) -> dict[str, tuple[Submission, dict]]:
    """Each student's last attempt of `chapter` that has a result, with the result."""
    found: dict[str, tuple[Submission, dict]] = {}
    with db() as s:
        for sub in s.scalars(select(Submission).where(Submission.chapter == chapter).order_by(Submission.id)):
            res = latest_result(s, sub.id)
            if res is not None:
                found[sub.student_id] = (sub, json.loads(res.result))
    return found


def write_folder(db, folder: Path, chapter: str) -> tuple[Path, Report]:
    """Rewrite SERVICE/<chapter> from the database; the folder and its whole-class report."""
    out = Path(folder) / chapter
    with locked(out):
        for old in out.glob("*/results.json"):
            shutil.rmtree(old.parent)
        for sid, (sub, result) in graded_last(db, chapter).items():
            own = out / folder_name(sid)
            own.mkdir(parents=True, exist_ok=True)
            notebook = own / f"{chapter}.ipynb"
            notebook.write_bytes(sub.notebook)
            result["extra_data"].update(submission=own.name, student=sid, path=str(notebook.resolve()))
            write_json(own / "results.json", result)
        report = whole(Report([], {}), out)
        write_grades_csv(out, report)
    return out, report


def lms_csv(db, folder: Path, chapter: str) -> Path:
    """SERVICE/<chapter>/lms.csv: one row per student (LMS id, score after any late penalty)."""
    out, report = write_folder(db, folder, chapter)
    path = out / "lms.csv"
    write_lms_csv(path, lms_report(report))
    return path


def class_report(db, folder: Path, chapter: str) -> Path:
    from autograder.report import write_report
    out, _ = write_folder(db, folder, chapter)
    return write_report(out)[0]


def similarity_report(db, folder: Path, chapter: str) -> Path:
    from autograder.similarity import similarity
    out, _ = write_folder(db, folder, chapter)
    return similarity([str(out)], out, chapter)[2][0]


def gradescope_zip(folder: Path, chapter: str) -> Path:
    """The chapter's Gradescope autograder (`python -m autograder export-gradescope`)."""
    from autograder.exports.gradescope import export
    return export(chapter, Path(folder) / chapter / "autograder.zip")


def nbgrader_gradebook(db, folder: Path, chapter: str) -> Path:
    """SERVICE/<chapter>/nbgrader/gradebook.db: nbgrader's gradebook with each student's last attempt
    (assignment `chapter`), written by `autograder.exports.nbgrader` as `grade --nbgrader-course` does."""
    from autograder.batch.io import Job, stored_results
    from autograder.exports import nbgrader as nbgrader_io
    out, _ = write_folder(db, folder, chapter)
    course = out / "nbgrader"
    course.mkdir(exist_ok=True)
    (course / "gradebook.db").unlink(missing_ok=True)  # rebuilt whole: nobody is left from an older export
    cd = nbgrader_io.open_course(course, chapter)
    graded = [(Job(name, Path(r["extra_data"]["path"]), r["extra_data"]["student"], chapter, chapter), r)
              for name, r in stored_results(out).items() if name != "nbgrader"]
    nbgrader_io.write_gradebook(cd, chapter, graded)
    return course / "gradebook.db"
