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
def test_each_chapters_record_matches_its_code(chapter):
    """The committed tests/claims/NN_name.json matches the chapter's code (its hash: the claims
    tooling, the prose and the claims are not in it)."""
    assert not claims.stale(chapter), f"run `python -m course claims {chapter}` and commit tests/claims/"


@pytest.mark.parametrize("chapter", claims.claims_chapters())
def test_each_chapters_claims_hold_on_its_worded_and_held_out_runs(chapter):
    """Every claim holds on the runs it was worded on and is confirmed on the held-out seeds
    (`python -m course claims NN` runs what is missing and re-checks)."""
    assert not claims.stale_confirmation(chapter), \
        f"the held-out runs are missing: run `python -m course claims {chapter}` and commit tests/claims/"
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


# ---------------------------------------------------------------- held-out seeds
def _bound_broken_only_by_held_out(record: dict) -> str:
    """A claim fitted to the worded runs: the mean is one of theirs (no held-out seed gives one of them)."""
    worded = sorted({round(r["figures"]["toy_mean"], 6) for r in registry.record_runs(record)})
    assert not {round(r["figures"]["toy_mean"], 6) for r in registry.confirmation_runs(record)} & set(worded)
    return f'''
# %% tags=["skip-grading", "hide-input"]
claim("toy_mean_in_range", "The mean is one the worded runs gave.", lambda g: round(g["toy_mean"], 6) in {worded!r})
'''


def test_the_record_keeps_the_worded_runs_and_the_held_out_ones(first_run, toy, capsys):
    """Seeds 0-4 on every (implementation, threads), then 5 held-out seeds, one run each, rotating."""
    record = json.loads((claims.RECORDS / f"{TOY}.json").read_text())
    held = registry.confirmation_runs(record)
    assert sorted((r["seed"], r["implementation"], r["threads"]) for r in held) == [
        (5 + k, impl, t) for k, (impl, t) in enumerate(claims.ROTATION)]
    assert record["confirmation"]["held_out"] == [5, 6, 7, 8, 9] and not registry.seen_runs(record)
    assert claims.main([TOY]) == 0
    out = capsys.readouterr().out
    assert "worded on 20 runs (seeds 0-4), confirmed on 5 held-out runs (seeds 5-9)" in out
    assert "ok   toy_std_near_two: 10/10 reference, 10/10 alternative (needed 100%); held-out 5/5" in out


def test_a_claim_that_fails_on_held_out_seeds_fails_the_check(toy, capsys):
    record = claims.load(TOY)
    toy.write_text(toy.read_text() + _bound_broken_only_by_held_out(record))
    assert claims.main([TOY]) == 1
    out = capsys.readouterr().out
    assert "FAIL toy_mean_in_range: 10/10 reference, 10/10 alternative" in out, "it holds on the worded runs"
    assert "is not confirmed on the held-out seeds" in out and " ran " not in out
    c = claims.claims_of(TOY)["toy_mean_in_range"]
    shown = registry.badge(c, registry.record_runs(record), registry.confirmation_runs(record))
    assert "✓ 10 of 10 reference runs" in shown and "✗ Not confirmed on 5 held-out seeds" in shown


