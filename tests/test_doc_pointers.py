"""Does every pointer to the documentation in the code's messages, help texts and docstrings name a page,
and a section, that exist? Sections moved from the README to the book once, and the pointers stayed."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autograder", "course", "attnkit")
PAGE = r"((?:[\w.-]+/)*[\w.-]+\.md|the README)"  # "the README": README.md
QUOTED = r"""(?:"([^"]+)"|'([^']+)')"""
# see "Section" in PAGE; see PAGE, "Section"; a page named alone: PAGE
SECTION_IN_PAGE = re.compile(rf"{QUOTED} in {PAGE}")
PAGE_THEN_SECTION = re.compile(rf"{PAGE}, {QUOTED}")
PATH = re.compile(r"\b((?:[\w.-]+/)+[\w.-]+\.md)\b")


def strings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal (f-strings' literal parts, docstrings) in the packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append((path.relative_to(ROOT).as_posix(), node.lineno, " ".join(node.value.split())))
    return found


def headings(page: str) -> set[str]:
    path = ROOT / ("README.md" if page == "the README" else page)
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", path.read_text(), re.M)}


def problems(text: str) -> list[str]:
    """What is wrong with the pointers in `text`: a page that does not exist, a section it lacks, or the
    README named without a section."""
    found = []
    for m in PATH.finditer(text):
        if not (ROOT / m.group(1)).exists():
            found.append(f"no page {m.group(1)}")
    pointed = []
    for m in SECTION_IN_PAGE.finditer(text):
        pointed.append((m.group(3), m.group(1) or m.group(2), m.span()))
    for m in PAGE_THEN_SECTION.finditer(text):
        pointed.append((m.group(1), m.group(2) or m.group(3), m.span()))
    for page, section, _ in pointed:
        if (page == "the README" or (ROOT / page).exists()) and section not in headings(page):
            found.append(f"{page} has no section {section!r}")
    for m in re.finditer(r"the README", text, re.I):
        if not any(start <= m.start() < end for _, _, (start, end) in pointed):
            found.append("the README named without a section")
    return found


def test_the_checker_finds_stale_pointers():
    assert problems("see 'On a Dask cluster' in the README") == ["the README has no section 'On a Dask cluster'"]
    assert problems('(see the README, "nbgrader")') == ["the README has no section 'nbgrader'"]
    assert problems("configuration; see the README.") == ["the README named without a section"]
    assert problems("The README has a worked Slurm file.") == ["the README named without a section"]
    assert problems("see docs/notes/nothing.md") == ["no page docs/notes/nothing.md"]
    assert problems('see book/instructors/cluster.md, "Elsewhere"') == [
        "book/instructors/cluster.md has no section 'Elsewhere'"]
    assert problems('see "TLS (hosts on a shared network)" in book/instructors/cluster.md') == []
    assert problems('see the README, "Dependencies"') == []


@pytest.mark.parametrize("where, text", [pytest.param(f"{f}:{n}", t, id=f"{f}:{n}") for f, n, t in strings()
                                         if "README" in t or PATH.search(t)])
def test_every_pointer_names_a_page_and_section_that_exist(where, text):
    assert not problems(text), f"{where}: {problems(text)} in {text[:300]!r}"
