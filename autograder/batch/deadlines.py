"""A due date for a class graded from the command line: `--due`, `--late-policy`, `--late-cap`, `--extensions`.

The deadline is kept in OUT/deadline.json, so a rerun (say, for a late
resubmission) applies the same one without repeating the options; an option
given again replaces its stored value (`--late-policy none` keeps the due date
and takes the penalties away). After every run each result is checked against
it (see `autograder.late`): extra_data.late, the final score and the feedback's
"Deadline:" paragraph in results.json, and grades.csv's raw_score, penalty and
hours_late columns. Changing the deadline regrades nothing: only the penalties
are recomputed.

A submission's time comes from, in this order: the LMS's metadata (a Gradescope
export's `created_at`), a `timestamp.txt` beside the notebook (nbgrader's
format, e.g. "2026-12-01 23:02:00.000000 UTC"), else the file's modification
time. results.json says which (`extra_data.late.submitted_from`). A file's
mtime is only as good as the copy that made it: unzip keeps the archive's
times, a plain `cp` does not.

Extensions: a CSV with a header row, then rows of (student id or submission
name, extension), the extension a duration added to the due date (90m, 36h, 2d,
1w) or the student's own due date (2026-12-03T23:59).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder.batch.ids import GROUP_SEPARATOR, Identity, read_pairs
from autograder.batch.io import SUPERSEDED, Job, Report, locked, read_result, result_path, write_grades_csv
from autograder.harness.atomic import write_json
from autograder import late

SETTINGS = "deadline.json"


@dataclass
class Deadline:
    """When the class's submissions were due, what lateness costs, and who has an extension."""

    due: datetime
    policy: late.Policy
    extensions: dict[str, str] = field(default_factory=dict)  # student id or submission name -> extension

    def due_for(self, job: Job) -> tuple[datetime, str]:
        """The job's due date (its extension applied) and the extension as written ("" if none)."""
        keys = [job.name, *job.student.split(GROUP_SEPARATOR)]
        granted = [(late.parse_extension(self.extensions[k], self.due), self.extensions[k])
                   for k in keys if k in self.extensions]
        return max(granted) if granted else (self.due, "")

    def to_json(self) -> dict:
        return {"due": self.due.isoformat(), "late_policy": self.policy.to_text(), "late_cap": self.policy.cap,
                "extensions": self.extensions}

    @classmethod
    def from_json(cls, data: dict) -> "Deadline":
        return cls(late.parse_time(data["due"]), late.Policy.parse(data["late_policy"], float(data["late_cap"])),
                   dict(data.get("extensions") or {}))

    def describe(self) -> str:
        granted = f"; {len(self.extensions)} extensions" if self.extensions else ""
        return f"due {self.due.strftime('%Y-%m-%d %H:%M %Z').strip()}, late policy: {self.policy.describe()}{granted}"


# ---------------------------------------------------------------- the command line
def read_extensions(path: Path) -> dict[str, str]:
    """student id or submission name -> extension, from a CSV with a header row."""
    table = {}
    for number, key, extension in read_pairs(path, "--extensions", "a student id and an extension"):
        try:
            late.parse_extension(extension, datetime.now(timezone.utc))
        except ValueError as exc:
            raise ValueError(f"--extensions {path}, line {number}: {exc}") from None
        table[key] = extension
    return table


