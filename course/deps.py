"""What a chapter's execution depends on, for the caches of book pages and alternative runs.

A chapter depends on its own files and on the `attnkit` modules it imports,
directly or through other attnkit modules: not on every attnkit module, so
that a helper added for one chapter does not re-run the seven others.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ATTNKIT = ROOT / "attnkit"
IMPORT = re.compile(r"(?:from\s+attnkit\.(\w+)\s+import|import\s+attnkit\.(\w+)|attnkit\.(\w+)|"
                    r"from\s+attnkit\s+import\s+([\w, ()]+)|from\s+\.(\w+)\s+import|from\s+\.\s+import\s+([\w, ]+))")


def _modules(text: str) -> set[str]:
    names = set()
    for groups in IMPORT.findall(text):
        for g in groups:
            names |= {n.strip(" ()") for n in g.split(",") if n.strip(" ()")}
    return {n for n in names if (ATTNKIT / f"{n}.py").exists()}


def attnkit_files(source: str) -> list[Path]:
    """attnkit/__init__.py and every attnkit module `source` reaches through imports (and, where one is
    `attnkit.corpora`, the corpora's manifest, so that new data re-runs what reads it)."""
    init = ATTNKIT / "__init__.py"
    todo = _modules(source) | (_modules(init.read_text()) if re.search(r"\battnkit\b", source) else set())
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo |= _modules((ATTNKIT / f"{name}.py").read_text()) - seen
    files = [init] + [ATTNKIT / f"{n}.py" for n in sorted(seen)]
    if "corpora" in seen:  # the data it reads: its manifest holds each corpus file's SHA-256
        files.append(ATTNKIT / "corpora_data" / "manifest.json")
    return files


def digest(paths: list[Path], source: str | None = None) -> str:
    """A short hash of `paths` (names and contents) and the attnkit modules the first one imports."""
    text = source if source is not None else paths[0].read_text()
    h = hashlib.sha256()
    for p in [*paths, *attnkit_files(text)]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]
