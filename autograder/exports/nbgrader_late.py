"""nbgrader's own late penalty, for the notebooks we grade into its gradebook.

`nbgrader autograde` runs its `AssignLatePenalties` preprocessor after saving a
notebook's scores. We save the scores ourselves, so we run that same
preprocessor on each notebook, with the course's configuration: the
`LateSubmissionPlugin` (`c.LateSubmissionPlugin.penalty_method = "zero"`) or the
plugin class `c.AssignLatePenalties.plugin_class` names. How late a submission
is comes from the gradebook, as in nbgrader: the submission's timestamp (its
timestamp.txt), the assignment's due date (`nbgrader db assignment add NAME
--duedate=...` or formgrader) and the student's extension
(`Gradebook.grant_extension`, or formgrader). nbgrader then shows the penalty
(`nbgrader export`: raw_score, late_submission_penalty, score), and results.json,
grades.csv and the feedback get the very same penalty (`autograder.late.record`).
"""
from __future__ import annotations

import logging

from autograder import late
from autograder.batch.io import Job

QUIET = logging.getLogger("autograder.nbgrader_late")  # nbgrader logs every late notebook as a warning
QUIET.setLevel(logging.ERROR)


def _policy_text(plugin) -> str:
    method = getattr(plugin, "penalty_method", None)
    if type(plugin).__name__ == "LateSubmissionPlugin" and method in ("none", "zero"):
        return f"{late.Policy(method).describe()} (nbgrader's LateSubmissionPlugin, penalty_method={method!r})"
    return f"nbgrader plugin {type(plugin).__module__}.{type(plugin).__qualname__}"


def _extension(sub) -> str:
    return f"{sub.extension.total_seconds() / 3600:g}h" if sub.extension else ""


def assign_penalties(cd, assignment: str, graded: list[tuple[Job, dict]]) -> None:
    """Run nbgrader's AssignLatePenalties on each graded notebook (already in the gradebook), then write
    its penalty into the result (a submission with no due date or no timestamp: no deadline mark)."""
    from nbformat.v4 import new_notebook
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import AssignLatePenalties
    pre = AssignLatePenalties(config=cd.config, log=QUIET)
    for job, _ in graded:
        pre.preprocess(new_notebook(), {"nbgrader": {"notebook": job.notebook, "assignment": assignment,
                                                     "student": job.student, "db_url": cd.db_url}})
    with Gradebook(cd.db_url, cd.course_id) as gb:
        for job, result in graded:
            sub = gb.find_submission(assignment, job.student)
            if sub.duedate is None or sub.timestamp is None:
                late.clear(result)
                continue
            penalty = gb.find_submission_notebook(job.notebook, assignment, job.student).late_submission_penalty
            lateness = late.Lateness(late.utc(sub.duedate), late.utc(sub.timestamp), "nbgrader timestamp.txt",
                                     _extension(sub))
            late.record(result, lateness, _policy_text(pre.plugin_inst), penalty or 0.0)
