"""Hidden inputs per student (`--secret-file`): the seeds, the reference cache, and the secret threaded
through the one-notebook command, the batch (nbgrader's path too), the Dask cluster's settings and the
Gradescope zip, on the toy chapter; and Gradescope's visibility fields."""
from __future__ import annotations

import json
from dataclasses import replace
import zipfile
from pathlib import Path

import pytest
import torch

from autograder import batch, cli
from autograder.batch.io import Job, find_jobs
from autograder.batch.worker import inputs_key
from autograder.exports.gradescope import export
from autograder.harness import check, memo, offset
from autograder.harness.results import set_visibility
from autograder.harness.seeds import (MIN_OFFSET, PerStudentInputs, read_secret, shifted_seeds, student_key,
                                      test_offset)
from autograder.grade import grade_submission
from autograder.harness.sandbox import Limits, Sandbox
from tests.batch.toy import CHAPTER, make_notebook, toy_folders
from tests.test_gradescope_export import run_autograder

SECRET = b"0123456789abcdef-this-term"


@pytest.fixture
def secret_file(tmp_path) -> Path:
    path = tmp_path / "course_secret"
    path.write_bytes(SECRET + b"\n")
    return path


def printed_inputs(result: dict) -> list[str]:
    """The INPUTS lines the "inputs" variant printed while graded (one per call of `add`)."""
    return sorted(line.split("INPUTS", 1)[1].strip() for line in result["output"].splitlines() if "INPUTS" in line)


def shared_inputs() -> str:
    """What `add` gets in the toy grader's seeded test without a secret: seeded(0)'s first draw."""
    a = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    return f"(3, 4) {round(float(a.sum()), 5)}"


# ---------------------------------------------------------------- seeds
def test_keys_differ_per_student_and_secret_and_repeat_for_the_same_pair(tmp_path):
    ann, ben = student_key(SECRET, "ann"), student_key(SECRET, "ben")
    assert ann == student_key(SECRET, "ann") and ann != ben != student_key(b"another secret, next term", "ben")
    offsets = {test_offset(ann, f"{CHAPTER}:{t}") for t in ("test_a", "test_b")} | {test_offset(ben, f"{CHAPTER}:test_a")}
    assert len(offsets) == 3 and min(offsets) >= MIN_OFFSET
    (tmp_path / "short").write_text("secret\n")
    with pytest.raises(ValueError, match="at least"):
        read_secret(tmp_path / "short")


def test_shifted_seeds_move_both_kinds_of_seed_and_then_restore_them():
    def draws():
        torch.manual_seed(3)
        return torch.rand(2), torch.rand(2, generator=check.seeded(3))

    plain = draws()
    with shifted_seeds(1000):
        moved = draws()
    assert torch.equal(draws()[0], plain[0]) and torch.equal(draws()[1], plain[1]) and offset.SEED_OFFSET == 0
    torch.manual_seed(1003)
    assert torch.equal(moved[0], torch.rand(2))
    assert torch.equal(moved[1], torch.rand(2, generator=torch.Generator().manual_seed(1003)))


def test_the_reference_cache_never_serves_a_value_across_students(monkeypatch):
    # the cache on, whatever an earlier test left in the environment (the one-notebook path sets it off)
    monkeypatch.delenv("AUTOGRADER_REFERENCE_CACHE", raising=False)
    memo.clear()
    calls = []

    @memo.reference_cache
    def weights(seed: int):
        calls.append(offset.SEED_OFFSET)
        return torch.randn(3, generator=check.seeded(seed))

    shared = weights(1)
    ann = PerStudentInputs(student_key(SECRET, "ann"), CHAPTER)
    with ann.inputs("test_x"):
        own = weights(1)
        assert torch.equal(own, weights(1))
    assert not torch.equal(own, shared), "a student's test drew the shared inputs"
    assert torch.equal(weights(1), shared) and memo.STATS["hits"] == 1, "the shared entry must still serve"
    assert memo.STATS["uncached"] == 2 and calls.count(0) == 2  # per-student calls: computed once each, not twice
    memo.clear()


