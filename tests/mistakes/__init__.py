"""Known-wrong variants of graded functions: a self-test of the graders."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    """A wrong redefinition of `function`, appended to the solution notebook.

    `feedback`, if given, is a phrase the grader's feedback must contain
    (the known mistake was named).
    """

    function: str
    name: str
    code: str
    feedback: str | None = None
