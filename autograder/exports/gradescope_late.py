"""Gradescope's due dates, read where run_autograder runs: /autograder/submission_metadata.json.

`created_at` is the submission time and `assignment.due_date` the due date; a
submitter's own `users[].assignment.due_date` (Gradescope's dates with that
student's extension, where the metadata has them) wins, and for a group the
latest of them. The policy is the one given to `export-gradescope
--late-policy POLICY --late-cap PERCENT` (kept in gradescope.json); without one,
the lateness is still shown, with no penalty. Gradescope itself only marks a
submission late: the penalty here is what the score says.
"""
from __future__ import annotations

import json
from pathlib import Path

from autograder import late

METADATA = "submission_metadata.json"


def zip_settings(policy: str | None, cap: float | None) -> dict | None:
    """What gradescope.json keeps of `export-gradescope --late-policy POLICY --late-cap PERCENT` (None:
    no policy). ValueError on a bad policy, or a cap without one."""
    if policy is None:
        if cap is not None:
            raise ValueError("--late-cap needs --late-policy")
        return None
    parsed = late.Policy.parse(policy, 100.0 if cap is None else cap)
    return {"late_policy": parsed.to_text(), "late_cap": parsed.cap}


def lateness(meta: dict) -> late.Lateness | None:
    """How late a submission was, from Gradescope's metadata; None when it gives no due date or time."""
    assignment = meta.get("assignment") or {}
    own = [u["assignment"]["due_date"] for u in meta.get("users") or []
           if isinstance(u, dict) and isinstance(u.get("assignment"), dict) and u["assignment"].get("due_date")]
    try:
        submitted = late.parse_time(str(meta["created_at"]))
        base = late.parse_time(str(assignment["due_date"]))
        dues = [late.parse_time(str(d)) for d in own]
    except (KeyError, TypeError, ValueError):
        return None
    due = max(dues) if dues else base
    extension = f"due {due.isoformat(timespec='minutes')}" if due != base else ""
    return late.Lateness(due, submitted, "Gradescope submission_metadata.json", extension)


def apply(result: dict, root: Path, config: dict) -> dict:
    """Mark `result` with its lateness and the zip's late policy, when the metadata says when it was due."""
    try:
        meta = json.loads((root / METADATA).read_text())
    except (OSError, ValueError):
        return result
    when = lateness(meta) if isinstance(meta, dict) else None
    if when is None:
        return result
    policy = late.Policy.parse(config.get("late_policy", "none"), float(config.get("late_cap", 100.0)))
    return late.penalise(result, when, policy)
