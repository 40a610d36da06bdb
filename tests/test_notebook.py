"""Does the grader read submissions the way Jupyter and jupytext do?"""
from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

from autograder.harness.notebook import read_submission
from course.exercises import chapters

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("path", [*(ROOT / "solutions" / f"{c}.py" for c in chapters()),
                                  ROOT / "tests" / "data" / "99_toy.py"], ids=lambda p: p.stem)
def test_percent_reader_agrees_with_jupytext(path):
    ours = read_submission(path)
    nb = jupytext.read(path)
    theirs = [(c.source.strip(), c.metadata.get("tags", [])) for c in nb.cells if c.cell_type == "code"]
    assert [(c["source"].strip(), c["tags"]) for c in ours.cells] == theirs
    assert ours.chapter == nb.metadata["course"]["chapter"]
