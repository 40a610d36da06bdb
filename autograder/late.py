"""Late submissions: a late policy, the penalty it gives, and how a result shows it.

A result (results.json object) that has been checked against a due date carries
`extra_data.late`: the due date (extension included), the submission time and
where that time comes from, the seconds late, the policy, the raw score and the
penalty. Its `score` is then the final score (raw - penalty; the per-test
scores stay as graded), and its feedback has one paragraph starting with
"Deadline:" that says all this to the student. Applying a deadline again (a new
policy, an extension) starts from the raw score, so nothing is counted twice.

Standard library only: the batch's light parent process uses it.
"""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

POLICIES = "none, zero, per-hour:P or per-day:P (P: percent of the maximum score per started hour or day)"
MARK = "Deadline: "  # the feedback paragraph this module writes starts with it
UNIT_SECONDS = {"per-hour": 3600, "per-day": 86400}


@dataclass(frozen=True)
class Policy:
    """What a late submission costs: nothing, everything, or P% of the maximum per started hour/day."""

    kind: str = "none"  # none | zero | per-hour | per-day
    percent: float = 0.0
    cap: float = 100.0  # at most this percent of the maximum score

    @classmethod
    def parse(cls, text: str, cap: float = 100.0) -> "Policy":
        """'none', 'zero', 'per-hour:10' or 'per-day:25'; ValueError on anything else."""
        kind, _, amount = text.strip().lower().partition(":")
        if not 0 <= cap <= 100:
            raise ValueError(f"the late cap is a percent of the maximum score (0 to 100), not {cap:g}")
        if kind in ("none", "zero") and not amount:
            return cls(kind, 0.0, cap)
        if kind in UNIT_SECONDS:
            try:
                percent = float(amount)
            except ValueError:
                percent = -1.0
            if 0 <= percent <= 100:
                return cls(kind, percent, cap)
        raise ValueError(f"unknown late policy {text!r}: use {POLICIES}")

    def describe(self) -> str:
        if self.kind == "none":
            return "no penalty"
        if self.kind == "zero":
            return "a late submission scores 0"
        unit = self.kind.split("-")[1]
        text = f"{self.percent:g}% of the maximum score per started {unit} late"
        return text + (f", at most {self.cap:g}%" if self.cap < 100 else "")

    def penalty(self, raw: float, max_score: float, seconds_late: float) -> float:
        """Points taken from `raw`: never more than `raw`, nothing when on time."""
        if seconds_late <= 0 or self.kind == "none":
            return 0.0
        if self.kind == "zero":
            return max(raw, 0.0)
        units = math.ceil(seconds_late / UNIT_SECONDS[self.kind])
        percent = min(units * self.percent, self.cap)
        return round(min(max(raw, 0.0), max_score * percent / 100), 4)

    def to_text(self) -> str:
        """The command-line form ('per-hour:10'); the cap is kept apart."""
        return self.kind if self.kind in ("none", "zero") else f"{self.kind}:{self.percent:g}"


@dataclass(frozen=True)
class Lateness:
    """When a submission was due (its extension included) and when it came."""

    due: datetime  # timezone-aware
    submitted: datetime  # timezone-aware
    source: str  # where `submitted` comes from, e.g. "timestamp.txt", "file mtime", "Gradescope"
    extension: str = ""  # e.g. "48h" or "due 2026-12-03 23:59" ("" without one)

    @property
    def seconds_late(self) -> float:
        return max(0.0, (self.submitted - self.due).total_seconds())


def parse_time(text: str) -> datetime:
    """An ISO 8601 time ('2026-12-01T23:59', '2026-12-01 23:59:00+01:00', '...Z'); a time without a
    zone is this machine's local time. ValueError if it is not one."""
    text = text.strip()
    stamp = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    return stamp if stamp.tzinfo else stamp.astimezone()  # naive: local time


DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$", re.I)
DURATION_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_extension(text: str, due: datetime) -> datetime:
    """A student's due date: `due` plus a duration ('90m', '36h', '2d', '1w') or a new ISO time."""
    match = DURATION.match(text)
    if match:
        return due + timedelta(**{DURATION_UNITS[match[2].lower()]: float(match[1])})
    try:
        return parse_time(text)
    except ValueError:
        raise ValueError(f"extension {text!r}: give a duration (90m, 36h, 2d, 1w) or a date "
                         "(2026-12-03T23:59)") from None


def _when(t: datetime, zone) -> str:
    return t.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z").strip()


def _duration(seconds: float) -> str:
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or "0 min"


