"""Feedback a student can act on (issue 40, defects 5 and 6).

- Cells are named as Jupyter users count them (1-based, markdown cells included) and quoted by their first
  line, in the cell errors and in tracebacks (`File "<cell N>"`), not by their 0-based code-cell index.
- A NaN (or a named mistake) leads the feedback once per function, through the real grading path and the
  public check, and the failed tests' fixed hints (dtype, batch size, devices) are not given for it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autograder.grade import grade_submission
from autograder.harness.diagnosis import TITLE
from autograder.harness.notebook import parse_text
from autograder.harness.results import function_report
from autograder.harness.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parent.parent
TOY_DIR = ROOT / "tests" / "hostile" / "chapter"
TOY = "99_toy"
CHAPTER = "02_attention"
# masked_softmax without its last line: a fully masked row's weights are NaN (one missing line, three functions)
NAN_CELL = ('def masked_softmax(scores, mask=None, dim=-1):\n'
            '    if mask is None:\n'
            '        return torch.softmax(scores, dim=dim)\n'
            '    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)\n')


def ipynb(path: Path, cells: list[dict], chapter: str) -> Path:
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"chapter": chapter}},
                                "cells": [{"cell_type": c["cell_type"], "metadata": c["metadata"],
                                           "source": c["source"], **({"outputs": [], "execution_count": None}
                                                                     if c["cell_type"] == "code" else {})}
                                          for c in cells]}))
    return path


def cells_of(path: Path) -> list[dict]:
    return parse_text(path.read_bytes())["cells"]


def code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {"tags": []}, "source": source}


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(call_seconds=20, load_seconds=60, submission_seconds=300), isolation="process") as sandbox:
        yield sandbox


def test_cells_are_named_as_jupyter_counts_them(box, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(TOY_DIR))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(TOY_DIR))
    cells = cells_of(TOY_DIR / f"{TOY}.py")
    assert any(c["cell_type"] == "markdown" for c in cells)  # markdown cells count too
    cells += [code("x = 1\nboom = 1 / 0"),
              code("def causal_mask(n):\n    return helper(n)\n\ndef helper(n):\n    raise ValueError('no mask')")]
    failing, redefined = len(cells) - 1, len(cells)  # their numbers in Jupyter (1-based, all cells)
    result = grade_submission(ipynb(tmp_path / "nb.ipynb", cells, TOY), box, TOY)
    assert f"cell {failing} (`x = 1`): ZeroDivisionError" in result["output"], result["output"]
    outputs = "\n".join(t["output"] for t in result["tests"] if "causal_mask" in t["tags"])
    assert f'File "<cell {redefined}>", line 5, in helper' in outputs, outputs


@pytest.fixture(scope="module")
def nan_notebook(tmp_path_factory) -> Path:
    cells = cells_of(ROOT / "solutions" / f"{CHAPTER}.py")
    at = next(i for i, c in enumerate(cells) if c["source"].lstrip().startswith("def masked_softmax"))
    cells[at] = code(NAN_CELL)
    return ipynb(tmp_path_factory.mktemp("nan") / f"{CHAPTER}.ipynb", cells, CHAPTER)


def assert_nan_leads(result: dict, report: str) -> None:
    failed = [t for t in result["tests"] if t["score"] < t["max_score"]]
    nan = [t for t in failed if "NaN" in t["output"]]
    assert nan and {t["tags"][0] for t in failed} >= {"masked_softmax"}, report
    assert not any("Hint:" in t["output"] for t in nan), [t["output"] for t in nan]  # no fixed hint for a NaN
    lead = report.index(TITLE)
    assert lead < report.index("failed test"), report  # the diagnosis leads
    block = report[lead:].split("\n\n")[0].splitlines()[1:]
    functions = [line.split(":")[0] for line in block]
    assert "- masked_softmax" in functions and len(functions) == len(set(functions)), block  # once a function
    assert any(line.startswith("- masked_softmax: its output contains NaN") for line in block), block


def test_a_nan_is_named_by_the_hidden_graders(box, nan_notebook):
    result = grade_submission(nan_notebook, box, CHAPTER)
    assert TITLE in result["output"].split("\n\n")[1], result["output"]
    assert_nan_leads(result, function_report(result))


def test_a_nan_is_named_by_the_public_check(nan_notebook, tmp_path, monkeypatch, capsys):
    from attnkit.check import main
    from course.release import cached_checks
    _, path = cached_checks(CHAPTER)
    shutil.copy(path, tmp_path / f"{CHAPTER}.pt")
    monkeypatch.setenv("ATTNKIT_CHECKS", str(tmp_path))
    assert main([str(nan_notebook), "--isolation", "process", "--out", str(tmp_path / "r.json")]) == 1
    assert_nan_leads(json.loads((tmp_path / "r.json").read_text()), capsys.readouterr().out)
