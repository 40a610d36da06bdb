"""The Gradescope autograder zip: what it holds, and its run_autograder run in a temporary /autograder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.cli import main
from autograder.exports.gradescope import check_zip, export, find_notebook
from autograder.version import grader_version
from tests.batch.toy import CHAPTER, make_notebook, toy_chapter  # noqa: F401 - fixture


@pytest.fixture
def exported(toy_chapter, tmp_path) -> Path:
    return export(CHAPTER, tmp_path / "autograder.zip", call_timeout=5.0)


def run_autograder(zip_path: Path, root: Path, submission: dict[str, str]) -> dict:
    """Unzip into root/source as Gradescope does, add the submission, run run_autograder, read results.json."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    for name, variant in submission.items():
        make_notebook(root / "submission" / name, variant)
    (root / "submission").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, cwd="/", timeout=300,
                   capture_output=True, check=True)
    return json.loads((root / "results" / "results.json").read_text())


def test_the_zip_holds_the_scripts_the_hidden_tests_and_the_reference(exported):
    with zipfile.ZipFile(exported) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        config = json.loads(zf.read("gradescope.json"))
        requirements = zf.read("requirements.txt").decode()
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder/grade.py", "autograder/harness/sandbox.py",
            f"autograder/graders/test_{CHAPTER}.py", "autograder/graders/conftest.py", "autograder/graders/pytest.ini",
            f"solutions/{CHAPTER}.py", "attnkit/__init__.py"} <= names
    assert not any(n.startswith(("tests/", "exercises/")) or "__pycache__" in n for n in names)
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert config == {"chapter": CHAPTER, "call_timeout": 5.0, "grader_version": grader_version(CHAPTER),
                      "visibility": {"result": "visible", "hidden_tests": "after_due_date", "public_checks": "visible"}}
    assert "course_secret" not in names and "public_checks.pt" not in names  # only when asked for
    assert "torch==" in requirements and "pytest==" in requirements
    for script in ("setup.sh", "run_autograder"):
        with zipfile.ZipFile(exported) as zf:
            text = zf.read(script).decode()
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_zip_older_than_the_graders_is_detected(exported, toy_chapter, capsys):
    assert check_zip(exported)[0] and main(["check-zip", str(exported)]) == 0
    grader = toy_chapter / "graders" / f"test_{CHAPTER}.py"
    grader.write_text(grader.read_text().replace('@graded("scale", points=1', '@graded("scale", points=10'))
    current, message = check_zip(exported)
    assert not current and "STALE" in message and f"export-gradescope {CHAPTER}" in message
    capsys.readouterr()
    assert main(["check-zip", str(exported)]) == 1 and "STALE" in capsys.readouterr().err


def test_an_unknown_chapter_is_refused(toy_chapter, tmp_path):
    with pytest.raises(SystemExit, match="no chapter"):
        export("42_nothing", tmp_path / "a.zip")
    assert not (tmp_path / "a.zip").exists()


def test_find_notebook_prefers_the_chapters_name(tmp_path):
    for name in ("notes.ipynb", f"{CHAPTER}.ipynb"):
        (tmp_path / name).write_text("{}")
    assert find_notebook(tmp_path, CHAPTER) == (tmp_path / f"{CHAPTER}.ipynb", "")
    (tmp_path / f"{CHAPTER}.ipynb").unlink()
    (tmp_path / "other.ipynb").write_text("{}")
    assert find_notebook(tmp_path, CHAPTER)[0] is None and "several" in find_notebook(tmp_path, CHAPTER)[1]


def test_run_autograder_grades_as_an_unprivileged_user_and_writes_results(exported, tmp_path):
    result = run_autograder(exported, tmp_path / "autograder", {f"{CHAPTER}.ipynb": "uid"})
    assert (result["score"], result["max_score"]) == (4.0, 4.0)
    printed = {line.split()[-1] for line in result["output"].splitlines() if "HOST_UID" in line}
    assert printed and "0" not in printed  # the student's code never ran as root on the host
    if os.geteuid() == 0:
        assert printed == {str(result["extra_data"]["student_uid"])}
    assert oct((tmp_path / "autograder" / "source").stat().st_mode & 0o777) == "0o700"  # hidden from students
    assert result["extra_data"]["grader_version"] == grader_version(CHAPTER)  # the zip holds what the hash covers


def test_no_notebook_still_gives_gradescope_a_result(exported, tmp_path):
    from autograder.exports.gradescope import run
    with zipfile.ZipFile(exported) as zf:
        zf.extract("gradescope.json", tmp_path / "source")
    (tmp_path / "submission").mkdir()
    assert run(tmp_path) == 0
    result = json.loads((tmp_path / "results" / "results.json").read_text())
    assert result["score"] == 0 and "no notebook" in result["output"]