def load(out: Path) -> Deadline | None:
    """The deadline stored in OUT, if any."""
    try:
        return Deadline.from_json(json.loads((out / SETTINGS).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{out / SETTINGS} is unreadable ({exc}); give --due and --late-policy again") from None


def from_args(args: argparse.Namespace, out: Path) -> Deadline | None:
    """The deadline for this run: the stored one, with what the options change; stored again. ValueError
    (a message for the instructor) on a bad option or a half-given deadline."""
    stored = load(out)
    if not late.options_given(args):
        return stored
    try:
        due = late.parse_time(args.due) if args.due else stored.due if stored else None
    except ValueError:
        raise ValueError(f"--due {args.due!r}: give an ISO 8601 time such as 2026-12-01T23:59") from None
    policy_text = args.late_policy or (stored.policy.to_text() if stored else None)
    if due is None or policy_text is None:
        raise ValueError("a deadline needs both --due TIME and --late-policy POLICY "
                         f"(policies: {late.POLICIES})")
    cap = args.late_cap if args.late_cap is not None else stored.policy.cap if stored else 100.0
    policy = late.Policy.parse(policy_text, cap)
    extensions = read_extensions(Path(args.extensions)) if args.extensions else stored.extensions if stored else {}
    deadline = Deadline(due, policy, extensions)
    write_json(out / SETTINGS, deadline.to_json())
    return deadline


# ---------------------------------------------------------------- submission times
def read_timestamp(path: Path) -> datetime:
    """A timestamp.txt as nbgrader writes it ('2026-12-01 23:02:00.000000 UTC'; a zone name or offset
    last; none: UTC). ValueError if it is not a time."""
    import dateutil.parser
    import dateutil.tz
    text = path.read_text().strip()
    parts = text.split(" ")
    try:
        if len(parts) == 3:  # date, time, zone: how nbgrader reads its own files
            zone = dateutil.tz.gettz(parts[2]) if not parts[2].lstrip("+-").isdigit() else None
            stamp = dateutil.parser.parse(" ".join(parts[:2]) + ("" if zone else " " + parts[2]))
            stamp = stamp.replace(tzinfo=zone) if zone else stamp
        else:
            stamp = dateutil.parser.parse(text)
    except (ValueError, OverflowError):
        raise ValueError(f"{path}: not a time ({text[:40]!r})") from None
    return late.utc(stamp)


def submission_time(job: Job, identity: Identity | None) -> tuple[datetime, str]:
    """When `job` was handed in, and where that comes from."""
    if identity is not None and identity.submitted is not None:
        return identity.submitted, f"{identity.source} metadata"
    stamp = job.path.parent / "timestamp.txt"
    if stamp.is_file():
        return read_timestamp(stamp), "timestamp.txt"
    return datetime.fromtimestamp(job.path.stat().st_mtime, timezone.utc), "file mtime"


# ---------------------------------------------------------------- applying it
@dataclass
class Checked:
    """What checking a class against its deadline found."""

    sources: Counter = field(default_factory=Counter)  # where the submission times came from
    late: int = 0
    lms_late_on_time: list[str] = field(default_factory=list)  # the LMS says late, the file's time does not


def apply(report: Report, deadline: Deadline, identities: dict[str, Identity] | None = None) -> Checked:
    """Check every result of `report` against `deadline` (in memory)."""
    checked = Checked()
    for job in report.jobs:
        result = report.results.get(job.name)
        if result is None or result.get("extra_data", {}).get("status") in ("crashed", SUPERSEDED):
            continue
        identity = (identities or {}).get(job.name)
        submitted, source = submission_time(job, identity)
        due, extension = deadline.due_for(job)
        lateness = late.Lateness(due, submitted, source, extension)
        late.penalise(result, lateness, deadline.policy)
        checked.sources[source] += 1
        checked.late += lateness.seconds_late > 0
        if identity is not None and identity.late and not lateness.seconds_late:
            checked.lms_late_on_time.append(job.name)
    return checked


def remembered(job: Job, previous: dict | None) -> dict[str, Identity]:
    """For one notebook regraded alone: the submission time an LMS's metadata gave its earlier result
    (the class run read it; this run reads no metadata), as `apply`'s identities."""
    seen = (previous or {}).get("extra_data", {}).get("late")
    if not isinstance(seen, dict) or not str(seen.get("submitted_from", "")).endswith(" metadata"):
        return {}
    source = str(seen["submitted_from"])[:-len(" metadata")]
    return {job.name: Identity(job.student, source, late.parse_time(seen["submitted"]))}


def settle(report: Report, deadline: Deadline | None, identities: dict[str, Identity] | None = None) -> Checked:
    """Apply `deadline` to every result; without one, take away the marks of an earlier deadline."""
    if deadline is not None:
        return apply(report, deadline, identities)
    for result in report.results.values():
        if result is not None:
            late.clear(result)
    return Checked()


def write_back(out: Path, report: Report) -> int:
    """Rewrite each results.json that differs from its (changed) result in `report`, then grades.csv;
    return how many results changed."""
    changed = 0
    with locked(out):
        for job in report.jobs:
            result = report.results.get(job.name)
            if result is not None and read_result(out, job) != result:
                write_json(result_path(out, job), result)
                changed += 1
        write_grades_csv(out, report)
    return changed


def summary(deadline: Deadline, checked: Checked) -> str:
    """For the terminal: the deadline, how many were late, where the times came from, and the
    notebooks an LMS marked late although their time says they were not."""
    sources = ", ".join(f"{n} from {s}" for s, n in sorted(checked.sources.items()))
    text = f"deadline: {deadline.describe()}. {checked.late} late; submission times: {sources or 'none'}"
    if checked.lms_late_on_time:
        text += (f"\nwarning: the LMS marked {len(checked.lms_late_on_time)} of them late, but their times say "
                 f"on time (check the files' times, or put a timestamp.txt beside each): "
                 + ", ".join(checked.lms_late_on_time[:10]))
    return text
