"""Gradescope's results.json shape, written atomically, and what a student reads of it in the terminal."""
from __future__ import annotations

from dataclasses import dataclass

from autograder.harness.atomic import write_csv, write_json, write_text  # noqa: F401 - re-exported
from autograder.harness.diagnosis import TITLE as CAUSES_TITLE, lead_lines

STUDENT_OUTPUT_LIMIT = 2000


@dataclass
class TestResult:
    """One check's outcome."""

    __test__ = False  # not a pytest test class
    name: str
    function: str
    score: float
    max_score: float
    status: str  # passed | failed | skipped
    output: str = ""
    cause: str = ""  # a failure's known cause: 'NaN', 'Inf', 'known mistake: NAME' (harness/diagnosis.py)


def results_json(chapter: str | None, tests: list[TestResult], output: str,
                 extra: dict | None = None, max_score: float | None = None) -> dict:
    """A Gradescope results object: score, max_score, output and one entry per test."""
    score = sum(t.score for t in tests)
    total = sum(t.max_score for t in tests) if max_score is None else max_score
    return {
        "score": round(score, 4),
        "max_score": round(total, 4),
        "output": output,
        "stdout_visibility": "visible",
        "tests": [{"name": t.name, "score": t.score, "max_score": t.max_score, "status":
                   "passed" if t.status == "passed" else "failed", "output": t.output,
                   "visibility": "visible", "tags": [t.function] if t.function else []}
                  for t in tests if t.status != "skipped"],  # skipped (e.g. CUDA) tests: extra_data
        "extra_data": {"chapter": chapter, "skipped": [t.name for t in tests if t.status == "skipped"],
                       **(extra or {})},
    }


def set_visibility(result: dict, tests: str, top: str | None = None) -> dict:
    """Set Gradescope's `visibility` of every test of `result` (and its top-level one, if given)."""
    for test in result.get("tests", []):
        test["visibility"] = tests
    if top is not None:
        result["visibility"] = top
    return result


def cell_label(err: dict) -> str:
    """'cell 15 (`def masked_softmax(...):`)': the cell as Jupyter users count them (1-based, markdown
    cells included), with its first line, so a student finds it."""
    line = err.get("line")
    return f"cell {err['cell']} (`{line}`)" if line else f"cell {err['cell']}"


def cell_errors_text(cells: list[dict]) -> str:
    """Feedback on the cells that raised while the notebook ran."""
    if not cells:
        return ""
    lines = ["Some cells of your notebook raised an error, ran too long or stopped its process when it ran "
             "top to bottom (cells are counted from 1, markdown cells included; cells tagged skip-grading "
             "are not run by the grader):"]
    for err in cells[:10]:
        lines.append(f"- {cell_label(err)}: {err['error']}: {err['message'][:300]}")
    if any(err["error"] in ("Interrupted", "Skipped") for err in cells):
        lines.append("A cell that trains, waits or runs long belongs in a cell tagged skip-grading; the grader "
                     "stops a cell after its time limit and goes on with the next one.")
    if len(cells) > 10:
        lines.append(f"- ... and {len(cells) - 10} more")
    return "\n".join(lines)


def label_student_output(text: str) -> str:
    """The student's own printed output, truncated and marked as theirs."""
    if not text:
        return ""
    if len(text) > STUDENT_OUTPUT_LIMIT:
        text = text[:STUDENT_OUTPUT_LIMIT] + f"\n... [{len(text) - STUDENT_OUTPUT_LIMIT} more characters cut]"
    fenced = "\n".join("| " + line for line in text.splitlines())
    return f"Your code printed (first {STUDENT_OUTPUT_LIMIT} characters, shown as printed):\n{fenced}"


def feedback_lines(header: str, load_failure: str | None, report: dict, printed: str,
                   tests: list[TestResult] = ()) -> list[str]:
    """The opening lines of a submission's feedback: its score line, then the known causes of its
    failures, one line per function (`diagnosis.lead_lines`), why the notebook could not run, its cell
    errors and what it printed (each only when there is one)."""
    lines = [header]
    causes = lead_lines(tests)
    if causes:
        lines.append("\n".join(causes))
    if load_failure:
        lines.append(f"Your notebook could not be run: {load_failure}.")
    errors = cell_errors_text(report.get("cells", []))
    if errors:
        lines.append(errors)
    if printed:
        lines.append(label_student_output(printed))
    return lines


def function_report(result: dict) -> str:
    """What a student reads in the terminal: points per graded function, then each failed test's feedback."""
    per: dict[str, list[float]] = {}
    for t in result["tests"]:
        name = (t.get("tags") or ["-"])[0]
        got, total = per.setdefault(name, [0.0, 0.0])
        per[name] = [got + t["score"], total + t["max_score"]]
    rows = [(name, f"{got:g}", f"{total:g}", "ok" if got == total else "FAILED") for name, (got, total) in per.items()]
    header = ("function", "points", "max", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    fmt = "  ".join(f"{{:{'<' if i in (0, 3) else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*r).rstrip() for r in [header, *rows]]
    lines.append(f"total: {result['score']:g} / {result['max_score']:g}")
    blocks = result["output"].split("\n\n")[1:]  # notebook-level messages: causes, cell errors, printed output
    causes = [b for b in blocks if b.startswith(CAUSES_TITLE)]
    if causes:  # the known causes lead, before the failed tests and their hints
        lines += ["", *causes]
    failed = [t for t in result["tests"] if t["score"] < t["max_score"]]
    if failed:
        lines.append("")
        lines.append(f"{len(failed)} failed test{'s' if len(failed) > 1 else ''}:")
        for t in failed:
            lines.append(f"* {t['name']}")
            lines.extend("    " + ln for ln in t["output"].splitlines())
    rest = [b for b in blocks if not b.startswith(CAUSES_TITLE)]
    if rest:  # cell errors, warnings, printed output
        lines += ["", "\n\n".join(rest)]
    return "\n".join(lines)
