"""Do the execution caches (book pages, alternative runs) depend on exactly the attnkit modules a chapter reaches?"""
from __future__ import annotations

import course.deps as deps


def test_hash_follows_imported_modules_only(tmp_path, monkeypatch):
    kit = tmp_path / "attnkit"
    kit.mkdir()
    (kit / "__init__.py").write_text("from attnkit.device import pick_device\n")
    (kit / "device.py").write_text("x = 1\n")
    (kit / "data.py").write_text("from attnkit.plot import heat\n")
    (kit / "plot.py").write_text("y = 2\n")
    (kit / "other.py").write_text("z = 3\n")
    monkeypatch.setattr(deps, "ATTNKIT", kit)
    chapter = tmp_path / "01_x.py"
    chapter.write_text("import attnkit\nfrom attnkit.data import Vocab\n")
    names = [p.name for p in deps.attnkit_files(chapter.read_text())]
    assert names == ["__init__.py", "data.py", "device.py", "plot.py"]
    before = deps.digest([chapter])
    (kit / "other.py").write_text("z = 4\n")
    assert deps.digest([chapter]) == before, "a module the chapter never imports changed its hash"
    (kit / "plot.py").write_text("y = 3\n")
    assert deps.digest([chapter]) != before, "a module reached through attnkit.data did not count"


def test_hash_follows_the_corpora_a_chapter_reads(tmp_path, monkeypatch):
    kit = tmp_path / "attnkit"
    (kit / "corpora_data").mkdir(parents=True)
    (kit / "__init__.py").write_text("")
    (kit / "subwords.py").write_text("def bpe():\n    from attnkit.corpora import parallel\n")
    (kit / "corpora.py").write_text("x = 1\n")
    (kit / "corpora_data" / "manifest.json").write_text('{"files": {"a.jsonl.gz": {"sha256": "00"}}}')
    monkeypatch.setattr(deps, "ATTNKIT", kit)
    chapter = tmp_path / "05_x.py"
    chapter.write_text("from attnkit.subwords import bpe\n")
    assert [p.name for p in deps.attnkit_files(chapter.read_text())] == \
        ["__init__.py", "corpora.py", "subwords.py", "manifest.json"]
    before = deps.digest([chapter])
    (kit / "corpora_data" / "manifest.json").write_text('{"files": {"a.jsonl.gz": {"sha256": "01"}}}')
    assert deps.digest([chapter]) != before, "new data did not change the hash of a chapter that reads it"
    other = tmp_path / "02_y.py"
    other.write_text("import attnkit\n")
    assert "manifest.json" not in [p.name for p in deps.attnkit_files(other.read_text())]
