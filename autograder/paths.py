"""Where the autograder finds the solutions and the graders.

Both can be moved with environment variables (the Gradescope export does):
AUTOGRADER_SOLUTIONS and AUTOGRADER_GRADERS.
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def solutions_dir() -> Path:
    """The folder of reference notebooks (`NN_name.py`)."""
    return Path(os.environ.get("AUTOGRADER_SOLUTIONS", ROOT / "solutions"))


def graders_dir() -> Path:
    """The folder of hidden graders (`test_NN_name.py`)."""
    return Path(os.environ.get("AUTOGRADER_GRADERS", Path(__file__).resolve().parent / "graders"))


def chapters() -> list[str]:
    """Every chapter that has both a solution and graders, e.g. ['02_attention']."""
    graded = {p.stem[len("test_"):] for p in graders_dir().glob("test_*.py")}
    return sorted(p.stem for p in solutions_dir().glob("*.py") if p.stem in graded)