def raw_score(result: dict) -> float:
    """The score before any late penalty."""
    late = result.get("extra_data", {}).get("late")
    return float(late["raw_score"]) if isinstance(late, dict) and "raw_score" in late else float(result["score"])


def _set_paragraph(result: dict, text: str | None) -> None:
    """Put `text` as the feedback's second paragraph (after the score line), replacing an older one."""
    parts = [p for p in str(result.get("output", "")).split("\n\n") if not p.startswith(MARK)]
    if text:
        parts.insert(1, text)
    result["output"] = "\n\n".join(parts)


def record(result: dict, lateness: Lateness, policy_text: str, penalty: float) -> dict:
    """Write the lateness and `penalty` (points) into `result`: extra_data.late, score, feedback."""
    raw = raw_score(result)
    penalty = round(min(max(penalty, 0.0), max(raw, 0.0)), 4)
    final = round(raw - penalty, 4)
    zone = lateness.due.tzinfo
    extra = f" (extension: {lateness.extension})" if lateness.extension else ""
    if lateness.seconds_late > 0:
        text = (f"{MARK}submitted {_when(lateness.submitted, zone)}, {_duration(lateness.seconds_late)} after "
                f"the due date {_when(lateness.due, zone)}{extra}. Late policy: {policy_text}. "
                f"Penalty: {penalty:g} points, so the score is {final:g} / {result.get('max_score', 0):g} "
                f"(before the penalty: {raw:g}).")
    else:
        text = f"{MARK}submitted {_when(lateness.submitted, zone)}, on time (due {_when(lateness.due, zone)}{extra})."
    result.setdefault("extra_data", {})["late"] = {
        "due": lateness.due.isoformat(), "submitted": lateness.submitted.isoformat(),
        "submitted_from": lateness.source, "extension": lateness.extension,
        "seconds_late": round(lateness.seconds_late, 1), "policy": policy_text,
        "raw_score": raw, "penalty": penalty}
    result["score"] = final
    _set_paragraph(result, text)
    return result


def penalise(result: dict, lateness: Lateness, policy: Policy) -> dict:
    """Apply `policy` to `result` for a submission `lateness` says was (or was not) late."""
    penalty = policy.penalty(raw_score(result), float(result.get("max_score") or 0.0), lateness.seconds_late)
    return record(result, lateness, policy.describe(), penalty)


def clear(result: dict) -> dict:
    """Remove a deadline's mark: the raw score again, no late block, no Deadline paragraph."""
    extra = result.get("extra_data", {})
    if "late" in extra:
        result["score"] = raw_score(result)
        del extra["late"]
    _set_paragraph(result, None)
    return result


CSV_COLUMNS = ["raw_score", "penalty", "hours_late"]


def csv_cells(result: dict | None) -> list[str]:
    """grades.csv's late columns: raw score, penalty, hours late (the last two empty without a due date)."""
    if result is None:
        return ["", "", ""]
    late = result.get("extra_data", {}).get("late")
    if not isinstance(late, dict):
        return [f"{float(result['score']):g}", "", ""]
    return [f"{float(late['raw_score']):g}", f"{float(late['penalty']):g}", f"{late['seconds_late'] / 3600:.2f}"]


def utc(t: datetime) -> datetime:
    """`t` as an aware UTC time (a naive `t` is taken to be UTC, as nbgrader stores times)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


# ---------------------------------------------------------------- the command line
OPTIONS = ("due", "late_policy", "late_cap", "extensions")


def add_arguments(parser: argparse.ArgumentParser, due: bool = True) -> None:
    """The late options: --late-policy and --late-cap; with `due`, also --due and --extensions (where
    the due date does not come from nbgrader or Gradescope)."""
    title = ("deadline (kept in OUT/deadline.json for later runs; not with --nbgrader-course, where nbgrader's "
             "due date, extensions and LateSubmissionPlugin apply)") if due else "late submissions"
    d = parser.add_argument_group(title)
    if due:
        d.add_argument("--due", metavar="TIME", help="the due date, ISO 8601 (2026-12-01T23:59; without a zone: "
                       "this machine's local time)")
    d.add_argument("--late-policy", metavar="POLICY", help=f"what lateness costs: {POLICIES}")
    d.add_argument("--late-cap", type=float, metavar="PERCENT",
                   help="the most a late penalty takes, in percent of the maximum score (default 100)")
    if due:
        d.add_argument("--extensions", metavar="CSV", help="a header row, then rows of (student id or submission "
                       "name, extension: a duration such as 48h or 2d, or the student's own due date)")


def options_given(args: argparse.Namespace) -> bool:
    """Whether any late option is on the command line."""
    return any(getattr(args, k, None) is not None for k in OPTIONS)
