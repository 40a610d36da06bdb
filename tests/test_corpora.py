"""attnkit.corpora: the committed corpora match their manifest and re-extract byte for byte, splits hold no
test sentence (nor a near-duplicate) in train, the cleaning does what it says, and the data ships."""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata as md
import json
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attnkit import corpora
from attnkit.corpora import Document, Pair, fold, leaks, split_of
from course import corpora as extraction

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- versioned data
def test_committed_files_match_the_manifest():
    """Is every corpus file present, with the SHA-256 the manifest records, and nothing unlisted?"""
    assert corpora.verify() == []
    listed = set(corpora.manifest()["files"])
    assert listed == {p.name for p in corpora.DATA.iterdir() if p.is_file()} - {"manifest.json"}
    assert {"parallel.en-ru.jsonl.gz", "parallel.en-fr.jsonl.gz", "parallel.en-de.jsonl.gz", "prose.en.jsonl.gz",
            "long.en.jsonl.gz", "NOTICE.txt"} <= listed


def test_verify_reports_a_changed_or_missing_file(tmp_path, monkeypatch):
    """Does verify() name a corpus whose bytes changed, and one that is missing?"""
    copy = tmp_path / "corpora_data"
    shutil.copytree(corpora.DATA, copy)
    monkeypatch.setattr(corpora, "DATA", copy)
    monkeypatch.setattr(corpora, "MANIFEST", copy / "manifest.json")
    assert corpora.verify() == []
    data = bytearray((copy / "prose.en.jsonl.gz").read_bytes())
    data[100] ^= 1
    (copy / "prose.en.jsonl.gz").write_bytes(bytes(data))
    (copy / "long.en.jsonl.gz").unlink()
    problems = corpora.verify()
    assert any(p.startswith("prose.en.jsonl.gz: SHA-256 differs") for p in problems)
    assert "long.en.jsonl.gz: missing" in problems


def test_manifest_names_every_source_with_version_and_licence():
    """Does the manifest give each source's package, version, files and licence?"""
    files = corpora.manifest()["files"]
    notice = (corpora.DATA / "NOTICE.txt").read_text()
    for name, entry in files.items():
        if name == "NOTICE.txt":
            continue
        sources = [s for s in entry["sources"] if "package" in s]
        assert sources, name
        for s in sources:
            assert s["version"] and s["licence"] in {"BSD-2-Clause", "BSD-3-Clause", "MIT", "PSF-2.0"}, s
            assert f"{s['package']} {s['version']} ({s['licence']})" in notice  # its licence, in full
        assert sum(len(s["files"]) for s in sources) > 0


def installed_as_in_manifest() -> str | None:
    """Why a re-extraction cannot reproduce the committed files here, or None."""
    manifest = corpora.manifest()
    if platform.python_version() != manifest["python"]:
        return f"Python {platform.python_version()}, the corpora were extracted with {manifest['python']}"
    for entry in manifest["files"].values():
        for s in entry.get("sources", []):
            if "package" in s and s["package"] != "CPython standard library":
                try:
                    version = md.version(s["package"])
                except md.PackageNotFoundError:
                    return f"{s['package']} is not installed"
                if version != s["version"]:
                    return f"{s['package']} {version} is installed, the corpora come from {s['version']}"
    return None


def test_reextraction_reproduces_the_committed_files(tmp_path):
    """Does `python -m course corpora` rebuild every committed file byte for byte from the pinned packages?"""
    reason = installed_as_in_manifest()
    if reason:
        pytest.skip(f"cannot reproduce here: {reason}")
    manifest = extraction.extract(tmp_path, log=lambda *a: None)
    assert manifest == corpora.manifest()
    assert extraction.differences(tmp_path, corpora.DATA) == []


def test_a_missing_package_is_named(monkeypatch, capsys):
    """Does `python -m course corpora` say which package is missing, and how to install it?"""
    monkeypatch.setitem(extraction.CATALOGUES, "ru", [("jupyterlab-language-pack-xx-XX", "BSD-3-Clause")])
    assert extraction.main([]) == 1
    err = capsys.readouterr().err
    assert "jupyterlab-language-pack-xx-XX is not installed" in err and "pip install" in err