def test_a_new_round_runs_only_its_seeds_and_the_old_round_is_no_longer_held_out(toy, monkeypatch, capsys):
    """A claim reworded after reading round 1 has seen seeds 5-9: round 2 holds out seeds 10-14."""
    toy.write_text(toy.read_text() + _bound_broken_only_by_held_out(claims.load(TOY)))
    monkeypatch.setitem(claims.ROUNDS, TOY, 2)
    assert claims.stale_confirmation(TOY) == ["reference", "alternative"] and not claims.stale(TOY)
    assert claims.main([TOY]) == 1
    out = capsys.readouterr().out
    ran = [line for line in out.splitlines() if line.startswith(f"{TOY} ") and "seed" in line]
    assert sorted(int(line.split("seed ")[1].split(",")[0]) for line in ran) == [10, 11, 12, 13, 14]
    assert "and 5 runs of an earlier round (seeds 5-9), confirmed on 5 held-out runs (seeds 10-14)" in out
    assert "fails on the worded runs with the seen seeds 5-9" in out, "a claim must hold on every run its wording saw"
    record = claims.load(TOY)
    assert sorted(r["seed"] for r in registry.confirmation_runs(record)) == [10, 11, 12, 13, 14]
    assert sorted(r["seed"] for r in registry.seen_runs(record)) == [5, 6, 7, 8, 9]
    c = claims.claims_of(TOY)["toy_std_near_two"]
    shown = registry.badge(c, registry.record_runs(record), registry.confirmation_runs(record),
                           registry.seen_runs(record))
    assert "Its wording also saw seeds 5-9: ✓ 5 of 5 runs." in shown and "Confirmed on 5 held-out seeds" in shown


def test_held_out_seeds_are_never_worded_seeds(toy, monkeypatch):
    """A plan that reaches back into the worded seeds is refused, not silently run."""
    monkeypatch.setattr(claims, "ROTATION", (("reference", 1),) * 5)
    monkeypatch.setitem(claims.ROUNDS, TOY, 0)
    with pytest.raises(RuntimeError, match="worded seeds"):
        claims._run(TOY, "reference", None, [(3, 1)])


def test_the_badge_says_whether_a_claim_is_confirmed():
    c = registry.Claim("c", "x > 0", lambda g: g["x"] > 0)
    worded = [{"implementation": i, "seed": s, "threads": 1, "figures": {"x": 1.0 + s}}
              for i in ("reference", "alternative") for s in range(5)]
    held = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": 1.0}} for s in range(5, 10)]
    assert "✓ Confirmed on 5 held-out seeds (5 of 5 runs)." in registry.badge(c, worded, held)
    assert "Not yet confirmed on held-out seeds." in registry.badge(c, worded, [])
    held[2]["figures"]["x"] = -1.0
    assert "✗ Not confirmed on 5 held-out seeds: holds in 4 of 5 runs." in registry.badge(c, worded, held)


# ---------------------------------------------------------------- margin against spread; identical alternatives
def test_the_slack_of_each_inequality_is_measured():
    fns = dict(claims.slack_functions(
        'import math\n'
        'claim("a", "t", lambda g: g["x"] >= 1 and all(g[f"y{i}"] < 2 for i in range(2)) and g["n"] == 3)\n'
        'claim("b", "t", lambda g: math.fabs(g["x"]) <= g["z"], at_least=0.8)\n'))
    g = {"x": 1.5, "y0": 0.5, "y1": 1.75, "n": 3, "z": 4.0}
    assert [f(g) for _, f in fns["a"]] == [0.5, 0.25], "x - 1, and the smaller of 2 - y_i; == has no slack"
    assert [f(g) for _, f in fns["b"]] == [2.5]


def test_a_claim_whose_margin_is_below_the_spread_is_reported_fragile(toy, capsys):
    stds = [r["figures"]["toy_std"] for r in registry.record_runs(claims.load(TOY))]
    toy.write_text(toy.read_text() + f'''
# %% tags=["skip-grading", "hide-input"]
claim("toy_std_tight", "The standard deviation is at least its smallest value so far.",
      lambda g: g["toy_std"] >= {min(stds) - 1e-4!r})
''')
    edges = claims.margins(TOY, registry.record_runs(claims.load(TOY)))
    assert edges["toy_std_tight"]["fragile"] and abs(edges["toy_std_tight"]["margin"] - 1e-4) < 1e-9
    assert abs(edges["toy_std_tight"]["spread"] - (max(stds) - min(stds))) < 1e-9
    assert not edges["toy_std_near_two"]["fragile"]
    claims.main([TOY])
    out = capsys.readouterr().out
    assert "FRAGILE" in next(line for line in out.splitlines() if "toy_std_tight" in line)
    assert "FRAGILE" not in next(line for line in out.splitlines() if "toy_std_near_two" in line)