# ---------------------------------------------------------------- threaded through every way of grading
@pytest.fixture(scope="module")
def chapter_folders(tmp_path_factory):
    """The toy chapter's solutions and graders, for every test of this module (toy_chapter, module-wide)."""
    from autograder.reference import load_reference
    sol, graders = toy_folders(tmp_path_factory.mktemp("toy"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOGRADER_SOLUTIONS", str(sol))
        mp.setenv("AUTOGRADER_GRADERS", str(graders))
        load_reference.cache_clear()
        yield sol, graders
    load_reference.cache_clear()


@pytest.fixture(scope="module")
def graded(chapter_folders, tmp_path_factory) -> dict[str, dict]:
    """The "inputs" notebook graded in one sandbox: without a secret, for ann (twice) and for ben."""
    nb = make_notebook(tmp_path_factory.mktemp("nb") / f"{CHAPTER}.ipynb", "inputs")
    keys = {"plain": None, "ann": student_key(SECRET, "ann"), "again": student_key(SECRET, "ann"),
            "ben": student_key(SECRET, "ben")}
    with Sandbox(Limits(call_seconds=5.0)) as box:
        return {name: grade_submission(nb, box, CHAPTER, inputs_key=key) for name, key in keys.items()}


def test_two_students_get_different_inputs_and_a_regrade_the_same(graded):
    plain, ann, again, ben = (graded[k] for k in ("plain", "ann", "again", "ben"))
    assert shared_inputs() in printed_inputs(plain), "without a secret the inputs must be as before"
    assert "inputs" not in plain["extra_data"] and ann["extra_data"]["inputs"] == "per student"
    assert printed_inputs(ann) == printed_inputs(again), "a regrade must give the same student the same inputs"
    assert printed_inputs(ann) != printed_inputs(ben) and shared_inputs() not in printed_inputs(ann)
    fixed = set(printed_inputs(ann)) & set(printed_inputs(ben))  # the test whose inputs no seed draws
    assert fixed == set(printed_inputs(plain)) - {shared_inputs()}
    assert all(r["score"] == r["max_score"] == 4 for r in graded.values())


def test_the_one_notebook_command_keys_by_student_or_file_name(graded, tmp_path, secret_file):
    nb = make_notebook(tmp_path / "ann.ipynb", "inputs")
    out = tmp_path / "out"
    assert cli.main(["grade", str(nb), "--out", str(out), "--call-timeout", "5", "--chapter", CHAPTER,
                     "--secret-file", str(secret_file)]) == 0  # no --student: the file's name, as a batch does
    result = json.loads((out / "ann" / "results.json").read_text())
    assert printed_inputs(result) == printed_inputs(graded["ann"])


def test_a_batch_keys_each_student_by_the_batch_student_id(graded, tmp_path):
    for student in ("ann", "ben"):
        make_notebook(tmp_path / "class" / student / f"{CHAPTER}.ipynb", "inputs")
    settings = batch.Settings(tmp_path / "out", jobs=1, call_timeout=5.0, progress=False, secret=SECRET)
    report = batch.run_batch(find_jobs([str(tmp_path / "class")]), settings)
    results = {r["extra_data"]["student"]: r for r in report.results.values()}
    assert all(r["score"] == 4 and r["extra_data"]["inputs"] == "per student" for r in results.values())
    assert {s: printed_inputs(r) for s, r in results.items()} == {
        s: printed_inputs(graded[s]) for s in ("ann", "ben")}, "the batch must key students as one grading does"
    again = batch.run_batch(find_jobs([str(tmp_path / "class")]), settings)
    assert again.skipped == 2 and again.graded == 0, "the same secret: the results are current"
    other = batch.run_batch(find_jobs([str(tmp_path / "class")]), replace(settings, secret=b"another secret of 32 bytes......"))
    assert other.graded == 2 and sum(other.stale.values()) == 2, "another secret: other inputs, so a regrade"


def test_the_key_follows_the_batch_student_id_and_the_cluster_carries_the_secret(tmp_path):
    from autograder.cluster.worker import GraderPlugin, WorkerSettings
    job = Job("ann/hw", tmp_path / "hw.ipynb", "ann", "hw")  # as nbgrader's find_course_jobs names it
    assert inputs_key(job, batch.Settings(tmp_path, secret=SECRET)) == student_key(SECRET, "ann")
    assert inputs_key(job, batch.Settings(tmp_path)) is None
    ws = WorkerSettings(None, "process", 5.0, 60.0, secret=SECRET.hex())
    assert GraderPlugin(ws, "v", "n")._batch_settings(1).secret == SECRET


def test_gradescope_packs_the_secret_keys_by_user_id_and_sets_visibility(graded, tmp_path, secret_file):
    checks = tmp_path / "checks.pt"
    a, b = torch.ones(2, 2), torch.arange(4.0).reshape(2, 2)
    torch.save({"format": 1, "chapter": CHAPTER, "checks": [
        {"name": "add: public check 1 of 1", "function": "add", "hint": "", "points": 1.0,
         "parts": [{"request": {"op": "call", "name": "add", "args": (a, b), "kwargs": {}},
                    "want": {"value": a + b}}]}]}, checks)
    zip_path = export(CHAPTER, tmp_path / "autograder.zip", call_timeout=5.0, secret=read_secret(secret_file),
                      public_checks=checks)
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read("course_secret") == SECRET and "public_checks.pt" in zf.namelist()
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": "ann", "email": "a@b.c"}]}))
    result = run_autograder(zip_path, root, {f"{CHAPTER}.ipynb": "inputs"})
    public = [t for t in result["tests"] if t["name"].startswith("Public check")]
    hidden = [t for t in result["tests"] if t not in public]
    assert [t["status"] for t in public] == ["passed"] and public[0]["visibility"] == "visible"
    assert public[0]["max_score"] == 0 and (result["score"], result["max_score"]) == (4, 4)
    assert hidden and {t["visibility"] for t in hidden} == {"after_due_date"} and result["visibility"] == "visible"
    assert [x for x in printed_inputs(result) if x != "(2, 2) 4.0"] == printed_inputs(graded["ann"])


def test_visibility_is_set_per_test_and_at_the_top():
    result = set_visibility({"tests": [{"name": "t"}]}, "after_published", "hidden")
    assert result == {"tests": [{"name": "t", "visibility": "after_published"}], "visibility": "hidden"}
