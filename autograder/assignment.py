"""Which assignment a submission is graded as, and whether the notebook really is that assignment's.

A submission is graded as the chapter it was handed in for: `--chapter`, the nbgrader assignment
(`autograder.exports.nbgrader.course_chapters`), the Gradescope zip's chapter; a folder graded
without `--chapter`, as the one chapter its notebooks name (`infer_chapter`); a single notebook, as
the chapter it names. The chapter a class folder is graded as is kept in OUT/assignment.json
(`kept_chapter`), as its deadline is kept in OUT/deadline.json: every later command on that folder
(a rerun, `--student`, one notebook regraded alone) grades as it without `--chapter`, even when a
wrong-chapter notebook is in the class. The notebook's content never chooses the chapter; it can only be refused:
a notebook whose metadata names another chapter, or that defines most of another chapter's graded
functions and few of its own (`looks_like`), gets 0 out of the assignment's maximum, with a message
naming the chapter it looks like.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from autograder.harness.atomic import write_json
from autograder.harness.notebook import BadSubmission, read_submission

DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)
ENOUGH = 0.5  # the share of a chapter's graded functions a notebook of that chapter defines at least
KEPT = "assignment.json"  # in a class's output folder: {"chapter": "NN_name"}


def kept_chapter(out: Path) -> str | None:
    """The chapter the class in `out` is graded as, kept by an earlier run (None: none kept)."""
    try:
        chapter = json.loads((Path(out) / KEPT).read_text()).get("chapter")
    except (OSError, ValueError, AttributeError):
        return None
    return chapter if isinstance(chapter, str) and chapter else None


def keep_chapter(out: Path, chapter: str) -> None:
    """Keep `chapter` as the one the class in `out` is graded as (a --chapter given later replaces it)."""
    if kept_chapter(out) != chapter:
        write_json(Path(out) / KEPT, {"chapter": chapter})


def stated_chapter(path: Path) -> str | None:
    """The chapter a notebook names: its metadata's `course.chapter`, else its file name's."""
    try:
        return read_submission(path).chapter
    except BadSubmission:
        return None


def infer_chapter(paths: list[Path], recorded: dict[str, list[str]] | None = None) -> tuple[str | None, str]:
    """(the one chapter the notebooks name, "") or (None, why there is none).

    `recorded`: chapter -> submissions already graded as it in the output folder; they count as
    naming it, so one notebook regraded alone is graded as its class was.
    """
    named: dict[str, list[str]] = {ch: list(subs) for ch, subs in (recorded or {}).items()}
    for path in paths:
        chapter = stated_chapter(path)
        if chapter:
            named.setdefault(chapter, []).append(str(path))
    if len(named) == 1:
        return next(iter(named)), ""
    if not named:
        return None, (f"none of the {len(paths)} notebooks says which chapter it is for: "
                      "grade them with --chapter NN_name")
    counts = Counter({chapter: len(files) for chapter, files in named.items()})
    lines = [f"  {chapter}: {n} ({', '.join(named[chapter][:3])}{', ...' if n > 3 else ''})"
             for chapter, n in counts.most_common()]
    return None, ("the notebooks (and the results already in the output folder) name several chapters:\n"
                  + "\n".join(lines) + "\nGrade each assignment with --chapter NN_name: a notebook of another "
                  "chapter then gets 0, with a message naming the chapter it looks like.")


def defined_names(cells: list[dict]) -> set[str]:
    """The functions and classes the code cells define at top level."""
    return {name for cell in cells for name in DEFINITION.findall(cell.get("source", ""))}


def looks_like(cells: list[dict], chapter: str) -> str | None:
    """Another chapter whose notebook these cells are, or None.

    They are when they define fewer than half of `chapter`'s graded functions and at least half of
    another chapter's (and more of its share than of `chapter`'s).
    """
    from autograder.graded import graded_functions  # imports torch: only when a notebook is checked
    from autograder.paths import chapters
    names = defined_names(cells)

    def share(ch: str) -> float:
        wanted = graded_functions(ch)
        return len(names & wanted) / len(wanted) if wanted else 0.0

    own = share(chapter)
    if own >= ENOUGH:
        return None
    best, best_share = None, own
    for other in chapters():
        if other != chapter and (s := share(other)) >= ENOUGH and s > best_share:
            best, best_share = other, s
    return best