def test_margin_of_a_claim_about_most_runs_is_read_at_its_fraction(toy):
    """For at_least=0.8 over 10 runs, the run that decides is the 8th best."""
    toy.write_text(toy.read_text() + '''
# %% tags=["skip-grading", "hide-input"]
claim("toy_most", "In most runs x >= 0.", lambda g: g["x"] >= 0, at_least=0.8)
''')
    runs = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": float(s) - 2}}
            for s in range(10)]
    m = claims.margins(TOY, runs)["toy_most"]
    assert m["margin"] == 0.0 and m["spread"] == 9.0 and m["fragile"]


def test_an_alternative_with_the_references_bits_is_no_independent_check(toy):
    record = claims.load(TOY)
    runs = registry.record_runs(record)
    c = claims.claims_of(TOY)["toy_std_near_two"]
    assert registry.figures_read(c, runs) == {"toy_std"}
    assert registry.identical_alternative({"toy_std"}, runs), "torch.add(x, x) gives x * 2's bits"
    assert "not an independent check" in registry.badge(c, runs, registry.confirmation_runs(record))
    moved = [{**r, "figures": {"toy_std": r["figures"]["toy_std"] + (r["implementation"] == "alternative") * 1e-7}}
             for r in runs]
    assert not registry.identical_alternative({"toy_std"}, moved)
    assert "not an independent check" not in registry.badge(c, moved, [])


def test_a_rate_below_one_held_out_run_is_tested_with_the_worded_runs():
    """'In some runs (at least 1 in 10)' cannot fail on 5 held-out runs alone: they are pooled."""
    c = registry.Claim("c", "In some runs x > 0.", lambda g: g["x"] > 0, at_least=0.1)
    worded = [{"implementation": "reference", "seed": s, "threads": t, "figures": {"x": float(s == 0)}}
              for s in range(5) for t in (1, 2)] * 2
    held = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": 0.0}} for s in range(5, 10)]
    v = registry.confirmed(c, held, worded)
    assert v["pooled"] and v["ok"] and (v["held"], v["total"]) == (4, 25)
    assert not registry.confirmed(c, held, worded[1:10])["ok"], "1 of 14 runs holds: fewer than 1 in 10"
    assert "with the worded ones" in registry.badge(c, worded, held)
    strict = registry.Claim("c", "In most runs x > 0.", lambda g: g["x"] > 0, at_least=0.8)
    assert not registry.confirmed(strict, held, worded)["pooled"]


def test_the_spread_table_ranges_over_the_held_out_runs_too(first_run, toy, monkeypatch):
    """A figure's range on the page includes the held-out seeds (a reviewer read a range of 20 runs
    that the sixth seed left)."""
    shown = []
    record = claims.load(TOY)
    monkeypatch.setattr(registry, "_show_markdown", shown.append)
    monkeypatch.setattr(registry, "load_record", lambda chapter: record)
    monkeypatch.setattr(registry, "CHAPTER", [TOY])
    monkeypatch.setattr(registry, "THIS_RUN", {})
    registry.spread(["toy_std"], digits=4)
    worded = [r["figures"]["toy_std"] for r in registry.record_runs(record)]
    every = worded + [r["figures"]["toy_std"] for r in registry.confirmation_runs(record)]
    assert min(every) < min(worded), "seed 5-9 leave the worded range (the test needs it)"
    assert f"{min(every):.4f} - {max(every):.4f}" in shown[0]
    assert "Over 20 runs of the claims check" in shown[0] and "5 runs on the later seeds 5-9" in shown[0]


