"""Does the alternative-solution runner splice, grade, run and cache as `make test-notebooks` needs?"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import course.alternatives as alternatives
import course.book as book
import course.exercises as exercises

CHAPTER = Path(__file__).resolve().parent / "hostile" / "chapter"
TOY = "99_toy"
ALT = '''
import torch


def _ones(n):
    return torch.ones((n, n)).bool()


def causal_mask(n):
    return torch.tril(_ones(n))


def scaled_scores(q, k):
    return torch.einsum("bsd,btd->bst", q, k) / q.size(-1) ** 0.5


def noisy_sum(x):
    return torch.randn(()) + x.sum()


HEADLINES = {}
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    sol, alts = tmp_path / "solutions", tmp_path / "alternatives"
    sol.mkdir()
    alts.mkdir()
    shutil.copy(CHAPTER / f"{TOY}.py", sol / f"{TOY}.py")
    (alts / f"{TOY}.py").write_text(ALT)
    for module in (exercises, book, alternatives):
        monkeypatch.setattr(module, "SOLUTIONS", sol)
    monkeypatch.setattr(book, "PAGES", tmp_path / "pages")
    monkeypatch.setattr(alternatives, "ALTERNATIVES", alts)
    monkeypatch.setattr(alternatives, "RUNS", alts / "runs.json")
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(sol))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
    monkeypatch.setattr(alternatives, "run_hash", lambda ch: "fixed")
    return alts


def test_parse_splits_prelude_definitions_and_headlines(toy):
    alt = alternatives.parse(toy / f"{TOY}.py")
    assert set(alt.definitions) == {"causal_mask", "scaled_scores", "noisy_sum"}
    assert "def _ones" in alt.prelude and "import torch" in alt.prelude
    assert alt.headlines == {}


def test_each_stub_is_replaced_and_the_prelude_comes_first(toy):
    nb = alternatives.alternative_notebook(TOY)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    assert not any("NotImplementedError" in s for s in sources)
    prelude = next(i for i, c in enumerate(nb.cells) if c.id == "alternative-prelude")
    first_graded = next(i for i, c in enumerate(nb.cells) if "def causal_mask" in c.source)
    assert prelude < first_graded


def test_a_missing_or_stray_definition_is_an_error(toy):
    (toy / f"{TOY}.py").write_text(ALT.replace("def noisy_sum", "def _noisy_sum"))
    with pytest.raises(alternatives.AlternativeError, match="does not define noisy_sum"):
        alternatives.alternative_notebook(TOY)
    (toy / f"{TOY}.py").write_text(ALT + "\n\ndef helper():\n    pass\n")
    with pytest.raises(alternatives.AlternativeError, match="defines helper"):
        alternatives.alternative_notebook(TOY)


def test_a_run_grades_executes_and_is_cached(toy, capsys):
    record = alternatives.check(TOY)
    assert record["ok"], record["problems"]
    assert record["score"] == record["max_score"] > 0
    assert json.loads((toy / "runs.json").read_text())[TOY]["ok"]
    alternatives.check(TOY)
    assert "up to date" in capsys.readouterr().out


def test_a_wrong_alternative_fails_and_says_what_it_lost(toy):
    (toy / f"{TOY}.py").write_text(ALT.replace("/ q.size(-1) ** 0.5", ""))
    record = alternatives.check(TOY, force=True)
    assert not record["ok"]
    assert any("scaled_scores" in p for p in record["problems"])


def test_rewording_the_prose_does_not_rerun_the_alternative(tmp_path):
    """Does the run hash ignore markdown and comments, but see code and cell tags?"""
    def code_of(text):
        path = tmp_path / "ch.py"
        path.write_text(text)
        return alternatives.executed_code(path)
    base = "# %% [markdown]\n# Some prose.\n\n# %%\nx = 1  # a comment\n"
    assert code_of(base) == code_of(base.replace("Some prose.", "Other prose, reworded."))
    assert code_of(base) == code_of(base.replace("# a comment", "# another"))
    assert code_of(base) != code_of(base.replace("x = 1", "x = 2"))
    assert code_of(base) != code_of(base.replace("# %%\nx", '# %% tags=["skip-grading"]\nx'))
