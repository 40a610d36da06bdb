"""The similarity report (`python -m autograder similarity`) on a class of chapter 02 with planted copies:
a verbatim copy, a copy renamed and reformatted, an independent correct solution (the chapter's
alternative, tests/alternatives/02_attention.py), a notebook left as given and an unreadable file."""
from __future__ import annotations

import ast
import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from autograder import cli
from autograder.batch.io import find_jobs, sha256_of, stamp
from autograder.similarity.compare import boilerplate_of, fingerprint, shares
from autograder.similarity.extract import read_notebook, starter, written
from course.alternatives import alternative_notebook
from course.exercises import exercise_notebook, read_solution, render

CHAPTER = "02_attention"
COPIES = {frozenset(p) for p in (("alice", "bob"), ("alice", "carol"), ("bob", "carol"))}


def solution_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def as_a_student_writes(nb):
    """The solution notebook without nbgrader's solution markers: what a student hands in."""
    for cell in solution_cells(nb):
        cell.source = re.sub(r"\n?\s*### (BEGIN|END) SOLUTION", "", cell.source)
    return nb


def disguise(source: str) -> str:
    """Every argument and local variable renamed, the code reformatted (ast.unparse: comments gone,
    other spacing and quotes), blank lines and a comment added."""
    tree = ast.parse(source)
    local = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in local:
            node.arg = f"my_{node.arg.lower()}_var"
        elif isinstance(node, ast.Name) and node.id in local:
            node.id = f"my_{node.id.lower()}_var"
    return "# my own solution\n\n" + "\n\n\n".join(ast.unparse(n) for n in tree.body)


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    """class/<student>/02_attention.ipynb for alice, bob (alice's file), carol (alice's code disguised,
    one cell's nbgrader metadata lost), dave (independent), erin (nothing written), frank (not a notebook)."""
    root = tmp_path_factory.mktemp("class")
    write = lambda who, text: (root / who).mkdir() or (root / who / f"{CHAPTER}.ipynb").write_text(text)  # noqa: E731
    write("alice", render(as_a_student_writes(read_solution(CHAPTER))))
    (root / "bob").mkdir()
    shutil.copy(root / "alice" / f"{CHAPTER}.ipynb", root / "bob" / f"{CHAPTER}.ipynb")
    carol = as_a_student_writes(read_solution(CHAPTER))
    for cell in solution_cells(carol):
        cell.source = disguise(cell.source)
    solution_cells(carol)[0].metadata.pop("nbgrader")
    write("carol", render(carol))
    write("dave", render(alternative_notebook(CHAPTER)))
    write("erin", render(exercise_notebook(CHAPTER)))
    write("frank", "{not json")
    return root


@pytest.fixture(scope="module")
def report(klass, tmp_path_factory) -> tuple[list[dict], str]:
    out = tmp_path_factory.mktemp("report")
    assert cli.main(["similarity", str(klass), "--out", str(out)]) == 0
    with open(out / "similarity.csv", newline="") as f:
        return list(csv.DictReader(f)), (out / "similarity.html").read_text()


def pair(row: dict) -> frozenset:
    return frozenset((row["student_a"], row["student_b"]))


