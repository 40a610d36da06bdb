"""What a chapter's hidden graders test, as their `@graded` declarations say: the grader file, its graded
tests, the student functions they test and the chapter's total points.

`grade` runs these tests; `assignment` reads which functions they test to tell one chapter's notebook
from another's. Neither needs the other.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Callable

from autograder.paths import graders_dir


def grader_file(chapter: str) -> Path:
    return graders_dir() / f"test_{chapter}.py"


def graded_tests(chapter: str) -> list[Callable]:
    """The chapter's graded tests (its grader file's `@graded` functions), read again when the file changes."""
    path = grader_file(chapter)
    stat = path.stat()
    return _graded_tests(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _graded_tests(path: str, mtime_ns: int, size: int) -> list[Callable]:
    from autograder.harness.check import counts  # imports torch, as the grader file itself does
    spec = importlib.util.spec_from_file_location(f"_graded_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [f for f in vars(module).values() if callable(f) and counts(f)]


def max_points(chapter: str) -> float:
    """The chapter's total points, read from the graders' `@graded` declarations (the same on every
    machine: CUDA tests run on a simulated device where no GPU is usable)."""
    return sum(f.graded["points"] for f in graded_tests(chapter))


def graded_functions(chapter: str) -> set[str]:
    """The student functions and classes the chapter's graders test."""
    return {f.graded["function"] for f in graded_tests(chapter) if f.graded["function"]}
