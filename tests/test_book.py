"""Does a book page show the exercise's code with the solution's outputs, and no solution code?"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import course.book as book
import course.exercises as exercises
from course.leaks import find_leaks

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def toy_course(tmp_path, monkeypatch):
    sol = tmp_path / "solutions"
    sol.mkdir()
    shutil.copy(DATA / "99_toy.py", sol / "99_toy.py")
    monkeypatch.setattr(exercises, "SOLUTIONS", sol)
    monkeypatch.setattr(book, "SOLUTIONS", sol)
    monkeypatch.setattr(book, "PAGES", tmp_path / "pages")
    return tmp_path


def test_page_keeps_outputs_but_not_solution_code(toy_course):
    page = book.build_page("99_toy")
    text = page.read_text()
    assert "tensor([2., 4.])" in text, "the solution's output should be shown"
    assert "raise NotImplementedError()" in text
    assert "return x * 2" not in text
    assert "colab.research.google.com" in text and "exercises/99_toy.ipynb" in text
    assert not find_leaks([page])


def test_page_is_cached_until_its_source_changes(toy_course, capsys):
    book.build_page("99_toy")
    book.build_page("99_toy")
    assert "up to date" in capsys.readouterr().out
    src = toy_course / "solutions" / "99_toy.py"
    src.write_text(src.read_text() + "\n# %%\nprint('changed')\n")
    book.build_page("99_toy")
    assert "executed" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted((book.PAGES).glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_page_shows_no_stderr(path):
    """Does a committed page show no stderr stream and no error (the browser test rejects both)?"""
    import nbformat
    assert book.stderr_outputs(nbformat.read(path, as_version=4)) == []


def test_page_with_stderr_is_refused(toy_course):
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr", text="USDT: noise")]
    assert book.stderr_outputs(nb) == ["cell 0: USDT: noise"]


@pytest.mark.parametrize("path", sorted((book.PAGES).glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_page_shows_its_figures(path):
    """Does every cell of a committed page that calls plt.show() show an image?"""
    import nbformat
    assert book.missing_figures(nbformat.read(path, as_version=4)) == []


def test_page_figures_survive_an_agg_backend(toy_course, monkeypatch):
    """Does a page built with MPLBACKEND=Agg in the environment still show its figure?"""
    import nbformat
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    assert book.missing_figures(book.execute(nb, timeout=120)) == []
    assert os.environ["MPLBACKEND"] == "Agg"          # the caller's environment is left alone


def test_page_without_its_figure_is_refused():
    import nbformat
    cell = nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.show()")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="no image")]
    assert book.missing_figures(nbformat.v4.new_notebook(cells=[cell])) == [0]
