"""Malformed submissions get a result, never a crashed batch: score 0, a clear message, and
the chapter's max_score when the chapter is known. Graded against the toy chapter in
tests/hostile/chapter (6 points with its CUDA test)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from autograder.harness import notebook as nbmod
from autograder.grade import grade_submission
from autograder.harness.notebook import read_submission
from autograder.harness.sandbox import Limits, Sandbox

CHAPTER = Path(__file__).resolve().parent / "hostile" / "chapter"
TOY, TOY_POINTS = "99_toy", 6.0  # its CUDA test counts on every machine (simulated CUDA here)


@pytest.fixture(scope="module", autouse=True)
def toy_chapter():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
        mp.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
        yield


@pytest.fixture(scope="module")
def sandbox():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(Limits(call_seconds=5, load_seconds=20)) as box:
            yield box


def code_cell(source) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}


def toy_notebook(**changes) -> dict:
    """The toy solution as an nbformat-4 dict, with top-level keys replaced by `changes`."""
    cells = [code_cell(c["source"]) for c in read_submission(CHAPTER / f"{TOY}.py").cells]
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"chapter": TOY}}, "cells": cells}
    nb.update(changes)
    return nb


def with_outputs(megabytes: float) -> dict:
    nb = toy_notebook()
    text = "x" * 1000 + "\n"
    nb["cells"][-1]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                   "text": [text] * int(megabytes * 1000)}]
    return nb


def dumps(nb: dict) -> bytes:
    return json.dumps(nb).encode()


# name -> (file name, bytes, phrase the message must contain)
MALFORMED = {
    "invalid JSON": ("a.ipynb", dumps(toy_notebook())[:-40], "not valid JSON (line 1"),
    "nbformat 3": ("b.ipynb", dumps(toy_notebook(nbformat=3, nbformat_minor=0)), "nbformat 3"),
    "no code cells": ("c.ipynb", dumps(toy_notebook(cells=[{"cell_type": "markdown", "metadata": {},
                                                            "source": "# only words"}])), "no code cells"),
    "not UTF-8": ("d.ipynb", dumps(toy_notebook()).replace(b"torch", b"t\xff\xferch", 1), "not UTF-8"),
    "source not text": ("e.ipynb", dumps(toy_notebook(cells=[code_cell("x = 1"), code_cell({"oops": 1})])),
                        "cell 2's source is not text"),
    "source list of non-text": ("f.ipynb", dumps(toy_notebook(cells=[code_cell(["x = 1\n", 7])])),
                                "cell 1's source is not text"),
    "another chapter": ("g.ipynb", dumps(toy_notebook(metadata={"course": {"chapter": "03_transformer"}})),
                        "the notebook of chapter 03_transformer, not of 99_toy"),
    "a PDF named .ipynb": ("h.ipynb", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", "a PDF document"),
    "a zip named .ipynb": ("i.ipynb", b"PK\x03\x04\x14\x00\x00\x00", "a zip archive"),
    "JSON that is not a notebook": ("j.ipynb", b'["cells", 1, 2]', "not a Jupyter notebook"),
    "cells not a list": ("k.ipynb", dumps(toy_notebook(cells={"0": "x"})), "not a Jupyter notebook"),
    "empty file": ("l.ipynb", b"", "not valid JSON"),
    "nested too deeply": ("m.ipynb", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "a cell that is not a cell": ("n.ipynb", dumps(toy_notebook(cells=[code_cell("x = 1"), "print(1)"])),
                                  "cell 2 is not a notebook cell"),
    "a Word file": ("report.docx", b"PK\x03\x04\x14\x00\x06\x00", "report.docx is a zip archive, not a notebook"),
    "a text file": ("notes.txt", b"def causal_mask(n): ...", "notes.txt is a .txt file, not a notebook"),
    "percent text with broken tags": ("o.py", b"# %% tags=[oops]\nx = 1\n", "cannot be read"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=str)
def test_malformed_submission_scores_zero_with_a_message(case, tmp_path, sandbox):
    name, data, phrase = MALFORMED[case]
    (path := tmp_path / name).write_bytes(data)
    result = grade_submission(path, sandbox, TOY)
    assert result["score"] == 0 and result["tests"] == []
    assert result["max_score"] == TOY_POINTS
    assert result["extra_data"]["status"] == "error"
    assert result["output"].startswith("This submission could not be graded: ")
    assert phrase in result["output"], result["output"]


def test_huge_outputs_are_refused_with_advice(tmp_path, sandbox, monkeypatch):
    monkeypatch.setattr(nbmod, "MAX_BYTES", 1 << 20)
    (path := tmp_path / "huge.ipynb").write_bytes(dumps(with_outputs(2)))
    result = grade_submission(path, sandbox, TOY)
    assert (result["score"], result["max_score"]) == (0, TOY_POINTS)
    assert "over the 1 MiB limit" in result["output"] and "Clear" in result["output"]


def test_large_outputs_under_the_limit_are_ignored(tmp_path, sandbox):
    (path := tmp_path / "outputs.ipynb").write_bytes(dumps(with_outputs(5)))
    result = grade_submission(path, sandbox, TOY)
    assert (result["score"], result["max_score"]) == (TOY_POINTS, TOY_POINTS), result["output"]


def test_max_score_comes_from_the_file_name_when_no_chapter_is_given(tmp_path, sandbox):
    (path := tmp_path / f"alice_{TOY}.ipynb").write_bytes(b"{not json")
    result = grade_submission(path, sandbox)
    assert (result["score"], result["max_score"]) == (0, TOY_POINTS)
    assert result["extra_data"]["chapter"] == TOY


def test_notebook_of_a_chapter_without_graders_is_named(tmp_path, sandbox):
    (path := tmp_path / "x.ipynb").write_bytes(dumps(toy_notebook(metadata={"course": {"chapter": "42_unknown"}})))
    result = grade_submission(path, sandbox)
    assert result["score"] == 0 and result["max_score"] == 0
    assert "no graders for chapter '42_unknown'" in result["output"]


def test_a_batch_of_malformed_files_still_grades_the_good_one(tmp_path, sandbox):
    """One sandbox grades them in turn, as each worker of `python -m autograder grade` does."""
    folder = tmp_path / "subs"
    folder.mkdir()
    for name, data, _ in MALFORMED.values():
        (folder / name).write_bytes(data)
    (folder / "zz_good.ipynb").write_bytes(dumps(toy_notebook()))
    results = {p.name: grade_submission(p, sandbox, TOY) for p in sorted(folder.iterdir())}
    assert results.pop("zz_good.ipynb")["score"] == TOY_POINTS
    assert len(results) == len(MALFORMED)
    assert all(r["score"] == 0 and r["max_score"] == TOY_POINTS for r in results.values())
    assert all(r["output"].startswith("This submission could not be graded") for r in results.values())
