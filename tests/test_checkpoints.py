"""Does `python -m course checkpoints` train a chapter's declared longer run with the chapter's own
code, commit small weights with their log and code hash, and does the page load them strictly, with
the recorded metrics reproducible and a stale hash said? And does every committed checkpoint hold?"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import attnkit.checkpoints as registry
import course.alternatives as alternatives
import course.checkpoints as checkpoints
import course.exercises as exercises

DATA = Path(__file__).resolve().parent / "data"
TOY = "98_toy_lm"
ALT = ("import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
       "class Bigram(nn.Module):\n    def __init__(self, vocab_size):\n        super().__init__()\n"
       "        self.table = nn.Embedding(vocab_size, vocab_size)\n\n"
       "    def forward(self, tokens):\n        return F.embedding(tokens, self.table.weight)\n")


def _course(root: Path, mp: pytest.MonkeyPatch, trained: Path | None = None) -> Path:
    """The toy chapter and its alternative under `root`, and (a copy of) its trained checkpoints."""
    sol, alts, data = root / "solutions", root / "alternatives", root / "checkpoints_data"
    sol.mkdir()
    alts.mkdir()
    shutil.copy(DATA / f"{TOY}.py", sol / f"{TOY}.py")
    (alts / f"{TOY}.py").write_text(ALT)
    mp.setattr(exercises, "SOLUTIONS", sol)
    mp.setattr(alternatives, "ALTERNATIVES", alts)
    mp.setattr(registry, "DATA", data)
    mp.setenv("ATTNKIT_DEVICE", "cpu")
    if trained:
        shutil.copytree(trained, data)
    return sol / f"{TOY}.py"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The toy chapter's checkpoint, trained once (a fresh process) and shared by the tests."""
    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        _course(root, mp)
        code = checkpoints.main([TOY[:2]])
    return code, root / "checkpoints_data"


@pytest.fixture
def toy(trained, tmp_path, monkeypatch):
    return _course(tmp_path, monkeypatch, trained[1])


def test_the_command_trains_with_the_chapters_code_and_records_the_run(trained, toy):
    assert trained[0] == 0
    folder = registry.DATA / TOY
    assert sorted(p.name for p in folder.iterdir()) == ["bigram_lm.json", "bigram_lm.pt"]
    record = json.loads((folder / "bigram_lm.json").read_text())
    assert record["code_hash"] == checkpoints.code_hash(TOY)
    assert record["kwargs"] == {"steps": 200} and record["device"] == "cpu" and record["dtype"] == "float16"
    assert [row["step"] for row in record["log"]] == [50, 100, 150, 200]
    assert record["log"][-1]["loss"] < record["log"][0]["loss"]
    assert {"python", "torch", "numpy"} <= record["versions"].keys() and record["seconds"] >= 0
    assert record["metrics"]["val_acc"] > 0.8, "200 steps learn the cycle (90% of next tokens)"
    state = torch.load(folder / "bigram_lm.pt", weights_only=True)
    assert state["table.weight"].dtype == torch.float16


def test_the_page_loads_it_in_one_call_and_its_metrics_reproduce(toy):
    ck = checkpoints.declare(TOY)["bigram_lm"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", registry.StaleCheckpoint)     # current: no warning
        model = ck.load()
    assert isinstance(model, nn.Module) and not model.training
    assert ck.evaluate(model) == pytest.approx(ck.record()["metrics"], rel=1e-6)
    assert checkpoints.reproduce(TOY, "reference") == []
    assert checkpoints.reproduce(TOY, "alternative") == [], "another correct solution loads them too"


def test_a_second_run_trains_nothing_and_check_passes(toy, capsys):
    assert checkpoints.main([TOY]) == 0
    assert "every checkpoint is current (bigram_lm)" in capsys.readouterr().out
    assert checkpoints.main([TOY, "--check"]) == 0


def test_prose_keeps_the_record_and_code_makes_it_stale(toy, capsys):
    toy.write_text(toy.read_text().replace("the log holds the loss", "its log holds the loss")
                   .replace("# Text from a noisy cycle", "# Tokens from a noisy cycle"))
    assert checkpoints.states(TOY) == {"bigram_lm": "current"}
    toy.write_text(toy.read_text().replace("lr: float = 0.1", "lr: float = 0.05"))
    assert checkpoints.states(TOY) == {"bigram_lm": "stale"}
    assert checkpoints.main([TOY, "--check"]) == 1
    assert "98_toy_lm/bigram_lm is stale: run `python -m course checkpoints 98`" in capsys.readouterr().out
    ck = checkpoints.declare(TOY)["bigram_lm"]
    with pytest.warns(registry.StaleCheckpoint, match="python -m course checkpoints 98"):
        ck.load()


def test_a_class_whose_parameters_changed_fails_the_strict_load_clearly(toy):
    alt = toy.parent.parent / "alternatives" / f"{TOY}.py"
    alt.write_text(ALT.replace("self.table", "self.logits"))
    problems = checkpoints.reproduce(TOY, "alternative")
    assert len(problems) == 1 and "do not fit the current classes: missing logits.weight; unexpected " \
        "table.weight" in problems[0]


def test_metrics_the_weights_do_not_give_fail(toy):
    path = registry.DATA / TOY / "bigram_lm.json"
    record = json.loads(path.read_text())
    record["metrics"]["val_loss"] -= 0.01
    path.write_text(json.dumps(record))
    assert any("val_loss is" in p and "the record says" in p for p in checkpoints.reproduce(TOY))
    (registry.DATA / TOY / "bigram_lm.pt").write_bytes(b"not the weights")
    with pytest.raises(registry.CheckpointMismatch, match="checksum"):
        checkpoints.declare(TOY)["bigram_lm"].load()


def test_an_orphan_and_the_budget_fail_the_check(toy, monkeypatch, capsys):
    shutil.copy(registry.DATA / TOY / "bigram_lm.json", registry.DATA / TOY / "old_run.json")
    assert checkpoints.states(TOY) == {"bigram_lm": "current", "old_run": "orphan"}
    assert checkpoints.main([TOY, "--check"]) == 1
    (registry.DATA / TOY / "old_run.json").unlink()
    monkeypatch.setattr(registry, "BUDGET_BYTES", 100)
    assert checkpoints.main([TOY, "--check"]) == 1
    assert "over the 0 MB budget" in capsys.readouterr().out


def test_tied_weights_are_stored_once_in_float16(tmp_path):
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 1000, bias=False))
    model[1].weight = model[0].weight
    torch.save(registry.half_state(model), tmp_path / "tied.pt")
    assert (tmp_path / "tied.pt").stat().st_size < 1000 * 64 * 2 * 1.2
    fresh = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 1000, bias=False))
    registry.load_strict(fresh, registry.read_weights(tmp_path / "tied.pt"))
    assert torch.equal(fresh[1].weight, model[0].weight.half().float())


