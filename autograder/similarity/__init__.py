"""Which submissions are suspiciously alike: `python -m autograder similarity OUT_OR_SUBMISSIONS`.

- `extract`: what a student wrote (the graded cells of the notebook, the starter's stubs left out);
- `compare`: copydetect's MOSS-style winnowing, every pair of students of a chapter ranked;
- `report`: similarity.html (ranked pairs, identical files, side-by-side matches) and similarity.csv.

The input is a batch's results folder (each results.json names the file it graded and its sha256)
or the submissions themselves (notebooks, or folders of them, named as `grade` names them).
"""
from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path

from autograder.batch.io import find_jobs, sha256_of, student_id
from autograder.harness.notebook import chapter_from_name
from autograder.similarity.compare import Entry, Pair, pairs_of, ranked
from autograder.similarity.extract import BadSubmission, chapter_of, read_notebook, starter, written
from autograder.similarity.report import write_report

__all__ = ["Entry", "Pair", "find_entries", "is_results_folder", "similarity"]


def is_results_folder(path: Path) -> bool:
    """Whether `path` is a batch's OUT folder (OUT/<submission>/results.json)."""
    return path.is_dir() and any(path.glob("*/results.json"))


def from_results(out: Path) -> list[Entry]:
    """One entry per OUT/<submission>/results.json, with the file and sha256 it records."""
    entries = []
    for f in sorted(out.glob("*/results.json")):
        try:
            extra = json.loads(f.read_text()).get("extra_data", {})
        except (OSError, ValueError, AttributeError):
            extra = {}
        name = extra.get("submission") or f.parent.name
        entry = Entry(name, extra.get("student") or name, extra.get("path") or "", extra.get("sha256") or "",
                      extra.get("chapter"))
        if not entry.path:
            entry.problem = ("its results.json does not name the graded file (graded by an older "
                             "autograder): run similarity on the submissions folder")
        elif extra.get("status") == "superseded":
            entry.problem = (f"superseded: a newer notebook of {entry.student} counts "
                             f"({extra.get('superseded_by')}), and is compared instead")
        entries.append(entry)
    return entries


def find_entries(paths: list[str]) -> list[Entry]:
    """The submissions in `paths`: results folders read as such, notebooks and folders as `grade` finds them."""
    entries, files = [], []
    for raw in paths:
        if is_results_folder(Path(raw)):
            entries.extend(from_results(Path(raw)))
        else:
            files.append(raw)
    for job in find_jobs(files) if files else []:
        entries.append(Entry(job.name, student_id(job), str(job.path), sha256_of(job.path), None))
    return entries


def load_code(entry: Entry, chapter: str | None, starter_path: Path | None) -> None:
    """Fill in the entry's chapter and the code of its graded cells (or why it cannot be read).

    Its chapter is the assignment's: the one it was graded as (a results folder), else `chapter`
    (--chapter), else the one the notebook names. A notebook that names another chapter than its
    assignment's is not compared (its code is not an answer to that assignment), and the report says so.
    """
    if entry.problem:
        return
    try:
        nb = read_notebook(Path(entry.path))
    except (BadSubmission, OSError) as exc:
        entry.problem = str(exc)
        return
    named = chapter_of(nb) or chapter_from_name(Path(entry.path))
    assignment = entry.chapter or chapter
    entry.chapter = assignment or named
    if assignment and named and named != assignment:
        entry.problem = f"the notebook of chapter {named}, not of {assignment}: not compared"
        return
    if entry.chapter is None:
        entry.problem = "the notebook does not say which chapter it is for (give --chapter NN_name)"
        return
    try:
        entry.code = written(nb, starter_for(entry.chapter, starter_path)).text()
    except (BadSubmission, OSError) as exc:
        entry.problem = f"no starter notebook for {entry.chapter} ({exc}); give --starter FILE"


@functools.lru_cache(maxsize=None)
def starter_for(chapter: str, path: Path | None):
    return starter(chapter, path)


def similarity(paths: list[str], out: Path, chapter: str | None = None, starter_path: Path | None = None,
               top: int = 50, threshold: float = 0.5) -> tuple[list[Entry], list[Pair], tuple[Path, Path]]:
    """Compare every pair of students of each chapter in `paths`; write OUT/similarity.html and .csv."""
    entries = find_entries(paths)
    by_chapter: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        load_code(entry, chapter, starter_path)
        if not entry.problem:
            by_chapter[entry.chapter].append(entry)
    pairs = ranked([p for ch, group in sorted(by_chapter.items())
                    for p in pairs_of(group, starter_for(ch, starter_path).text())])
    return entries, pairs, write_report(out, entries, pairs, top, threshold)