def test_the_copies_rank_first_and_the_independent_solution_low(report):
    rows, _ = report
    assert {pair(r) for r in rows[:3]} == COPIES
    assert all(float(r["similarity"]) >= 0.9 for r in rows[:3]), rows[:3]
    independent = [r for r in rows if "dave" in pair(r)]
    assert len(independent) == 3 and all(float(r["similarity"]) < 0.25 for r in independent), independent
    assert [r["rank"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]


def test_identical_files_are_flagged_and_what_was_not_compared_is_said(report):
    rows, page = report
    assert [pair(r) for r in rows if r["identical_file"] == "yes"] == [frozenset(("alice", "bob"))]
    assert not any({"erin", "frank"} & pair(r) for r in rows), "nothing written or unreadable: no pair"
    assert "Identical files" in page and re.search(r"Nothing written.*erin", page)
    assert re.search(r"Not compared.*frank", page, re.S)


def test_the_page_shows_matches_side_by_side_and_needs_no_network(report):
    _, page = report
    first = page.split('id="pair-1"', 1)[1].split("</details>", 1)[0]
    assert first.count("<pre>") == 2 and "<mark>" in first and "identical file" in first
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the report must open offline"


def test_only_the_graded_cells_count_and_a_cell_without_metadata_is_found_by_its_name(klass):
    start = starter(CHAPTER)
    carol = written(read_notebook(klass / "carol" / f"{CHAPTER}.ipynb"), start)
    assert list(carol.cells) == list(start.cells), "every graded cell, the one without metadata included"
    assert "my_" in carol.cells["additive_score"]
    assert not written(read_notebook(klass / "erin" / f"{CHAPTER}.ipynb"), start).cells, "stubs are not work"
    alice = written(read_notebook(klass / "alice" / f"{CHAPTER}.ipynb"), start).text()
    assert "import attnkit" not in alice and "def additive_score" in alice  # the given code is left out


def test_a_results_folder_is_read_through_the_files_and_hashes_it_records(klass, tmp_path):
    out = tmp_path / "out"
    for job in find_jobs([str(klass)]):
        result = stamp({"score": 0, "extra_data": {"chapter": CHAPTER, "status": "graded"}}, job, sha256_of(job.path))
        (out / job.name).mkdir(parents=True)
        (out / job.name / "results.json").write_text(json.dumps(result))
    assert json.loads((out / "alice__02_attention" / "results.json").read_text())["extra_data"]["path"] == str(
        (klass / "alice" / f"{CHAPTER}.ipynb").resolve())
    assert cli.main(["similarity", str(out)]) == 0  # writes into the results folder itself
    with open(out / "similarity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {pair(r) for r in rows[:3]} == COPIES and rows[0]["identical_file"] == "yes"


def test_the_fast_overlap_equals_copydetects_own_comparison(klass):
    from copydetect import compare_files
    start = starter(CHAPTER)
    boilerplate = boilerplate_of(start.text())
    prints = {who: fingerprint(who, written(read_notebook(klass / who / f"{CHAPTER}.ipynb"), start).text(), boilerplate)
              for who in ("alice", "carol", "dave")}
    for a, b in (("alice", "carol"), ("alice", "dave"), ("carol", "dave")):
        want, got = compare_files(prints[a], prints[b]), shares(prints[a], prints[b])
        assert want[0] == got[0] and np.allclose(want[1], got[1])
        assert all(np.array_equal(w, g) for w, g in zip(want[2], got[2]))


def test_a_wrong_chapter_notebook_in_a_class_is_named_not_compared_and_not_in_the_title(klass, tmp_path):
    """A chapter-03 notebook handed in (and graded) as chapter 02: the report is the class's, 02's."""
    other = tmp_path / "xavier"
    other.mkdir()
    (other / "03_transformer.ipynb").write_text(render(read_solution("03_transformer")))
    out = tmp_path / "out"
    for job in find_jobs([str(klass / "alice"), str(klass / "bob"), str(other)]):
        result = stamp({"score": 0, "extra_data": {"chapter": CHAPTER, "status": "graded"}}, job, sha256_of(job.path))
        (out / job.name).mkdir(parents=True)
        (out / job.name / "results.json").write_text(json.dumps(result))
    assert cli.main(["similarity", str(out)]) == 0
    page = (out / "similarity.html").read_text()
    assert f"<title>Similarity report: {CHAPTER}</title>" in page and "03_transformer</h1>" not in page
    assert re.search(r"Not compared.*the notebook of chapter 03_transformer, not of 02_attention", page, re.S)
    assert cli.main(["similarity", str(klass / "alice"), str(other), "--chapter", CHAPTER, "--out",
                     str(tmp_path / "nb")]) == 0  # notebooks given with --chapter: the same
    assert f"<title>Similarity report: {CHAPTER}</title>" in (tmp_path / "nb" / "similarity.html").read_text()
