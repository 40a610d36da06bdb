"""The reference solution of a chapter: its notebook's cells run in the trusted process."""
from __future__ import annotations

import functools
import io
import types
from contextlib import redirect_stderr, redirect_stdout

from autograder.harness.notebook import read_submission
from autograder.paths import solutions_dir
from autograder.harness.worker import run_cells, seed_all

SKIP_TAGS = {"skip-grading"}


@functools.lru_cache(maxsize=None)
def load_reference(chapter: str) -> types.SimpleNamespace:
    """The names the solution notebook of `chapter` defines (cells tagged skip-grading skipped)."""
    path = solutions_dir() / f"{chapter}.py"
    if not path.exists():
        raise FileNotFoundError(f"no reference solution for chapter {chapter!r} at {path}")
    sub = read_submission(path)
    ns: dict = {"__name__": f"reference_{chapter}"}
    seed_all(0)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        errors = run_cells(sub.cells, SKIP_TAGS, ns)
    if errors:
        first = errors[0]
        raise RuntimeError(f"the reference solution of {chapter} fails in cell {first['cell']}: "
                           f"{first['error']}: {first['message']}\n{first['traceback']}")
    return types.SimpleNamespace(**{k: v for k, v in ns.items() if not k.startswith("__")})
