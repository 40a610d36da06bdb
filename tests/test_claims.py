"""Does the claims check run a chapter's experiment over seeds, threads and solutions, cache it by
its code alone, and fail on a claim the runs do not support?"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import attnkit.claims as registry
import course.alternatives as alternatives
import course.claims as claims
import course.exercises as exercises

DATA = Path(__file__).resolve().parent / "data"
TOY = "99_toy"
ALT = "import torch\n\n\ndef double(x):\n    return torch.add(x, x)\n"
WRONG = '''
# %% tags=["skip-grading", "hide-input"]
claim("toy_mean_positive", "The mean is positive.", lambda g: g["toy_mean"] > 0)
'''


def _course(root: Path, mp: pytest.MonkeyPatch, record: Path | None = None) -> Path:
    """The toy chapter, its alternative and (a copy of) a record under `root`."""
    sol, alts = root / "solutions", root / "alternatives"
    sol.mkdir()
    alts.mkdir()
    shutil.copy(DATA / f"{TOY}.py", sol / f"{TOY}.py")
    (alts / f"{TOY}.py").write_text(ALT)
    mp.setattr(exercises, "SOLUTIONS", sol)
    mp.setattr(alternatives, "ALTERNATIVES", alts)
    mp.setattr(claims, "RECORDS", root / "claims")
    if record:
        (root / "claims").mkdir()
        shutil.copy(record, root / "claims" / f"{TOY}.json")
    return sol / f"{TOY}.py"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One claims run of the toy chapter (two processes, 20 calls), shared by the tests."""
    root = tmp_path_factory.mktemp("first")
    with pytest.MonkeyPatch.context() as mp:
        _course(root, mp)
        code = claims.main([TOY])
    return code, root / "claims" / f"{TOY}.json"


@pytest.fixture
def toy(first_run, tmp_path, monkeypatch):
    return _course(tmp_path, monkeypatch, first_run[1])


def test_cells_are_split_into_experiment_and_claims(toy):
    nb = exercises.read_solution(TOY)
    run = claims.experiment_cells(nb)
    assert any("def double" in s for s in run) and any("@experiment" in s for s in run)
    assert not any("spread(" in s or "claim(" in s for s in run), "page-only and claim cells are not run"
    assert [s for s in claims.claim_sources(nb) if "toy_std_near_two" in s]


def test_every_claim_is_checked_on_every_run_and_the_record_is_cached(first_run, toy, capsys):
    assert first_run[0] == 0
    record = json.loads((claims.RECORDS / f"{TOY}.json").read_text())
    runs = registry.record_runs(record)
    assert {(r["implementation"], r["threads"]) for r in runs} == {
        (i, t) for i in ("reference", "alternative") for t in (1, 2)}
    assert sorted({r["seed"] for r in runs}) == [0, 1, 2, 3, 4]
    assert claims.main([TOY]) == 0
    out = capsys.readouterr().out
    assert "ok   toy_std_near_two: 10/10 reference, 10/10 alternative" in out
    assert " ran " not in out, "an unchanged chapter is not run again"


def test_a_wrong_claim_fails_the_check_from_the_cached_runs(toy, capsys):
    toy.write_text(toy.read_text() + WRONG)
    assert claims.main([TOY]) == 1
    out = capsys.readouterr().out
    assert "FAIL toy_mean_positive" in out and " ran " not in out
    assert not claims.stale(TOY), "adding a claim re-runs nothing"
    assert any("toy_mean_positive" in p for p in claims.alternative_problems(TOY)), \
        "the alternative's run of `make test-notebooks` reports the claim it breaks"


def test_prose_does_not_invalidate_the_record_and_code_does(toy):
    toy.write_text(toy.read_text().replace("gives a standard deviation", "has a standard deviation")
                   .replace('"""The mean and standard', '"""Mean and standard'))
    assert claims.stale(TOY) == []
    toy.write_text(toy.read_text().replace("torch.randn(1000", "torch.randn(2000"))
    assert claims.stale(TOY) == ["reference", "alternative"]
    (toy.parent.parent / "alternatives" / f"{TOY}.py").write_text(ALT.replace("torch.add(x, x)", "2 * x"))
    assert "alternative" in claims.stale(TOY)


