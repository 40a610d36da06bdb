"""Does `grade_submission(..., only=F)` run exactly the tests of function F (the known-wrong self-test's speed-up)?"""
from pathlib import Path

from autograder.grade import grade_submission
from autograder.harness.sandbox import Limits, Sandbox

CHAPTER = Path(__file__).resolve().parent / "hostile" / "chapter"


def test_only_runs_that_functions_tests(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SOLUTIONS", str(CHAPTER))
    monkeypatch.setenv("AUTOGRADER_GRADERS", str(CHAPTER))
    with Sandbox(Limits(call_seconds=5), isolation="process") as box:
        every = grade_submission(CHAPTER / "99_toy.py", box)
        only = grade_submission(CHAPTER / "99_toy.py", box, only="scaled_scores")
    assert {t["tags"][0] for t in every["tests"]} == {"causal_mask", "scaled_scores", "noisy_sum"}
    assert only["tests"] and {t["tags"][0] for t in only["tests"]} == {"scaled_scores"}
    assert only["score"] == only["max_score"] == 3  # 2 points, and 1 for its CUDA test (simulated here)