# ---------------------------------------------------------------- splits
def all_splits(name: str) -> dict[str, list]:
    load = {"parallel-ru": lambda s: corpora.parallel("ru", s), "parallel-fr": lambda s: corpora.parallel("fr", s),
            "parallel-de": lambda s: corpora.parallel("de", s), "prose": corpora.prose,
            "long": corpora.long_documents}[name]
    return {s: load(s) for s in corpora.SPLITS}


@pytest.mark.parametrize("name", ["parallel-ru", "parallel-fr", "parallel-de", "prose", "long"])
def test_no_held_out_text_or_near_duplicate_is_in_train(name):
    """Is every valid and test record free of a near-duplicate in train (and test of one in valid)?"""
    splits = all_splits(name)
    assert all(splits.values())
    assert leaks(splits["train"], splits["test"]) == []
    assert leaks(splits["train"], splits["valid"]) == []
    assert leaks(splits["valid"], splits["test"]) == []


def test_the_leak_check_finds_planted_leaks():
    """Does the leak check fail on a split with a test sentence, a near-duplicate of one, or its translation
    in train?"""
    train, test = corpora.parallel("ru", "train"), corpora.parallel("ru", "test")
    victim = next(p for p in test if re.search(r"[a-z]{3}", p.src))
    assert leaks(train + [victim], test) == [(victim, victim)]
    near = Pair("  " + victim.src.upper() + "!", "совсем другой перевод", "planted")  # case, spaces, punctuation
    assert leaks(train + [near], test) == [(victim, near)]
    same_target = Pair("an unrelated source", victim.tgt, "planted")
    assert leaks(train + [same_target], test) == [(victim, same_target)]
    doc = corpora.prose("test")[0]
    assert leaks(corpora.prose("train") + [Document("copy", doc.text.replace(" ", "  ") + ".")],
                 [doc]) != []
    assert leaks(["Open the file %s"], ["open THE file {0}."]) != []  # placeholders
    assert leaks(["Change to Heading 1"], ["change to heading 6"]) != []  # digits
    assert leaks(["Change to Heading 1"], ["Change to Header 1"]) == []  # a different word is no duplicate


def test_splits_are_made_by_content():
    """Do the split sizes come out near 80/10/10, is each near-duplicate group in one split, and does the split
    of a group depend only on its key?"""
    records = [p._asdict() for s in corpora.SPLITS for p in corpora.parallel("ru", s)]
    committed = {(r["src"], r["tgt"]): s for s in corpora.SPLITS for r in
                 [p._asdict() for p in corpora.parallel("ru", s)]}
    shuffled = records[::-1]
    extraction.assign_splits(shuffled)
    assert {(r["src"], r["tgt"]): r["split"] for r in shuffled} == committed  # order does not matter
    by_key: dict[str, set] = {}
    for r in shuffled:
        by_key.setdefault(fold(r["src"]), set()).add(r["split"])
    assert all(len(s) == 1 for s in by_key.values())
    n = len(records)
    sizes = {s: sum(v == s for v in committed.values()) / n for s in corpora.SPLITS}
    assert 0.75 < sizes["train"] < 0.85 and 0.05 < sizes["test"] < 0.15, sizes
    assert split_of("a key") == split_of("a key") and {split_of(str(i)) for i in range(100)} == set(corpora.SPLITS)


def test_prose_and_long_documents_share_a_files_split():
    """Are a long document's docstrings, where prose holds them, in the long document's split?"""
    prose = {d.text: (d.name, s) for s in corpora.SPLITS for d in corpora.prose(s)}
    checked = 0
    for split in corpora.SPLITS:
        for doc in corpora.long_documents(split):
            module = extraction.module_name(doc.name)
            for node in ast.walk(ast.parse(doc.text)):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    text = ast.get_docstring(node, clean=True)
                    name, prose_split = prose.get(text, ("", None))
                    if name.startswith(module + ".") or name == module:  # (a repeat is kept where first seen)
                        assert prose_split == split, (name, doc.name)
                        checked += 1
    assert checked > 1000


# ---------------------------------------------------------------- contents and cleaning
def test_sizes():
    """Are there a few thousand pairs, a test set of a few hundred, over 1 MB of prose, and long documents?"""
    for lang, least in (("ru", 2400), ("fr", 3500), ("de", 1000)):
        pairs = {s: corpora.parallel(lang, s) for s in corpora.SPLITS}
        assert sum(map(len, pairs.values())) > least and 100 <= len(pairs["test"]) <= 450, lang
    with pytest.raises(ValueError, match="lang must be one of"):
        corpora.parallel("xx")
    assert sum(len(corpora.prose_text(s)) for s in corpora.SPLITS) > 1_000_000
    long = [d for s in corpora.SPLITS for d in corpora.long_documents(s)]
    assert len(long) > 100 and all(len(d.text) >= 20_000 for d in long)
    assert not any(re.search(r"(^|/)(tests?|idle_test)/|(^|/)test_", d.name) for d in long)


