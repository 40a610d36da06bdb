"""The LMS CSV (`--lms-csv FILE`): the class's scores, one row per student, for a gradebook import.

Its rows are `io.lms_rows`: a student's notebooks summed (several notebooks of an nbgrader assignment),
a notebook superseded by a newer one of the same chapter left out, a student with a notebook not
graded yet left out and named. Two layouts:

- `plain`: ID_COLUMN,SCORE_COLUMN (`--lms-columns`, default `student_id,score`), for an import whose
  columns you map by hand (Moodle, Blackboard);
- `canvas`: the columns of Canvas's own gradebook export, `Student, ID, SIS User ID, SIS Login ID,
  Section`, then the assignment's column (SCORE_COLUMN). The student id fills ID_COLUMN (one of `ID`,
  `SIS User ID`, `SIS Login ID`; default `ID`, the Canvas user id of a Canvas download's names); the
  other cells stay empty, as the grader does not know them.

Where the CSV goes, its columns and its layout are kept in OUT/lms.json, as the deadline is kept in
OUT/deadline.json: every later run on OUT (a rerun, `--student`, one notebook regraded alone) writes
it again from every result in OUT, so it never lags behind grades.csv.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder.batch.ids import lms_report
from autograder.batch.io import Report, lms_rows
from autograder.harness.atomic import write_csv, write_json

KEPT = "lms.json"
FORMATS = ("plain", "canvas")
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_IDS = ("ID", "SIS User ID", "SIS Login ID")
PLAIN_DEFAULT = ("student_id", "score")


@dataclass(frozen=True)
class LmsCsv:
    """Where the LMS CSV goes and how it looks."""

    path: str  # absolute
    columns: tuple[str, str] = PLAIN_DEFAULT  # (the id's column, the score's column)
    format: str = "plain"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"--lms-format {self.format!r}: use one of {', '.join(FORMATS)}")
        if self.format == "canvas" and self.columns[0] not in CANVAS_IDS:
            raise ValueError(f"--lms-columns {','.join(self.columns)}: with --lms-format canvas the id goes in one "
                             f"of Canvas's id columns ({', '.join(CANVAS_IDS)})")

    def header(self) -> list[str]:
        return [*CANVAS_COLUMNS, self.columns[1]] if self.format == "canvas" else list(self.columns)

    def row(self, student: str, score: str) -> list[str]:
        if self.format == "plain":
            return [student, score]
        return [student if column == self.columns[0] else "" for column in CANVAS_COLUMNS] + [score]

    def write(self, report: Report) -> list[str]:
        """Write the CSV from `report` (the whole class); return the students left out (not graded yet)."""
        rows, left_out = lms_rows(lms_report(report))
        write_csv(Path(self.path), self.header(), [self.row(student, score) for student, score in rows])
        return left_out


def load(out: Path) -> LmsCsv | None:
    """The LMS CSV kept in OUT, if any."""
    try:
        data = json.loads((Path(out) / KEPT).read_text())
        return LmsCsv(str(data["path"]), tuple(data["columns"]), str(data.get("format") or "plain"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{Path(out) / KEPT} is unreadable ({exc}); give --lms-csv again") from None


def from_args(args: argparse.Namespace, out: Path, chapter: str | None) -> LmsCsv | None:
    """The LMS CSV this run writes: the kept one, with what --lms-csv, --lms-columns and --lms-format
    change (then kept again); None when neither is there. ValueError (a message) on a bad option."""
    stored = load(out)
    given = [args.lms_csv, args.lms_columns, args.lms_format]
    if not any(given):
        return stored
    if not (args.lms_csv or stored):
        raise ValueError("--lms-columns and --lms-format need --lms-csv FILE")
    layout = args.lms_format or (stored.format if stored else "plain")
    if args.lms_columns:
        columns = tuple(c.strip() for c in args.lms_columns.split(","))
        if len(columns) != 2 or not all(columns):
            raise ValueError("--lms-columns takes two names: ID_COLUMN,SCORE_COLUMN")
    elif stored and stored.format == layout:
        columns = stored.columns
    else:
        columns = ("ID", chapter or "score") if layout == "canvas" else PLAIN_DEFAULT
    path = str(Path(args.lms_csv).resolve()) if args.lms_csv else stored.path
    kept = LmsCsv(path, columns, layout)
    write_json(Path(out) / KEPT, {**asdict(kept), "columns": list(kept.columns)})
    return kept
