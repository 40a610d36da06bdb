"""The grader is no more lenient than "Restart & Run All" (issue 40, defect 4).

The student's cells are compiled in `autograder/harness/worker.py`, which has
`from __future__ import annotations`. Compiled without `dont_inherit=True`, the
cells inherited it: a `def` whose annotations name an undefined name succeeded in
the grader and failed in Jupyter, and a notebook whose imports cell failed still
had its functions (30/72 on chapter 02, where Jupyter defines none).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.grade import grade_submission
from autograder.harness.notebook import read_submission
from autograder.harness.sandbox import Limits, Sandbox
from autograder.harness.worker import run_cells

CHAPTER = Path(__file__).resolve().parent / "hostile" / "chapter"
TOY = "99_toy"


def code(source: str) -> dict:
    return {"cell_type": "code", "source": source, "tags": []}


@pytest.mark.parametrize("source", [
    "def f(x: Undefined) -> int:\n    return 1",
    "%%time\ndef f(x: Undefined) -> int:\n    return 1",
    "%time def f(x: Undefined) -> int: return 1",
])
def test_an_annotation_naming_an_undefined_name_fails_as_in_jupyter(source):
    ns: dict = {"__name__": "__main__"}
    report = run_cells([code(source)], set(), ns)
    assert "f" not in ns, "the def succeeded: the cell was compiled with the worker's __future__ flags"
    assert [r["error"] for r in report] == ["NameError"] and "Undefined" in report[0]["message"], report


def test_postponed_annotations_still_work_when_the_notebook_asks_for_them():
    ns: dict = {"__name__": "__main__"}
    report = run_cells([code("from __future__ import annotations"), code("def f(x: Undefined) -> int:\n    return 1")],
                       set(), ns)  # IPython keeps an earlier cell's __future__ imports
    assert report == [] and "f" in ns


@pytest.fixture(scope="module")
def box():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
        mp.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
        with Sandbox(Limits(call_seconds=10, load_seconds=30, submission_seconds=60), isolation="process") as sb:
            yield sb


def test_a_failed_imports_cell_defines_no_annotated_function(box, tmp_path):
    """The toy's imports cell fails before `import torch`: in Jupyter every `def` with a `torch.Tensor`
    annotation then raises NameError, so no graded function exists and the notebook scores 0."""
    cells = [{"cell_type": "code", "metadata": {"tags": c["tags"]}, "outputs": [], "execution_count": None,
              "source": "import not_a_module_anywhere\n" + c["source"] if c["source"].startswith("import torch")
              else c["source"]} for c in read_submission(CHAPTER / f"{TOY}.py").cells]
    path = tmp_path / "imports_fail.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"chapter": TOY}},
                                "cells": cells}))
    result = grade_submission(path, box, TOY)
    assert result["score"] == 0, result["output"]
    assert "ModuleNotFoundError" in result["output"] and "NameError" in result["output"], result["output"]
