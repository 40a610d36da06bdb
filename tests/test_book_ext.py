"""The intro's table of chapters comes from _toc.yml (book/_ext/book_chapters.py): every chapter of the
toc has a row linked to its page, and a chapter missing from the table, or a row for a chapter that
is not in the toc, is a build warning."""
from __future__ import annotations

import importlib.util
import io
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXT = ROOT / "book" / "_ext"
sys.path.insert(0, str(EXT))
import book_chapters  # noqa: E402


def intro_lines() -> list[str]:
    text = (ROOT / "book" / "intro.md").read_text()
    return text.split("```{course-chapters}\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_intro_describes_every_chapter_of_the_toc_and_no_other():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    rows, problems = book_chapters.chapter_rows(toc, intro_lines())
    assert problems == []
    assert [doc for doc, _, _ in rows] == [f for f in book_chapters.toc_files(toc) if f.startswith("book/chapters/")]
    assert len(rows) == len(list((ROOT / "book" / "chapters").glob("*.ipynb")))
    assert all(what for _, what, _ in rows)


def test_read_first_agrees_with_the_course_map():
    spec = importlib.util.spec_from_file_location("course_map", ROOT / "book" / "course_map.py")
    course_map = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course_map)
    needs = {b: sorted(a for a, b2 in course_map.PREREQUISITES if b2 == b) for _, b in course_map.PREREQUISITES}
    for name, (_, first) in book_chapters.parse_lines(intro_lines()).items():
        listed = sorted(x.strip() for x in first.split(",") if re.fullmatch(r"\d\d", x.strip()))
        assert listed == needs.get(name[:2], []), f"{name}: read first {first!r}, the course map says {needs.get(name[:2])}"


def test_missing_and_stray_chapters_are_named():
    toc = {"root": "book/intro", "parts": [{"caption": "Chapters", "chapters": [
        {"file": "book/chapters/01_a"}, {"file": "book/chapters/02_b.ipynb"}]},
        {"caption": "Other", "chapters": [{"file": "book/using"}]}]}
    rows, problems = book_chapters.chapter_rows(toc, ["01_a: one | -", "", "09_z: gone | 01"])
    assert rows == [("book/chapters/01_a", "one", "-"), ("book/chapters/02_b", "", "")]
    assert problems == ["chapter 02_b is in _toc.yml but has no line in course-chapters",
                        "course-chapters describes 09_z, which is not a chapter of _toc.yml"]


def test_a_sphinx_build_links_each_chapter_under_its_title_and_warns(tmp_path):
    from sphinx.application import Sphinx
    src = tmp_path / "src"
    (src / "book" / "chapters").mkdir(parents=True)
    (src / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(EXT)!r})\n"
                                 "extensions = ['myst_parser', 'book_chapters']\n")
    (src / "_toc.yml").write_text("format: jb-book\nroot: index\nparts:\n  - caption: Chapters\n    chapters:\n"
                                  "      - file: book/chapters/01_alpha\n      - file: book/chapters/02_beta\n")
    (src / "book" / "chapters" / "01_alpha.md").write_text("# 1. Alpha attention\n\nText.\n")
    (src / "book" / "chapters" / "02_beta.md").write_text("# 2. Beta\n\nText.\n")
    (src / "index.md").write_text("# Intro\n\n```{course-chapters}\n01_alpha: masks | PyTorch\n"
                                  "07_gone: old | 01\n```\n\n```{toctree}\nbook/chapters/01_alpha\n"
                                  "book/chapters/02_beta\n```\n")
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
                 status=io.StringIO(), warning=warnings, freshenv=True)
    app.build()
    html = (tmp_path / "html" / "index.html").read_text()
    table = html.split('class="course-chapters', 1)[1].split("</table>", 1)[0]
    links = re.findall(r'<a class="reference internal" href="([^"]+)">.*?<span class="doc">([^<]+)</span>', table,
                       re.S)
    assert links == [("book/chapters/01_alpha.html", "1. Alpha attention"), ("book/chapters/02_beta.html", "2. Beta")]
    assert "masks" in table and "PyTorch" in table and "old" not in table
    log = warnings.getvalue()
    assert "chapter 02_beta is in _toc.yml but has no line in course-chapters" in log
    assert "course-chapters describes 07_gone, which is not a chapter of _toc.yml" in log