def test_a_claim_that_holds_in_most_runs_needs_its_fraction():
    runs = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": s}} for s in range(5)]
    c = registry.Claim("c", "x > 0 in 4 of 5 seeds", lambda g: g["x"] > 0, at_least=0.8)
    assert registry.verdict(c, runs)["ok"]
    assert not registry.verdict(registry.Claim("c", "x > 0", lambda g: g["x"] > 0), runs)["ok"]
    missing = registry.verdict(registry.Claim("c", "y", lambda g: g["y"] > 0), runs)
    assert not missing["ok"] and "not measured" in missing["errors"][0]


@pytest.mark.parametrize("chapter", claims.claims_chapters())
def test_each_chapters_record_is_current_and_its_claims_hold(chapter):
    """The committed tests/claims/NN_name.json matches the chapter's code, and every claim holds on it
    (`python -m course claims NN` re-runs and re-checks)."""
    assert not claims.stale(chapter), f"run `python -m course claims {chapter}` and commit tests/claims/"
    assert not claims.check(chapter, claims.load(chapter))


def test_parallel_jobs_split_the_seeds_and_record_the_same_runs(first_run, toy, capsys):
    """--jobs=N runs the seeds in N processes; the record holds the same runs, in the same order;
    each run prints its line as it ends (a long refresh shows its progress)."""
    assert claims.main([TOY, "--force", "--jobs=4"]) == 0
    out = capsys.readouterr().out
    assert all(f"{TOY} {impl} doubled_noise: seed {s}, {t} thread(s)" in out
               for impl in ("reference", "alternative") for s in range(5) for t in (1, 2)), out
    strip = lambda rec: {i: [{k: v for k, v in r.items() if k != "seconds"} for r in p["runs"]]  # noqa: E731
                         for i, p in rec["implementations"].items()}
    parallel = json.loads((claims.RECORDS / f"{TOY}.json").read_text())
    assert strip(parallel) == strip(json.loads(first_run[1].read_text()))


def test_the_check_runs_on_the_cpu_on_every_machine(tmp_path, monkeypatch):
    """A GPU (or a device asked for in $ATTNKIT_DEVICE) would change the recorded figures: the
    claims runs see the CPU from pick_device()."""
    toy = _course(tmp_path, monkeypatch)
    on_cpu = 'import attnkit\n    return {"on_cpu": float(attnkit.pick_device().type == "cpu"), "toy_mean"'
    toy.write_text(toy.read_text().replace('return {"toy_mean"', on_cpu))
    monkeypatch.setenv("ATTNKIT_DEVICE", "cuda:7")
    runs = claims._run(TOY, "reference", [0])
    assert [r["figures"]["on_cpu"] for r in runs] == [1.0, 1.0]


def test_the_page_reads_a_some_runs_claim_without_calling_this_run_a_failure(monkeypatch):
    """'In some runs X' is not broken by a run without X: the page says this run is not one of them."""
    shown = []
    monkeypatch.setattr(registry, "_show_markdown", shown.append)
    monkeypatch.setattr(registry, "THIS_RUN", {"x": 0.0})
    monkeypatch.setattr(registry, "CHAPTER", [])
    monkeypatch.setattr(registry, "CLAIMS", {})
    registry.claim("some", "In some runs x > 0.", lambda g: g["x"] > 0, at_least=0.2)
    registry.claim("every", "x > 0.", lambda g: g["x"] > 0)
    registry.claim("missing", "y > 0.", lambda g: g["y"] > 0, at_least=0.2)
    assert "This run: not one of them." in shown[0] and "✗" not in shown[0]
    assert "This run: ✗ does not hold." in shown[1]
    assert "This run: ✗ figure 'y' not measured." in shown[2]
