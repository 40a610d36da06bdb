"""Reading a submission: a notebook (.ipynb) or a jupytext text notebook (.py).

Anything malformed raises `BadSubmission` with a message for the student;
it never crashes a batch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 200 * 1024 * 1024
# NN_name, not inside a number or a word: Canvas's `doejohn_123456_7891011_02_attention-1` is 02_attention
CHAPTER_RE = re.compile(r"(?<![0-9A-Za-z])\d\d_[a-z][a-z0-9_]*")


class BadSubmission(ValueError):
    """The file cannot be graded; the message says why."""


@dataclass
class Submission:
    """The parts of a notebook the grader needs: its code cells and its chapter."""

    path: Path
    cells: list[dict]
    chapter: str | None


def _source(cell: dict, index: int) -> str:
    src = cell.get("source", "")
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    if isinstance(src, str):
        return src
    raise BadSubmission(f"cell {index + 1}'s source is not text (it is a {type(src).__name__})")


def _tags(cell: dict) -> list[str]:
    meta = cell.get("metadata")
    tags = meta.get("tags", []) if isinstance(meta, dict) else []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


MAGIC = {b"%PDF": "a PDF document", b"PK\x03\x04": "a zip archive", b"\x89PNG": "a PNG image",
         b"\xff\xd8\xff": "a JPEG image", b"\x1f\x8b": "a gzip archive", b"\x7fELF": "a program",
         b"{\\rtf": "an RTF document", b"\xd0\xcf\x11\xe0": "an old Office document"}


def sniff(raw: bytes) -> str | None:
    """What a file that is not a notebook is, from its first bytes (e.g. 'a PDF document')."""
    return next((kind for magic, kind in MAGIC.items() if raw.startswith(magic)), None)


def parse_ipynb(raw: bytes) -> dict:
    """The notebook's JSON, checked to be an nbformat-4 notebook."""
    kind = sniff(raw)
    if kind:
        raise BadSubmission(f"the file is {kind}, not a Jupyter notebook: upload the .ipynb file itself")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadSubmission(f"the file is not UTF-8 text (byte {exc.start} cannot be decoded); "
                            "save it again from Jupyter") from None
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadSubmission(f"the file is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg}); it may have been cut off or edited by hand") from None
    except RecursionError:
        raise BadSubmission("the file is not a Jupyter notebook (its JSON is nested too deeply)") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise BadSubmission("the file is JSON but not a Jupyter notebook (no list of cells)")
    if nb.get("nbformat") != 4:
        raise BadSubmission(f"the notebook is in nbformat {nb.get('nbformat')!r}; this course uses "
                            "nbformat 4 (open and save it in a current Jupyter)")
    return nb


CELL_RE = re.compile(r"^# %%(?P<rest>.*)$")
TAGS_RE = re.compile(r"tags=(\[[^\]]*\])")
CHAPTER_META_RE = re.compile(r"^#\s+course:\s*\n#\s+chapter:\s*(\S+)", re.M)


def parse_text(raw: bytes) -> dict:
    """A jupytext percent-format notebook's code cells and chapter, as an nbformat-like dict.

    A small reader of our own rather than jupytext, whose import costs seconds
    (nbformat's schema validation) on every grading run; `tests/test_notebook.py`
    checks it agrees with jupytext on every chapter.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadSubmission("the file is not UTF-8 text") from None
    match = CHAPTER_META_RE.search(text.split("\n# %%", 1)[0])
    cells, current = [], None
    for line in text.splitlines():
        head = CELL_RE.match(line)
        if head:
            rest = head.group("rest")
            tags = TAGS_RE.search(rest)
            current = {"cell_type": "markdown" if "[markdown]" in rest else "code",
                       "metadata": {"tags": json.loads(tags.group(1)) if tags else []}, "lines": []}
            cells.append(current)
        elif current is not None:
            current["lines"].append(line)
    for cell in cells:
        cell["source"] = "\n".join(cell.pop("lines")).strip("\n")
    meta = {"course": {"chapter": match.group(1)}} if match else {}
    return {"nbformat": 4, "cells": cells, "metadata": meta}


def read_submission(path: str | Path, chapter: str | None = None) -> Submission:
    """Load and check a submission; `chapter` is used when the notebook does not name one."""
    path = Path(path)
    if not path.is_file():
        raise BadSubmission(f"{path} is not a file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise BadSubmission(f"the file is {size / 2**20:.0f} MiB, over the {MAX_BYTES / 2**20:g} MiB limit: "
                            "its outputs are probably huge; clear them (Kernel > Restart Kernel and Clear "
                            "Outputs of All Cells), save and submit again")
    raw = path.read_bytes()
    if path.suffix not in (".py", ".ipynb"):
        kind = sniff(raw) or f"a {path.suffix or 'extension-less'} file"
        raise BadSubmission(f"{path.name} is {kind}, not a notebook: submit the .ipynb file")
    try:
        nb = parse_text(raw) if path.suffix == ".py" else parse_ipynb(raw)
    except BadSubmission:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise BadSubmission(f"the notebook cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            raise BadSubmission(f"cell {i + 1} is not a notebook cell")
        if cell.get("cell_type") == "code":
            cells.append({"cell_type": "code", "source": _source(cell, i), "tags": _tags(cell), "index": i})
    if not cells:
        raise BadSubmission("the notebook has no code cells")
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    course = meta.get("course") if isinstance(meta.get("course"), dict) else {}
    own = course.get("chapter") if isinstance(course.get("chapter"), str) else None
    if own and chapter and own != chapter:
        raise BadSubmission(f"this is the notebook of chapter {own}, not of {chapter}: "
                            f"submit your {chapter} notebook")
    found = own or chapter or _chapter_from_name(path)
    return Submission(path, cells, found)


def chapter_from_name(path: Path) -> str | None:
    """The chapter a file's name mentions (`alice_02_attention.ipynb` -> `02_attention`, and in LMS
    download names: Canvas's `doejohn_123456_7891011_02_attention-1.ipynb`, Moodle's
    `Jo Doe_123_assignsubmission_file_02_attention.ipynb`), if any."""
    match = CHAPTER_RE.search(path.stem)
    return match.group(0) if match else None


_chapter_from_name = chapter_from_name
