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


def test_rerender_keeps_outputs_and_takes_new_prose(toy_course, capsys):
    """Does a prose change re-render the page without executing it, keeping its outputs?"""
    import nbformat
    page = book.build_page("99_toy")
    nb = nbformat.read(page, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "tensor([2., 4.])" in str(c.get("outputs")))
    nb.cells[at].outputs[0]["text"] = "tensor([2., 4.]) from the recording machine\n"
    page.write_text(exercises.render(nb))
    src = toy_course / "solutions" / "99_toy.py"
    src.write_text(src.read_text().replace("gives a standard deviation", "gives a spread"))
    book.rerender_page("99_toy")
    text = page.read_text()
    assert "gives a spread" in text and "from the recording machine" in text
    assert nbformat.read(page, as_version=4).metadata["course"]["source_hash"] == book.source_hash("99_toy")
    book.build_page("99_toy")
    assert "up to date" in capsys.readouterr().out


def test_rerender_drops_a_silenced_value_and_refuses_new_code(toy_course):
    page = book.build_page("99_toy")
    src = toy_course / "solutions" / "99_toy.py"
    src.write_text(src.read_text().replace("print(double(", "_ = print(double("))
    book.rerender_page("99_toy")                     # the same computation: accepted
    src.write_text(src.read_text().replace("[1.0, 2.0]", "[1.0, 3.0]"))
    with pytest.raises(RuntimeError, match="computes something else"):
        book.rerender_page("99_toy")
    src.write_text(src.read_text() + "\n# %%\nprint('new cell')\n")
    with pytest.raises(RuntimeError, match="added, removed"):
        book.rerender_page("99_toy")
    assert "[1.0, 3.0]" not in page.read_text()     # a refused page is left as it was


def test_rerender_changes_a_printed_label_only_where_named(toy_course):
    page = book.build_page("99_toy")
    src = toy_course / "solutions" / "99_toy.py"
    src.write_text(src.read_text().replace("print(double(torch.tensor([1.0, 2.0])))",
                                           "print('doubled:', double(torch.tensor([1.0, 2.0])))"))
    with pytest.raises(RuntimeError, match="computes something else"):   # OLD not in its output
        book.rerender_page("99_toy", [("no such text", "x")])
    book.rerender_page("99_toy", [("tensor([2., 4.])", "doubled: tensor([2., 4.])")])
    assert "doubled: tensor([2., 4.])" in page.read_text()


@pytest.mark.parametrize("path", sorted((book.PAGES).glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_page_shows_its_figures(path):
    """Does every cell of a committed page that calls plt.show() show an image?"""
    import nbformat
    assert book.missing_figures(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", sorted((book.PAGES).glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_page_shows_no_stray_value(path):
    """Does no cell of a committed page show a bare value (such as the return of a glue call)?"""
    import nbformat
    assert book.stray_values(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", sorted((book.PAGES).glob("*.ipynb")), ids=lambda p: p.stem)
def test_committed_page_glues_no_nan(path):
    """Did every check of a committed page run (no value glued as nan, as a missing package gives)?"""
    import nbformat
    assert book.nan_glues(nbformat.read(path, as_version=4)) == []


def test_nan_glue_is_found():
    import nbformat
    cell = nbformat.v4.new_code_cell("glue('d', float('nan'))")
    meta = {"scrapbook": {"name": "d", "mime_prefix": "application/papermill.record/"}}
    cell.outputs = [nbformat.v4.new_output("display_data", metadata=meta,
                                           data={"application/papermill.record/text/plain": "nan"})]
    assert book.nan_glues(nbformat.v4.new_notebook(cells=[cell])) == ["d"]


def test_stray_value_is_found_and_rich_output_is_not():
    import nbformat
    bare, rich = nbformat.v4.new_code_cell("glue('x', 3)"), nbformat.v4.new_code_cell("view")
    bare.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "3"}, execution_count=1)]
    rich.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "V", "text/html": "<b>V</b>"},
                                           execution_count=2)]
    assert book.stray_values(nbformat.v4.new_notebook(cells=[bare, rich])) == [0]


def test_page_figures_survive_an_agg_backend(toy_course, monkeypatch):
    """Does a page built with MPLBACKEND=Agg in the environment still show its figure, and do its
    OpenMP threads wait passively?"""
    import nbformat
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()")])
    nb.cells.append(nbformat.v4.new_code_cell("import os\nprint(os.environ.get('OMP_WAIT_POLICY'))"))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = book.execute(nb, timeout=120)
    assert book.missing_figures(nb) == []
    assert nb.cells[1].outputs[0]["text"].strip() == "PASSIVE"   # no stalled 2-thread training
    assert os.environ["MPLBACKEND"] == "Agg"          # the caller's environment is left alone


def test_page_without_its_figure_is_refused():
    import nbformat
    cell = nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.show()")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="no image")]
    assert book.missing_figures(nbformat.v4.new_notebook(cells=[cell])) == [0]
