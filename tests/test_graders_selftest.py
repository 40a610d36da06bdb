"""Do the hidden graders work? Solutions get full marks, released exercises get 0
with a hint on every test, every known-wrong variant loses points, and every known-correct
variant in another style (tests/variants/) keeps full marks."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from autograder.grade import grade_submission, max_points
from autograder.paths import chapters, solutions_dir
from autograder.harness.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = chapters()


def mistakes(chapter: str) -> list:
    path = ROOT / "tests" / "mistakes" / f"{chapter}.py"
    return runpy.run_path(str(path))["MISTAKES"] if path.exists() else []


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(Limits(call_seconds=20)) as sb:
        yield sb


def test_there_are_chapters_to_grade():
    assert CHAPTERS, "no chapter has both solutions/NN.py and autograder/graders/test_NN.py"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_gets_full_marks(chapter, sandbox):
    result = grade_submission(solutions_dir() / f"{chapter}.py", sandbox)
    failed = [f"{t['name']}: {t['output']}" for t in result["tests"] if t["status"] != "passed"]
    assert not failed, "\n".join(failed)
    assert result["score"] == result["max_score"] == max_points(chapter) > 0


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_released_exercise_gets_zero_with_hints(chapter, sandbox):
    result = grade_submission(ROOT / "exercises" / f"{chapter}.ipynb", sandbox)
    assert result["extra_data"]["status"] == "graded"
    assert result["score"] == 0, [t["name"] for t in result["tests"] if t["score"] > 0]
    assert result["max_score"] == max_points(chapter)
    for test in result["tests"]:
        if test["max_score"]:
            assert "Hint:" in test["output"], f"no hint for {test['name']}"


def _cases():
    return [pytest.param(ch, m, id=f"{ch}-{m.function}-{m.name}") for ch in CHAPTERS for m in mistakes(ch)]


@pytest.mark.parametrize("chapter,mistake", _cases())
def test_known_mistake_loses_points(chapter, mistake, sandbox, tmp_path):
    source = (solutions_dir() / f"{chapter}.py").read_text()
    wrong = tmp_path / f"{chapter}.py"
    wrong.write_text(source + "\n\n# %%\n" + mistake.code.strip() + "\n")
    result = grade_submission(wrong, sandbox, only=mistake.function)  # its own tests are all we check
    own = [t for t in result["tests"] if mistake.function in t.get("tags", [])]
    assert own, f"no grader is tagged with {mistake.function}"
    lost = [t for t in own if t["score"] < t["max_score"]]
    assert lost, f"'{mistake.name}' kept full marks on every {mistake.function} test"
    if mistake.feedback:
        text = "\n".join(t["output"] for t in lost)
        assert mistake.feedback.lower() in text.lower(), f"feedback does not name the mistake:\n{text}"


def variants(chapter: str) -> list:
    path = ROOT / "tests" / "variants" / f"{chapter}.py"
    return runpy.run_path(str(path))["VARIANTS"] if path.exists() else []


def _variant_cases():
    return [pytest.param(ch, v, id=f"{ch}-{v.function}-{v.name[:40]}") for ch in CHAPTERS for v in variants(ch)]


@pytest.mark.parametrize("chapter,variant", _variant_cases())
def test_known_correct_variant_keeps_full_marks(chapter, variant, sandbox, tmp_path):
    """A correct implementation in another style (tests/variants/) loses no point on its function's tests."""
    source = (solutions_dir() / f"{chapter}.py").read_text()
    other = tmp_path / f"{chapter}.py"
    other.write_text(source + "\n\n# %%\n" + variant.code.strip() + "\n")
    result = grade_submission(other, sandbox, only=variant.function)
    own = [t for t in result["tests"] if variant.function in t.get("tags", [])]
    assert own, f"no grader is tagged with {variant.function}"
    lost = [f"{t['name']}: {t['output']}" for t in own if t["score"] < t["max_score"]]
    assert not lost, "\n".join(lost)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_graded_function_has_a_known_mistake(chapter):
    from autograder.grade import grader_file
    import importlib.util
    spec = importlib.util.spec_from_file_location("g", grader_file(chapter))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    graded = {f.graded["function"] for f in vars(mod).values() if hasattr(f, "graded")}
    covered = {m.function for m in mistakes(chapter)}
    assert graded <= covered, f"no known-wrong variant for {sorted(graded - covered)}"
