"""Student ids from LMS downloads (Canvas, Moodle, Gradescope) or from a `--roster` CSV.

`find_jobs` names a student after the first folder or the file's stem, which is
right for a plain class folder (alice.ipynb, bob/hw.ipynb) and wrong for what an
LMS gives an instructor to download. Here each notebook's path (relative to
the folder given on the command line) is read as:

- a Gradescope export ("Export Submissions"): `submission_NNN/` folders beside
  `submission_metadata.yml` -> each submitter's `:sid:` (their `:email:` when
  the SID is empty); a group's ids are joined by ';' and each gets the score.
  The metadata's `:created_at:` is the submission time.
- a Moodle download ("Download all submissions"): a folder or file named
  `Full Name_12345_assignsubmission_file_...` -> 12345 (the participant id).
- a Canvas download: `doejohn_123456_7891011_02_attention.ipynb`, also with
  `_late_` after the name -> 123456, the Canvas user id (the `ID` column of
  Canvas's gradebook CSV); `late` is recorded.
- `--roster CSV`: a header row, then rows of (file name or glob pattern, id).
  A pattern is matched against the path, the file name and its stem. It wins
  over the rules above; a notebook matching rows with two different ids is
  ambiguous. Its path is kept in OUT/roster.json (`kept_roster`): later runs on
  OUT use it without `--roster`, as the LMS CSV they rewrite needs its ids.

When a roster is given, or any notebook of the batch is an LMS download, a
notebook no rule identifies is *unmatched*: it is graded, listed, and left out
of the LMS CSV with an empty id; it is never given a guessed one. A plain class
folder (no LMS name anywhere, no roster) keeps `find_jobs`' ids.
"""
from __future__ import annotations

import csv
import fnmatch
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from autograder.batch.io import Job, Report

GROUP_SEPARATOR = ";"
CANVAS = re.compile(r"^(?P<name>[^_]+)_(?P<late>late_)?(?P<id>\d+)_(?P<attachment>\d+)_(?P<file>.+)$", re.I)
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_")
GRADESCOPE_METADATA = "submission_metadata.yml"


@dataclass(frozen=True)
class Identity:
    """Who handed a notebook in, according to what."""

    student: str  # "" when unmatched; a group's ids joined by GROUP_SEPARATOR
    source: str  # canvas | moodle | gradescope | roster | folder | unmatched
    submitted: datetime | None = None  # from the LMS's metadata, when it gives one
    late: bool = False  # the LMS itself marked the submission late (Canvas)
    reason: str = ""  # why it is unmatched


