"""Personal tokens: issued from the roster by the instructor, stored as their sha256 only.

A token is 32 random bytes (base64url), so a fast hash is enough: nobody can guess one from its
hash. The instructor's token is one more, kept in the settings table.
"""
from __future__ import annotations

import csv
import hashlib
import os
import secrets
from pathlib import Path

from sqlalchemy import select

from autograder.service.store import Setting, Student

INSTRUCTOR = "instructor_token_hash"
ID_COLUMNS = ("id", "student_id", "sis user id", "sis_user_id", "login_id", "sid")  # Canvas's gradebook: ID
NAME_COLUMNS = ("name", "student", "student name", "full name")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


def read_roster(path: Path) -> list[tuple[str, str]]:
    """(student id, name) rows of a roster CSV: a header row naming an id column (id, student_id, SID,
    or Canvas's gradebook export's ID) and perhaps a name column (name, Student); without such names,
    the first column is the id and the second the name. ValueError with the line on a bad file."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [[c.strip() for c in row] for row in csv.reader(f)]
    except OSError as exc:
        raise ValueError(f"--roster {path}: {exc.strerror}") from None
    if len(rows) < 2:
        raise ValueError(f"--roster {path}: a header row, then one row per student")
    header = [h.lower() for h in rows[0]]
    id_col = next((header.index(c) for c in ID_COLUMNS if c in header), 0)
    name_col = next((header.index(c) for c in NAME_COLUMNS if c in header), 1 if id_col == 0 else None)
    found: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(row):
            continue
        sid = row[id_col] if id_col < len(row) else ""
        if not sid or sid.lower() == "points possible" or (row and row[0].strip().lower() == "points possible"):
            continue  # Canvas's second row, or a row without an id
        name = row[name_col] if name_col is not None and name_col < len(row) else ""
        found[sid] = name
    if not found:
        raise ValueError(f"--roster {path}: no student ids found (column {rows[0][id_col]!r})")
    return sorted(found.items())


def issue(db, roster: list[tuple[str, str]], again: bool = False) -> list[tuple[str, str, str]]:
    """Add the roster's students and give each without a token (each, with `again`) a new one; return
    (id, name, token) for those that got one: the only time a token is ever shown."""
    issued = []
    with db.begin() as s:
        for sid, name in roster:
            student = s.get(Student, sid)
            if student is None:
                student = Student(id=sid, name=name)
                s.add(student)
            elif name:
                student.name = name
            if student.token_hash is None or again:
                token = new_token()
                student.token_hash = digest(token)
                issued.append((sid, student.name, token))
    return issued


def issue_instructor(db) -> str:
    """A new instructor token (the old one stops working)."""
    token = new_token()
    with db.begin() as s:
        row = s.get(Setting, INSTRUCTOR)
        if row is None:
            s.add(Setting(key=INSTRUCTOR, value=digest(token)))
        else:
            row.value = digest(token)
    return token


def who(db, token: str) -> tuple[str, str | None] | None:
    """("instructor", None) or ("student", id) for a valid token; None otherwise."""
    if not token or len(token) > 200:
        return None
    h = digest(token)
    with db() as s:
        row = s.get(Setting, INSTRUCTOR)
        if row is not None and secrets.compare_digest(row.value, h):
            return "instructor", None
        sid = s.scalar(select(Student.id).where(Student.token_hash == h))
    return ("student", sid) if sid is not None else None


def write_tokens(path: Path, issued: list[tuple[str, str, str]]) -> None:
    """The issued tokens as a CSV (id, name, token), readable by its owner only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "name", "token"])
        w.writerows(issued)
