"""One bad cell must not cost the whole notebook (book/instructors/grading.md, "One bad cell").

Each test appends one top-level cell to the toy chapter's correct solution
(6 points: 5, and 1 for its CUDA test, which runs on the simulated CUDA device
where no GPU is usable) and grades it, in bubblewrap mode and in the fallback. A cell that
runs past the per-cell limit is interrupted and the notebook goes on; one
that ignores the interrupt or ends its process is dropped and the notebook is
run again without it. Limits are short (1 s a cell) to keep this fast.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.grade import grade_submission
from autograder.harness.notebook import read_submission
from autograder.harness.sandbox import Limits, Sandbox, bwrap_works

CHAPTER = Path(__file__).resolve().parent / "hostile" / "chapter"
TOY = "99_toy"
LIMITS = Limits(call_seconds=5, load_seconds=20, submission_seconds=60, cell_seconds=1, cell_grace_seconds=1,
                memory_bytes=1 << 30)
FULL = 6   # the toy chapter's correct solution, on every machine
CELLS = {
    "hang": "import time\nwhile True:\n    time.sleep(1)",
    "busy": "import time\nstart = time.time()\nwhile time.time() - start < 45:\n    pass",
    "exit_code": "import os\nos._exit(3)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "sys_exit": "import sys\nsys.exit(0)",
    "quit": "quit()",
    "ignores_interrupt": "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except KeyboardInterrupt:\n        pass",
}
SAYS = {"hang": "stopped after 1 s", "busy": "stopped after 1 s", "exit_code": "exited with code 3",
        "segfault": "SIGSEGV", "sys_exit": "SystemExit", "quit": "SystemExit",
        "ignores_interrupt": "did not stop when interrupted"}


@pytest.fixture(scope="module", autouse=True)
def toy_chapter():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
        mp.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
        yield


@pytest.fixture(scope="module", params=["bwrap", "process"])
def box(request):
    if request.param == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap is missing or cannot create namespaces here")
    with Sandbox(LIMITS, isolation=request.param) as sandbox:
        yield sandbox


def notebook(folder: Path, *extra: str) -> Path:
    cells = [{"cell_type": "code", "metadata": {"tags": c["tags"]}, "source": c["source"], "outputs": [],
              "execution_count": None} for c in read_submission(CHAPTER / f"{TOY}.py").cells]
    cells += [{"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
              for src in extra]
    path = folder / "submission.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"chapter": TOY}},
                                "cells": cells}))
    return path


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_one_bad_cell_costs_nothing_else(box, tmp_path, kind):
    result = grade_submission(notebook(tmp_path, CELLS[kind]), box, TOY)
    assert (result["score"], result["max_score"]) == (FULL, FULL), result["output"]
    bad_cell = len(read_submission(CHAPTER / f"{TOY}.py").cells) + 1  # counted as Jupyter users count, from 1
    assert f"cell {bad_cell} (`" in result["output"] and SAYS[kind] in result["output"], result["output"]


def test_a_bad_cell_before_the_definitions_is_dropped_too(box, tmp_path):
    path = notebook(tmp_path)
    nb = json.loads(path.read_text())
    nb["cells"].insert(0, {"cell_type": "code", "metadata": {}, "source": CELLS["exit_code"], "outputs": [],
                           "execution_count": None})
    path.write_text(json.dumps(nb))
    result = grade_submission(path, box, TOY)
    assert result["score"] == FULL, result["output"]
    assert "cell 1 (`import os`)" in result["output"]


def test_many_bad_cells_end_within_the_budget(box, tmp_path):
    result = grade_submission(notebook(tmp_path, *[CELLS["ignores_interrupt"]] * 5), box, TOY)
    assert result["score"] == 0 and result["extra_data"]["execution_time"] < LIMITS.submission_seconds
    assert "stopped its process" in result["output"] or "took longer" in result["output"]
