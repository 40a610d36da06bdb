"""Temporary folders that no killed process leaves behind.

A folder is named `PREFIX<pid>-XXXXXXXX` after the process that made it.
Making a new one first removes those whose process is gone. A batch kills
a worker that overruns, `kill -9` ends a batch, Dask stops its workers:
each left its sandbox's staging folder (21 MB) in /tmp until now.
Standard library only: the zygote imports it inside the sandbox.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(prefix: str, root: str | None = None) -> list[Path]:
    """Remove the folders `PREFIX<pid>-*` under root (the temp folder) whose process is gone."""
    name = re.compile(re.escape(prefix) + r"(\d+)-[^/]+")
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{prefix}*"):
        match = name.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and not alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def owned_tempdir(prefix: str) -> str:
    """A new temporary folder named after this process; first sweeps those of dead processes."""
    sweep(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
