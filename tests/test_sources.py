"""Do the book's sources read well and link right: short code lines, known citations, one address?"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.py"))
PAGES_MD = sorted((ROOT / "book").glob("*.md"))
MAX_LINE = 100
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]*)`")
BIB_KEY = re.compile(r"^\s*@\w+\s*\{\s*([^,\s]+)\s*,", re.M)
INSTALL = re.compile(r'repo = "([^"]+)"\s*# _config.yml: repository.url')


def code_lines(path: Path):
    """(line number, text) of every line inside a code cell of a jupytext percent file."""
    in_code = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("# %%"):
            in_code = "[markdown]" not in line and "[md]" not in line
            continue
        if in_code:
            yield n, line


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_code_lines_fit_the_page(path):
    long = [f"{path.name}:{n}: {len(line)} characters" for n, line in code_lines(path)
            if len(line) > MAX_LINE]
    assert not long, f"code lines over {MAX_LINE} characters overflow their box on the page:\n" + \
        "\n".join(long)


def bib_keys() -> set[str]:
    return set(BIB_KEY.findall((ROOT / "references.bib").read_text()))


def test_bibliography_has_no_duplicate_keys():
    keys = BIB_KEY.findall((ROOT / "references.bib").read_text())
    assert len(keys) == len(set(keys)), sorted({k for k in keys if keys.count(k) > 1})


def test_every_work_has_its_own_citation_label_across_the_book(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from book_labels import book_labels
    labels = book_labels(ROOT / "references.bib")
    assert set(labels) == bib_keys()
    assert len(set(labels.values())) == len(labels)
    assert labels["lewis2020bart"] != labels["liu2020understanding"]  # both were "LLG+20"
    twins = tmp_path / "twins.bib"  # two works whose plain alpha labels collide get a and b
    twins.write_text("@article{x1, author={Ann Smith}, title={A}, year={2020}, journal={J}}\n"
                     "@article{x2, author={Al Smith}, title={B}, year={2020}, journal={J}}\n")
    assert book_labels(twins) == {"x1": "Smi20a", "x2": "Smi20b"}


@pytest.mark.parametrize("path", SOLUTIONS + PAGES_MD, ids=lambda p: p.name)
def test_every_citation_is_in_references_bib(path):
    known = bib_keys()
    cited = {k.strip() for group in CITE.findall(path.read_text()) for k in group.split(",")}
    unknown = sorted(k for k in cited if k and k not in known)
    assert not unknown, f"{path.name} cites keys missing from references.bib: {unknown}"


def test_unknown_citation_is_caught():
    assert CITE.findall("see {cite:t}`a, b` and {cite}`c`") == ["a, b", "c"]


def test_repository_url_is_a_github_address():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository_url())


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_colab_setup_cell_installs_from_the_configured_repository(path):
    found = INSTALL.findall(path.read_text())
    assert found, f"{path.name}: no Colab set-up cell (repo = \"...\"  # _config.yml: repository.url)"
    assert set(found) == {repository_url()}, f"{path.name} installs from {found}, _config.yml says " \
        f"{repository_url()}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_the_setup_cell_says_what_a_student_ran_on_their_machine(path):
    # the student release has no Makefile: its README says `pip install -e .`
    from course.release import README
    cell = "# Setup:" + path.read_text().split("# Setup:", 1)[1].split("\nimport ", 1)[0]
    comment = " ".join(re.findall(r"^# (.*)$", cell, re.M))
    assert "`pip install -e .`" in comment and "pip install -e ." in README, comment
    assert "make setup" not in comment or "course's own repository" in comment, comment


def test_badges_use_the_configured_repository():
    from course import book
    assert f"https://github.com/{book.REPO}" == repository_url()
    text = book.BADGES.format(repo=book.REPO, chapter="99_x")
    assert "exercises/99_x.ipynb" in text and "](../_static/" in text
    assert "colab-badge.svg" in text and (ROOT / "book" / "_static" / "colab-badge.svg").exists()


PAGES = sorted((ROOT / "book" / "chapters").glob("*.ipynb"))
OBJECT_REPR = re.compile(r"<[\w.]+(?: object)? at 0x[0-9a-fA-F]+>")


def object_reprs(nb: dict) -> list[str]:
    """Outputs such as `<torch._C.Generator at 0x7f...>`: a cell's last line returned an object."""
    found = []
    for n, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain", "") if "data" in out else ""
            text = "".join(text) if isinstance(text, list) else text
            found += [f"cell {n}: {m}" for m in OBJECT_REPR.findall(text)]
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_pages_show_no_object_addresses(path):
    import json
    found = object_reprs(json.loads(path.read_text()))
    assert not found, f"{path.name} prints object addresses (end the cell with `_ = ...`):\n" + \
        "\n".join(found)


def test_object_address_is_caught():
    nb = {"cells": [{"outputs": [{"data": {"text/plain": "<torch._C.Generator at 0x7f6d003153f0>"}}]},
                    {"outputs": [{"data": {"text/plain": "tensor([1., 2.])"}}]}]}
    assert object_reprs(nb) == ["cell 0: <torch._C.Generator at 0x7f6d003153f0>"]
