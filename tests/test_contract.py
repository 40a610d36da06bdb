"""Are the names of the exercise contract (../shared/EXERCISES.md) graded exercises?"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from autograder.grade import grader_file
from autograder.paths import chapters
from course.exercises import exercise_notebook

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT.parent / "shared" / "EXERCISES.md"
NOT_NAMES = {"step_fn", "forward", "inverse", "argmax", "softmax", "sigmoid", "tanh", "relu", "max"}


def contract_names() -> dict[str, list[str]]:
    out, current = {}, None
    for line in CONTRACT.read_text().splitlines():
        head = re.match(r"## (\d\d_\w+)", line)
        if head:
            current = out.setdefault(head.group(1), [])
        elif current is not None:
            current += [n for n in re.findall(r"`([A-Za-z_]\w*)\(", line) if n not in NOT_NAMES and n not in current]
    return out


def graded_functions(chapter: str) -> set[str]:
    spec = importlib.util.spec_from_file_location(f"g_{chapter}", grader_file(chapter))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {f.graded["function"] for f in vars(mod).values() if hasattr(f, "graded")}


@pytest.mark.skipif(not CONTRACT.exists(), reason="the contract ../shared/EXERCISES.md is not beside this checkout")
@pytest.mark.parametrize("chapter", chapters())
def test_contract_names_are_exercises_and_graded(chapter):
    names = contract_names().get(chapter, [])
    stubs = {c.metadata.get("nbgrader", {}).get("grade_id") for c in exercise_notebook(chapter).cells}
    missing_cells = [n for n in names if n not in stubs]
    assert not missing_cells, f"contract names without an exercise cell: {missing_cells}"
    missing_graders = [n for n in names if n not in graded_functions(chapter)]
    assert not missing_graders, f"contract names without a grader: {missing_graders}"
