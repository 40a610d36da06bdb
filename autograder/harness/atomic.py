"""Atomic file writes: a reader (or a rerun after kill -9) sees the old file or the new one, never half.

Each write goes to a temporary `.tmp-*` file in the same folder, is flushed
and fsynced, then renamed over the target. Standard library only, so that
light processes (the batch's parent) can use it without importing torch.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

TEMP_PREFIX = ".tmp-"


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=path.suffix)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: dict) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(obj, indent=2))


def write_csv(path: Path, header: list[str], rows: Iterable[list]) -> None:
    """Write a CSV atomically."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    write_text(path, buf.getvalue())
