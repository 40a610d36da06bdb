"""A chapter's grader version: one hash of what decides its grades. Light: no torch.

A result is current when it records the grader version of its chapter as it is now: the chapter's
graders (with the graders' conftest.py and pytest.ini), its reference solution, the grading code
(`autograder/harness`, `grade.py`, `graded.py`, `reference.py`, `paths.py`), the provided `attnkit` package and
the versions of Python, torch, numpy and pytest. A batch regrades the results that are not current;
a Gradescope zip records the version it was built with (`check-zip` compares it with the files here).
Batch, command-line, cluster and export code is left out: it decides no score.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import sys
from pathlib import Path

from autograder.paths import ROOT, graders_dir, solutions_dir

PACKAGES = ("torch", "numpy", "pytest")  # their versions change what a reference computes or how tests run
GRADING_CODE = ("harness", "grade.py", "graded.py", "reference.py", "paths.py")  # under autograder/
SKIP = ("__pycache__", ".pytest_cache")


@functools.lru_cache(maxsize=1)
def package_versions() -> str:
    """One line per package that decides grades: Python, torch, numpy, pytest (local tags dropped)."""
    lines = [f"python {sys.version_info[0]}.{sys.version_info[1]}"]
    for name in PACKAGES:
        try:
            version = importlib.metadata.version(name).split("+")[0]  # a CUDA or CPU build grades alike
        except importlib.metadata.PackageNotFoundError:
            version = "missing"
        lines.append(f"{name} {version}")
    return "".join(f"{line}\n" for line in lines)


def _python_files(folder: Path, label: str) -> list[tuple[str, Path]]:
    files = folder.rglob("*.py") if folder.is_dir() else [folder]
    return [(f"{label}/{f.relative_to(folder).as_posix()}" if folder.is_dir() else label, f)
            for f in sorted(files) if not any(p in SKIP for p in f.parts)]


def grading_files(chapter: str | None) -> list[tuple[str, Path]]:
    """(label, file) of everything a result of `chapter` depends on, in a fixed order (None: the
    grading code alone, for a file too broken to name its chapter)."""
    files = []
    if chapter:
        files += [(f"graders/test_{chapter}.py", graders_dir() / f"test_{chapter}.py"),
                  ("graders/conftest.py", graders_dir() / "conftest.py"),
                  ("graders/pytest.ini", graders_dir() / "pytest.ini"),
                  (f"solutions/{chapter}.py", solutions_dir() / f"{chapter}.py")]
    for name in GRADING_CODE:
        files += _python_files(ROOT / "autograder" / name, f"autograder/{name}")
    return files + _python_files(ROOT / "attnkit", "attnkit")


def grader_version(chapter: str | None) -> str:
    """16 hex digits of sha256 over `grading_files(chapter)` and `package_versions()` (recomputed when
    one of the files changes: size or modification time)."""
    files = grading_files(chapter)
    return _digest(chapter, tuple((label, str(path), *_stamp(path)) for label, path in files))


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _digest(chapter: str | None, files: tuple) -> str:
    h = hashlib.sha256(f"chapter {chapter}\n{package_versions()}".encode())
    for label, path, *_ in files:
        try:
            data = Path(path).read_bytes()
        except OSError:
            data = b"<missing>"
        h.update(f"{label} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()[:16]
