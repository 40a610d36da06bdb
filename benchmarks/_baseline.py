"""Run a benchmark against an older commit in the same run: `--baseline REV`.

The commit is checked out as a temporary git worktree; commands run with it as
their working folder import its `autograder` (the working folder comes first on
`sys.path` with `python -m` and `python -c`), with this checkout's virtual
environment. So old and new code are timed minutes apart on the same machine.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worktree(rev: str):
    """A checkout of `rev` in a temporary folder, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="baseline-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(folder.parent, ignore_errors=True)


def describe(rev: str) -> str:
    """`rev` as a short hash and subject, for the printout."""
    out = subprocess.run(["git", "log", "-1", "--format=%h %s", rev], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or rev
