"""A toy chapter (98_batch_toy) and its submissions, for the class-scale grading tests.

`toy_chapter` is a fixture: it builds a solutions folder and a graders folder
(the real conftest.py and pytest.ini, plus test_98_batch_toy.py) under
tmp_path and points AUTOGRADER_SOLUTIONS / AUTOGRADER_GRADERS at them, so
these tests never depend on the real chapters.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHAPTER = "98_batch_toy"

# name -> (text to find in the solution, replacement); "garbage" is not a notebook at all
VARIANTS = {
    "ok": ("", ""),
    "wrong": ("return a + b", "return a - b"),  # 1 of 4 points (scale still right)
    "segv": ("", ""),  # a cell of its own that crashes while loading (APPENDED)
    "loop": ("return x * k", "while True:\n        pass"),  # one call times out: 3 of 4
    "sleepy": ("import torch", "import torch, time\ntime.sleep(60)"),  # outlives the submission timeout
    "inputs": ("    return a + b", """    print("INPUTS", tuple(a.shape), round(float(a.sum()), 5))
    return a + b"""),  # shows the inputs it was given (the per-student-inputs tests)
    "uid": ("    return a + b", """    import os
    uid = os.getuid()
    rows = [[int(x) for x in line.split()] for line in open('/proc/self/uid_map')]
    print("HOST_UID", next(o + uid - i for i, o, n in rows if i <= uid < i + n))
    return a + b"""),
}

# name -> a code cell appended to the notebook
APPENDED = {"segv": "import ctypes\nctypes.string_at(0)"}


def make_notebook(path: Path, variant: str = "ok") -> Path:
    """Write a submission of the toy chapter: the solution, changed as `variant` says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if variant == "garbage":
        path.write_text("{not json")
        return path
    old, new = VARIANTS[variant]
    nb = copy.deepcopy(jupytext.read(HERE / f"{CHAPTER}.py"))
    for cell in nb.cells:
        if old:
            cell.source = cell.source.replace(old, new)
    if variant in APPENDED:
        nb.cells.append(nbformat.v4.new_code_cell(APPENDED[variant]))
    jupytext.write(nb, path)
    return path


def toy_folders(root: Path) -> tuple[Path, Path]:
    """solutions/ and graders/ of the toy chapter (the toy_chapter fixture's)."""
    sol, graders = root / "solutions", root / "graders"
    sol.mkdir(parents=True)
    graders.mkdir()
    shutil.copy(HERE / f"{CHAPTER}.py", sol)
    shutil.copy(HERE / f"grader_{CHAPTER}.py", graders / f"test_{CHAPTER}.py")
    for name in ("conftest.py", "pytest.ini"):
        shutil.copy(ROOT / "autograder" / "graders" / name, graders)
    return sol, graders


@pytest.fixture
def toy_chapter(tmp_path, monkeypatch) -> Path:
    """A solutions/ and graders/ pair with only the toy chapter; returns their parent folder."""
    from autograder.reference import load_reference
    sol, graders = toy_folders(tmp_path / "chapter")
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(sol))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(graders))
    load_reference.cache_clear()
    yield tmp_path / "chapter"
    load_reference.cache_clear()


OTHER = "99_toy"  # a second chapter (tests/hostile/chapter): its notebook handed in as the toy chapter's
OTHER_DIR = ROOT / "tests" / "hostile" / "chapter"


def add_other_chapter(chapter_dir: Path) -> None:
    """Put the second toy chapter beside the first in a `toy_chapter` folder."""
    shutil.copy(OTHER_DIR / f"{OTHER}.py", chapter_dir / "solutions")
    shutil.copy(OTHER_DIR / f"test_{OTHER}.py", chapter_dir / "graders")


def make_other_notebook(path: Path, metadata: bool = True) -> Path:
    """A correct notebook of the other chapter at `path` (without its `course.chapter` when not `metadata`)."""
    nb = jupytext.read(OTHER_DIR / f"{OTHER}.py")
    if not metadata:
        nb.metadata.pop("course", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(nb, path)
    return path