def test_a_low_rate_claim_is_read_on_every_run_its_wording_saw():
    """'At least 1 in 10' over the grid and an earlier round together, not over the round alone."""
    c = registry.Claim("c", "In some runs x > 0.", lambda g: g["x"] > 0, at_least=0.1)
    grid = [{"implementation": "reference", "seed": s, "threads": t, "figures": {"x": float(s < 2)}}
            for s in range(5) for t in (1, 2)]
    seen = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": float(s == 5)}}
            for s in range(5, 20)]
    held = [{"implementation": "reference", "seed": s, "threads": 1, "figures": {"x": 0.0}} for s in range(20, 25)]
    assert "Its wording also saw seeds 5-19: ✓ 1 of 15 runs." in registry.badge(c, grid, held, seen)


def _record(values: list[float]) -> dict:
    """A record whose runs (reference, seeds 0.., 1 thread) have these `toy_time_ratio` figures."""
    runs = [{"seed": s, "threads": 1, "figures": {"toy_time_ratio": v, "toy_std": 2.0}} for s, v in enumerate(values)]
    return {"implementations": {"reference": {"runs": runs}},
            "confirmation": {"held_out": [50], "implementations": {"reference": {"runs": [
                {"seed": 50, "threads": 1, "figures": {"toy_time_ratio": 3.0, "toy_std": 2.0}}]}}}}


def test_a_timing_claim_whose_spread_swamps_its_margin_fails(toy, capsys):
    """Does a timing ratio that holds in every run still fail when its runs scatter more than its effect?"""
    toy.write_text(toy.read_text() + '''
# %% tags=["skip-grading", "hide-input"]
claim("toy_time_faster", "The first call is slower than the second.", lambda g: g["toy_time_ratio"] > 1)
claim("toy_not_timed", "The ratio is above 1.", lambda g: g["toy_std"] > 1)
''')
    steady = claims.check(TOY, _record([2.9, 3.0, 3.1, 3.2]))        # log margin 1.06, spread 0.098
    assert not [p for p in steady if "toy_time_faster" in p]
    wide = claims.check(TOY, _record([11.5, 27.0, 20.0]))            # a range of 15.5 but a factor 2.3 from 11.5 > 1
    assert not [p for p in wide if "toy_time_faster" in p], "timings scatter by factors: measured on the log scale"
    capsys.readouterr()
    swamped = claims.check(TOY, _record([1.2, 3.0, 5.0, 2.5]))       # holds in every run; log margin 0.18, spread 1.43
    out = capsys.readouterr().out
    assert [p for p in swamped if "timing claim 'toy_time_faster'" in p and "spread 1.43" in p]
    assert "FAIL toy_time_faster" in out and "(a timing: fails)" in out
    assert not [p for p in swamped if "toy_not_timed" in p], "only claims reading a timing figure fail"


def test_timing_figures_are_recognised_by_name():
    assert all(claims.TIMING_FIGURE.search(n) for n in
               ("ch08_time_sdpa_over_lsh_8192", "ch07_speedup_256", "time_full", "step_seconds"))
    assert not any(claims.TIMING_FIGURE.search(n) for n in ("ch05_timestep_loss", "ch08_mem_lsh_8192", "lifetime"))


def test_a_timing_slack_is_read_on_the_log_scale():
    assert claims.log_slack(6.0, 2.0) == pytest.approx(1.0986, abs=1e-4)
    assert claims.log_slack(-1.0, 2.0) == -3.0, "a sign change has no log: the plain difference"
    fns = claims.slack_functions('claim("a", "t", lambda g: g["x_time"] > 2 and g["y"] < 4)\n', relative=True)
    assert [f({"x_time": 6.0, "y": 2.0}) for _, f in fns["a"]] == pytest.approx([1.0986, 0.6931], abs=1e-4)


def test_check_mode_reports_a_stale_record_and_runs_nothing(toy, monkeypatch, capsys):
    """Does `claims --check` fail on a stale record without re-running anything?"""
    assert claims.main([TOY, "--check"]) == 0
    toy.write_text(toy.read_text().replace("torch.randn(1000", "torch.randn(2000"))
    monkeypatch.setattr(claims, "_run", lambda *a, **k: pytest.fail("--check must not run"))
    assert claims.main([TOY, "--check"]) == 1
    assert "stale" in capsys.readouterr().out