# ---------------------------------------------------------------- what is committed
COMMITTED = sorted({p.parent.name for p in registry.committed()})


@pytest.mark.parametrize("implementation", ["reference", "alternative"])
@pytest.mark.parametrize("chapter", COMMITTED)
def test_each_committed_checkpoint_loads_strictly_and_its_metrics_reproduce(chapter, implementation):
    """Into the current classes (the reference's and the alternative's), the recorded metrics measured
    again on the committed weights."""
    if implementation == "alternative" and not (alternatives.ALTERNATIVES / f"{chapter}.py").exists():
        pytest.skip(f"{chapter} has no alternative solution")
    assert checkpoints.reproduce(chapter, implementation) == []


@pytest.mark.parametrize("chapter", COMMITTED)
def test_each_committed_checkpoint_is_current(chapter):
    bad = {n: s for n, s in checkpoints.states(chapter).items() if s != "current"}
    assert not bad, f"run `python -m course checkpoints {chapter[:2]}` and commit attnkit/checkpoints_data/"


def test_the_committed_checkpoints_fit_the_budget():
    assert registry.committed_bytes() <= registry.BUDGET_BYTES, \
        f"{registry.committed_bytes() / 2**20:.1f} MB of checkpoints, over {registry.BUDGET_BYTES / 2**20:.0f} MB"


def test_a_retrained_checkpoint_re_executes_the_page_that_loads_it(toy, monkeypatch):
    import course.book as book
    monkeypatch.setattr(book, "SOLUTIONS", toy.parent)
    monkeypatch.setattr(book, "CHECKPOINTS_DATA", registry.DATA)
    before = book.source_hash(TOY)
    path = registry.DATA / TOY / "bigram_lm.json"
    path.write_text(path.read_text().replace('"seed": 0', '"seed": 1'))
    assert book.source_hash(TOY) != before


def test_help_and_unknown_options_train_nothing(monkeypatch, capsys):
    """Does `python -m course checkpoints --help` print its usage and train nothing (it used to train)?"""
    import course.checkpoints as cp
    monkeypatch.setattr(cp, "_train", lambda *a, **k: pytest.fail("trained"))
    assert cp.main(["--help"]) == 0 and "usage" in capsys.readouterr().out
    assert cp.main(["05", "--frce"]) == 2 and "unknown option --frce" in capsys.readouterr().err


def test_a_page_cell_tagged_checkpoint_code_is_run_and_hashed_with_the_checkpoint():
    """Which page cells does the command run: the graded ones, the `@checkpoint` cell, and a
    skip-grading cell only when tagged `checkpoint-code` (a class the model is built from)?"""
    import nbformat.v4 as v4
    cells = [v4.new_code_cell("x = 1"),
             v4.new_code_cell("class Local: pass", metadata={"tags": ["skip-grading", checkpoints.NEEDED]}),
             v4.new_code_cell("plot()", metadata={"tags": ["skip-grading"]}),
             v4.new_code_cell("@checkpoint('99_x', build=b, evaluate=e)\ndef run(m, steps, device):\n    pass",
                              metadata={"tags": ["skip-grading"]})]
    got = checkpoints.checkpoint_cells(v4.new_notebook(cells=cells))
    assert got == ["x = 1", "class Local: pass", cells[3].source], "the untagged figure cell is not run"
