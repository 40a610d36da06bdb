"""A failure's cause, when the grader knows it, leads the feedback: once per function.

Each test carries a fixed hint about what it checks (dtype, batch size, devices...).
When the output holds NaN or Inf, or matches a named mistake, that hint is beside
the point: one missing line that makes a NaN fails tests of every function that
uses it. Such a failure carries a `cause` (`check.GradingFailure.cause`); its test
drops its hint, and the feedback opens with one line per function that names
the cause (`lead_lines`).
"""
from __future__ import annotations

import re
from typing import Iterable

TITLE = "What went wrong, by function (this comes before the hints of single tests):"
MISTAKE = "known mistake: "
NON_FINITE = {
    "NaN": ("contains NaN (not a number). A NaN spreads through every operation after the one that made "
            "it, so the failed tests' own hints do not apply: find the first operation that makes one "
            "(a softmax over a row that is all -inf, 0/0, log(0), the square root of a negative number) "
            "by checking torch.isnan(x).any() on each intermediate tensor of a small input"),
    "Inf": ("contains Inf (an infinite value). Find the operation that makes it (a division by 0, exp() of "
            "a large number, a -inf fill that is never replaced) by checking torch.isinf(x).any() on each "
            "intermediate tensor of a small input"),
}
WORDS = {"NaN": re.compile(r"\bNaN\b"), "Inf": re.compile(r"\b(Inf|inf|infinite)\b")}


def cause_of(exc: BaseException) -> str:
    """The cause a failure names: 'NaN', 'Inf', 'known mistake: NAME', or '' (none known).

    A check's own `cause` when it set one (`expect_close`); else a NaN or Inf named in the first line of
    a grader's message. A student's own exception is not diagnosed: its message and traceback lead."""
    from autograder.harness.check import GradingFailure
    from autograder.harness.student import StudentError
    if not isinstance(exc, GradingFailure):
        return ""
    if getattr(exc, "cause", ""):
        return exc.cause
    if isinstance(exc, StudentError):
        return ""
    first = str(exc).split("\n", 1)[0]
    return next((cause for cause, word in WORDS.items() if word.search(first)), "")


def explain(cause: str) -> str:
    """What a cause means for a student, as the end of a sentence about a function."""
    if cause in NON_FINITE:
        return f"its output {NON_FINITE[cause]}"
    if cause.startswith(MISTAKE):
        return f"it looks like a known mistake: {cause[len(MISTAKE):]}"
    return cause


def lead_lines(tests: Iterable) -> list[str]:
    """One line per function whose failed tests have a known cause (its title first; [] when none)."""
    by_function: dict[str, dict[str, int]] = {}
    for t in tests:
        if getattr(t, "cause", "") and t.score < t.max_score:
            causes = by_function.setdefault(t.function or "-", {})
            causes[t.cause] = causes.get(t.cause, 0) + 1
    lines = []
    for function, causes in by_function.items():
        for cause, n in sorted(causes.items(), key=lambda kv: (kv[0] not in NON_FINITE, -kv[1])):
            lines.append(f"- {function}: {explain(cause)} ({n} failed test{'s' if n > 1 else ''}).")
    return [TITLE, *lines] if lines else []