@dataclass
class Identified:
    """The jobs with their LMS ids, each job's identity, and the notebooks left unmatched."""

    jobs: list[Job]
    identities: dict[str, Identity] = field(default_factory=dict)

    @property
    def unmatched(self) -> list[Job]:
        return [j for j in self.jobs if self.identities[j.name].source == "unmatched"]

    def sources(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ident in self.identities.values():
            out[ident.source] = out.get(ident.source, 0) + 1
        return out


# ---------------------------------------------------------------- the LMS's own names
def _relative(path: Path, roots: list[Path]) -> Path:
    for root in roots:
        try:
            return path.relative_to(root)
        except ValueError:
            continue
    return Path(path.name)


def gradescope_exports(roots: list[Path]) -> dict[Path, Identity]:
    """Folder of each submission in the Gradescope exports under `roots` -> its identity."""
    import yaml
    found: dict[Path, Identity] = {}
    for root in roots:
        for meta in sorted(root.rglob(GRADESCOPE_METADATA)) if root.is_dir() else []:
            try:
                entries = yaml.safe_load(meta.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ValueError(f"{meta}: not a Gradescope export's metadata ({exc})") from None
            for folder, entry in entries.items() if isinstance(entries, dict) else ():
                found[(meta.parent / str(folder)).resolve()] = _gradescope_identity(entry)
    return found


def _gradescope_identity(entry) -> Identity:
    submitters = (entry.get(":submitters") or []) if isinstance(entry, dict) else []
    ids = [str(s.get(":sid") or s.get(":email") or "").strip() for s in submitters if isinstance(s, dict)]
    if not ids or not all(ids):
        return Identity("", "unmatched", reason="its Gradescope metadata names no SID or email")
    created = entry.get(":created_at")
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created)
        except ValueError:
            created = None
    if isinstance(created, datetime) and created.tzinfo is None:
        created = created.astimezone()
    return Identity(GROUP_SEPARATOR.join(ids), "gradescope", created if isinstance(created, datetime) else None)


def lms_identity(rel: Path) -> Identity | None:
    """The identity a Moodle or Canvas download name gives, or None."""
    for part in rel.parts:
        match = MOODLE.match(part)
        if match:
            return Identity(match["id"], "moodle")
    match = CANVAS.match(rel.name)
    if match:
        return Identity(match["id"], "canvas", late=bool(match["late"]))
    return None


# ---------------------------------------------------------------- an explicit roster
def read_pairs(path: Path, option: str, what: str) -> list[tuple[int, str, str]]:
    """(line number, first cell, second cell) of a CSV's rows after its header; ValueError (naming
    `option` and the line) for an unreadable file or a row without `what` (its two cells)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            lines = list(csv.reader(f))
    except OSError as exc:
        raise ValueError(f"{option} {path}: {exc.strerror}") from None
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        cells = [c.strip() for c in line]
        if not any(cells):
            continue
        if len(cells) < 2 or not cells[0] or not cells[1]:
            raise ValueError(f"{option} {path}, line {number}: expected {what}")
        pairs.append((number, cells[0], cells[1]))
    if not pairs:
        raise ValueError(f"{option} {path}: no rows after the header ({what})")
    return pairs


@dataclass(frozen=True)
class Roster:
    """(pattern, id) rows of a roster CSV."""

    rows: list[tuple[str, str]]

    @classmethod
    def read(cls, path: Path) -> "Roster":
        pairs = read_pairs(path, "--roster", "a file name (or pattern) and an id")
        return cls([(pattern, sid) for _, pattern, sid in pairs])

    def identity(self, rel: Path) -> Identity:
        names = {rel.as_posix(), rel.name, rel.stem}
        ids = sorted({sid for pattern, sid in self.rows if any(fnmatch.fnmatchcase(n, pattern) for n in names)})
        if len(ids) == 1:
            return Identity(ids[0], "roster")
        if ids:
            return Identity("", "unmatched", reason=f"the roster gives it several ids ({', '.join(ids)})")
        return Identity("", "unmatched", reason="no row of the roster matches it")


KEPT_ROSTER = "roster.json"  # in OUT: {"path": the roster last given}


def kept_roster(out: Path, given: str | None) -> Path | None:
    """The roster of this run: `given` (--roster; its path then kept in OUT), else the one an earlier run
    on OUT kept, so that a rerun gives the LMS CSV the same ids without --roster."""
    import json
    from autograder.harness.atomic import write_json
    if given:
        write_json(Path(out) / KEPT_ROSTER, {"path": str(Path(given).resolve())})
        return Path(given)
    try:
        return Path(json.loads((Path(out) / KEPT_ROSTER).read_text())["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------- all together
def identify(paths: list[str], jobs: list[Job], roster: Roster | None = None) -> Identified:
    """Give each job its LMS id (see the module's docstring); nothing is guessed."""
    roots = [Path(p).resolve() for p in paths if Path(p).is_dir()]
    exports = gradescope_exports(roots)
    found: dict[str, Identity] = {}
    for job in jobs:
        path = job.path.resolve()
        rel = _relative(path, roots)
        lms = next((exports[p] for p in path.parents if p in exports), None) or lms_identity(rel)
        if roster is not None:
            own = roster.identity(rel)
            found[job.name] = replace(own, submitted=lms.submitted, late=lms.late) if lms else own
        else:
            found[job.name] = lms or Identity(job.student, "folder")
    if roster is None and any(i.source != "folder" for i in found.values()):  # an LMS download: no guessing
        found = {n: i if i.source != "folder" else Identity("", "unmatched", reason="not an LMS download's name")
                 for n, i in found.items()}
    return Identified([replace(j, student=found[j.name].student) for j in jobs], found)


def unmatched_text(ided: Identified) -> str:
    """The unmatched notebooks, one a line, with why."""
    return "\n".join(f"  {j.path}: {ided.identities[j.name].reason}" for j in ided.unmatched)


def lms_report(report: Report) -> Report:
    """The report as the LMS CSV sees it: unmatched notebooks out, a group's members one row each."""
    jobs = [replace(j, student=s) for j in report.jobs for s in j.student.split(GROUP_SEPARATOR) if s]
    return Report(jobs, report.results)