@pytest.mark.parametrize("lang", corpora.LANGUAGES)
def test_pairs_are_clean(lang):
    """Are pairs free of raw placeholders, HTML tags, untranslated or duplicate entries?"""
    pairs = [p for s in corpora.SPLITS for p in corpora.parallel(lang, s)]
    raw = re.compile(r"%\(\w+\)[sd]|%[sd]\b|%\d|\{[a-zA-Z_]\w*\}|<(a|b|code|br|h1)[ >]|&\w+;|\s{2}")
    assert [p for p in pairs if raw.search(p.src) or raw.search(p.tgt)] == []
    assert all(p.src.casefold() != p.tgt.casefold() for p in pairs)
    assert lang != "ru" or all(re.search("[а-яА-Я]", p.tgt) for p in pairs)
    assert len({p.src for p in pairs}) == len(pairs)
    assert all(set(re.findall(r"\{\d+\}", p.src)) == set(re.findall(r"\{\d+\}", p.tgt)) for p in pairs)


@pytest.mark.parametrize("src, tgt, expected", [
    ("Delete %(name)s from %s", "Удалить %(name)s из %s", ("Delete {0} from {1}", "Удалить {0} из {1}")),
    ("Move %1 to %2", "%2: переместить %1", ("Move {0} to {1}", "{1}: переместить {0}")),
    ("{name} in {0}", "{0}: {name}", ("{0} in {1}", "{1}: {0}")),
    ("%d%% done", "%d%% готово", ("{0}% done", "{0}% готово")),
    ("100% complete", "100 % terminé", ("100% complete", "100 % terminé")),  # "% c" is no placeholder
    ("Open %s", "Открыть", None),
    ("Copy %(a)s", "Копировать %(b)s", None),
])
def test_placeholders_are_normalised(src, tgt, expected):
    """Are %s, %(name)s, %1, {0} and {name} numbered by their order in the source, and mismatches dropped?"""
    assert extraction.normalise_placeholders(src, tgt) == expected


def test_markup_is_cleaned():
    """Are HTML tags removed (their text kept), entities unescaped and white space squeezed, but not <<quotes>>?"""
    assert extraction.clean('Read <a href="%1" target="_blank">the  docs</a>&nbsp;now\n') == "Read the docs now"
    assert extraction.clean("<<original entry>> at <https://x.org/>") == "<<original entry>> at <https://x.org/>"


# ---------------------------------------------------------------- the data ships
def test_a_wheel_of_attnkit_carries_the_data(tmp_path):
    """Does a wheel built from pyproject.toml (what pip installs) hold every corpus file, intact?"""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "attnkit", src / "attnkit", ignore=shutil.ignore_patterns("__pycache__", "checks"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "wheel"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        for name, entry in corpora.manifest()["files"].items():
            data = z.read(f"attnkit/corpora_data/{name}")
            assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert "attnkit/corpora_data/manifest.json" in z.namelist()


def test_the_release_carries_the_data_and_its_dependencies(tmp_path):
    """Does the student release copy the corpora (intact), declare them as package data, and pin what
    attnkit.metrics and attnkit.subwords import?"""
    from course import release
    release.copy_package(ROOT / "attnkit", tmp_path / "attnkit")
    copied = tmp_path / "attnkit" / "corpora_data"
    for name, entry in corpora.manifest()["files"].items():
        assert hashlib.sha256((copied / name).read_bytes()).hexdigest() == entry["sha256"]
    assert (copied / "manifest.json").exists() and (tmp_path / "attnkit" / "subwords.py").exists()
    assert '"attnkit" = ["corpora_data/*", "checkpoints_data/*/*", "sweeps_data/*/*"]' in release.PYPROJECT
    pins = release.requirements()
    assert re.search(r"^sacrebleu==", pins, re.M) and re.search(r"^tokenizers==", pins, re.M)
    assert json.loads((copied / "manifest.json").read_text()) == corpora.manifest()
