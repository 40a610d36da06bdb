"""Does `python -m course sweeps` run a chapter's declared sweep with the chapter's own code, store one
record per config with the code's hash, re-run only what is missing or made by other code, and does
the page read the records in the order of its configs, saying what is missing or stale?"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import attnkit.sweeps as registry
import course.exercises as exercises
import course.sweeps as sweeps

TOY = "97_toy_sweep"
SOURCE = '''# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   course:
#     chapter: 97_toy_sweep
# ---

# %%
def double(x):
    return 2 * x

# %% tags=["skip-grading"]
from attnkit.sweeps import sweep


@sweep("97_toy_sweep", configs=CONFIGS)
def toy_run(x: int) -> dict:
    """One run: its record."""
    return {"y": double(x) + OFFSET}
'''


def _chapter(root: Path, mp: pytest.MonkeyPatch, configs: str = "[dict(x=1), dict(x=2)]",
             offset: int = 0) -> Path:
    sol = root / "solutions"
    sol.mkdir(exist_ok=True)
    path = sol / f"{TOY}.py"
    path.write_text(SOURCE.replace("CONFIGS", configs).replace("OFFSET", str(offset)))
    mp.setattr(exercises, "SOLUTIONS", sol)
    mp.setattr(registry, "DATA", root / "sweeps_data")
    return path


def _records(root: Path) -> dict:
    return json.loads((root / "sweeps_data" / TOY / "toy_run.json").read_text())["runs"]


def test_the_command_runs_every_config_with_the_chapters_code(tmp_path, monkeypatch):
    _chapter(tmp_path, monkeypatch)
    assert sweeps.main([TOY[:2]]) == 0
    runs = _records(tmp_path)
    assert {k: r["y"] for k, r in runs.items()} == {'{"x": 1}': 2, '{"x": 2}': 4}
    assert {r["code_hash"] for r in runs.values()} == {sweeps.code_hash(TOY)}


def test_a_new_config_runs_alone_and_changed_code_reruns_all(tmp_path, monkeypatch):
    _chapter(tmp_path, monkeypatch)
    assert sweeps.main([TOY[:2]]) == 0
    before = _records(tmp_path)
    _chapter(tmp_path, monkeypatch, configs="[dict(x=1), dict(x=2), dict(x=3)]")
    assert sweeps.code_hash(TOY) == before['{"x": 1}']["code_hash"], "the list of configs is not code"
    assert sweeps.main([TOY[:2]]) == 0
    after = _records(tmp_path)
    assert after['{"x": 1}']["made_at"] == before['{"x": 1}']["made_at"], "an unchanged run re-ran"
    assert after['{"x": 3}']["y"] == 6
    _chapter(tmp_path, monkeypatch, configs="[dict(x=1), dict(x=2), dict(x=3)]", offset=10)
    assert sweeps.code_hash(TOY) != before['{"x": 1}']["code_hash"]
    assert sweeps.main([TOY[:2]]) == 0
    assert [r["y"] for r in _records(tmp_path).values()] == [12, 14, 16]


def test_the_page_reads_records_in_order_and_says_what_is_missing_or_stale(tmp_path, monkeypatch):
    _chapter(tmp_path, monkeypatch)
    ns: dict = {}
    exec(compile(SOURCE.replace("CONFIGS", "[dict(x=2), dict(x=1)]").replace("OFFSET", "0"),
                 "toy", "exec"), {"double": lambda x: 2 * x, **ns}, ns)
    toy_run = ns["toy_run"]
    with pytest.raises(FileNotFoundError, match="python -m course sweeps 97"):
        toy_run.results()
    assert sweeps.main([TOY[:2]]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [(r["config"], r["y"]) for r in toy_run.results()] == [({"x": 2}, 4), ({"x": 1}, 2)]
    _chapter(tmp_path, monkeypatch, offset=1)                      # the code changed, not re-run
    with pytest.warns(registry.StaleSweep, match="re-runs them"):
        toy_run.results()


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="non-empty list of dicts"):
        registry.sweep("97_toy_sweep", configs=[])
    with pytest.raises(ValueError, match="twice"):
        registry.sweep("97_toy_sweep", configs=[dict(x=1), dict(x=1)])
