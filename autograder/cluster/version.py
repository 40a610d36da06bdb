"""The course version: one hash of everything that decides a grade.

The client and every worker compute it from their own files; a worker whose
hash differs from the client's would grade with other graders, another
reference or another harness, so the client refuses it. Light: no torch.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from autograder.paths import ROOT, graders_dir, solutions_dir
from autograder.version import SKIP, package_versions


def course_files() -> list[tuple[str, Path]]:
    """(label, file) for the graders, the reference solutions, the harness and attnkit, in a fixed order."""
    groups = {"graders": graders_dir(), "solutions": solutions_dir(), "autograder": ROOT / "autograder",
              "attnkit": ROOT / "attnkit"}
    found = []
    for label, folder in groups.items():
        pattern = "*.py" if label == "solutions" else "**/*"
        for f in sorted(folder.glob(pattern)):
            rel = f.relative_to(folder)
            if not f.is_file() or f.suffix not in (".py", ".ini") or any(p in SKIP for p in rel.parts):
                continue
            if label == "autograder" and rel.parts[0] in ("graders", "exports"):
                continue  # the graders are counted from graders_dir(); the exports do not grade
            found.append((f"{label}/{rel.as_posix()}", f))
    return found


def course_version() -> str:
    """sha256 of the course's grading files, and of the Python, torch, numpy and pytest versions."""
    h = hashlib.sha256(package_versions().encode())
    for label, path in course_files():
        h.update(f"{label} {len(data := path.read_bytes())}\n".encode())
        h.update(data)
    return h.hexdigest()
