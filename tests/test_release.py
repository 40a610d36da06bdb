"""The student release (`make release`): leak-free, complete without the repository, public checks that
pass for the solution and fail with feedback for the stubs and for known mistakes."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from autograder.harness import wire
from autograder.harness.replay import load_checks
from course.exercises import read_solution
from course.leaks import solution_regions
from course.release import build_release, grader_lines, load_mistakes, record, reference_namespace, release_leaks

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "02_attention"  # the release under test holds one chapter (`make release` builds them all)

# Runs a command of the release with the instructor's repository off the import path: the editable
# install's finder (which maps attnkit, autograder and course to this repository) removed, then
# `python -m attnkit ...` from the release folder.
BOOT = r"""
import os, runpy, sys
repo, release = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path_importer_cache.clear()
venv = os.path.realpath(sys.prefix)  # the interpreter's own packages (torch), wherever the venv is
sys.path[:] = [release] + [p for p in sys.path if p and (not os.path.realpath(p).startswith(repo)
                                                         or os.path.realpath(p).startswith(venv))]
for name in ("course", "solutions", "tests", "autograder.grade", "autograder.graders"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"the repository leaked onto the import path: {name} imports")
import attnkit, autograder.harness
assert attnkit.__file__.startswith(release) and autograder.harness.__file__.startswith(release)
sys.argv = ["attnkit", *sys.argv[3:]]
runpy.run_module("attnkit", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return build_release(tmp_path_factory.mktemp("release") / "release", only=[CHAPTER], log=lambda *a: None)


def check(release: Path, notebook: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_CHECKS")}
    return subprocess.run([sys.executable, "-c", BOOT, str(ROOT), str(release), "check", str(notebook),
                           "--out", str(out)], cwd=release, env=env, capture_output=True, text=True, timeout=600)


def test_the_release_holds_what_a_student_needs(release):
    names = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()}
    assert {"README.md", "LICENSE", "requirements.txt", "pyproject.toml", f"exercises/{CHAPTER}.ipynb",
            "attnkit/__init__.py", "attnkit/check.py", "attnkit/__main__.py", f"attnkit/checks/{CHAPTER}.pt",
            "autograder/__init__.py", "autograder/harness/sandbox.py", "autograder/harness/replay.py"} <= names
    harness = {p.name for p in (ROOT / "autograder" / "harness").glob("*.py")}
    assert harness == {p.name for p in (release / "autograder" / "harness").glob("*.py")}  # the whole package
    assert "torch==" in (release / "requirements.txt").read_text()
    assert "does not mean passing the hidden graders" in (release / "README.md").read_text()


def test_the_release_is_leak_free(release):
    assert release_leaks(release) == []


def test_the_leak_checker_finds_solution_lines_grader_lines_and_instructor_files(release, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    grader_line = sorted(ln for ln in grader_lines() if "expect_close(" in ln)[0]
    (copy / "notes.md").write_text(f"a leaked grader line:\n    {grader_line}\n")
    solution = (ROOT / "solutions" / f"{CHAPTER}.py").read_text()
    (copy / "attnkit" / "extra.py").write_text(solution)
    (copy / "autograder" / "graders").mkdir()
    (copy / "autograder" / "graders" / "x.txt").write_text("")
    beam = next(c for c in read_solution("01_seq2seq").cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "beam_search")
    copied = re.sub(r"\blive\b", "alive", "\n".join(solution_regions(beam.source)))  # renamed: no verbatim line
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"def helper(step_fn):\n{copied}")])
    nbformat.write(notebook, copy / "exercises" / "given.ipynb")
    found = release_leaks(copy)
    kinds = {what.split(":")[0] for _, what in found}
    assert {"grader line", "solution line", "instructor-only file"} <= kinds, found[:5]
    assert any(p.name == "given.ipynb" and what.startswith("near-copy of the solution of 01_seq2seq: beam_search")
               for p, what in found), found[:5]


def test_the_harness_imports_nothing_of_the_instructors_side():
    code = (
        "import importlib, importlib.abc, pkgutil, sys\n"
        "class Guard(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.startswith(('autograder.', 'course', 'solutions', 'tests')) and \\\n"
        "                not name.startswith('autograder.harness'):\n"
        "            raise ImportError('the harness imported ' + name)\n"
        "sys.meta_path.insert(0, Guard())\n"
        "import autograder.harness as h\n"
        "for m in pkgutil.iter_modules(h.__path__):\n"
        "    importlib.import_module('autograder.harness.' + m.name)\n"
        "import attnkit.check\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_public_checks_load_without_pickle_and_cover_every_graded_function(release):
    data = load_checks(release / "attnkit" / "checks" / f"{CHAPTER}.pt")  # torch.load(weights_only=True)
    assert data["chapter"] == CHAPTER
    graded = set(torch.load(release / "attnkit" / "checks" / f"{CHAPTER}.pt", weights_only=True)["functions"])
    assert graded and {c["function"] for c in data["checks"]} == graded
    assert any(p["mistakes"] for c in data["checks"] for p in c["parts"])


def test_public_inputs_are_not_the_hidden_graders(release):
    data = load_checks(release / "attnkit" / "checks" / f"{CHAPTER}.pt")
    hidden, _ = record(CHAPTER, reference_namespace(CHAPTER), 0)
    secret = {hashlib.sha256(r["data"]).hexdigest() for r in hidden}
    public = [hashlib.sha256(wire.encode(p["request"])).hexdigest() for c in data["checks"] for p in c["parts"]]
    assert public and not secret & set(public)


def test_public_checks_pass_for_the_solution_from_the_release_alone(release, tmp_path):
    done = check(release, ROOT / "solutions" / f"{CHAPTER}.py", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["score"] == result["max_score"] > 0
    assert "public checks passed" in done.stdout and "function" in done.stdout


def test_public_checks_fail_with_hints_for_the_stubs(release, tmp_path):
    done = check(release, release / "exercises" / f"{CHAPTER}.ipynb", tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["score"] == 0 and result["tests"]
    assert all("Hint:" in t["output"] and "not implemented yet" in t["output"] for t in result["tests"])
    assert "FAILED" in done.stdout and "Hint:" in done.stdout


def test_public_checks_name_a_known_mistake(release, tmp_path):
    mistake = next(m for m in load_mistakes(CHAPTER) if m.function == "additive_score" and m.name == "no tanh")
    notebook = tmp_path / f"{CHAPTER}.py"
    notebook.write_text((ROOT / "solutions" / f"{CHAPTER}.py").read_text() + "\n# %%\n" + mistake.code)
    done = check(release, notebook, tmp_path)
    assert done.returncode == 1
    result = json.loads((tmp_path / "results.json").read_text())
    failed = {t["tags"][0] for t in result["tests"] if t["score"] < t["max_score"]}
    assert "additive_score" in failed  # and the functions that call it (additive_attention)
    assert "looks like the result of a known mistake: no tanh" in done.stdout


def test_publish_pushes_the_release_alone_and_keeps_the_remotes_history(release, tmp_path):
    from course.release import publish
    remote = tmp_path / "public.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    first = publish(release, str(remote))
    (release / "NOTE.md").write_text("second release\n")
    try:
        second = publish(release, str(remote))
    finally:
        (release / "NOTE.md").unlink()
    git = lambda *a: subprocess.run(["git", f"--git-dir={remote}", *a], capture_output=True, text=True,  # noqa: E731
                                    check=True).stdout
    assert git("rev-list", "main").split() == [second, first]
    files = set(git("ls-tree", "-r", "--name-only", "main").split())
    assert {"README.md", f"exercises/{CHAPTER}.ipynb", "NOTE.md"} <= files
    assert not any(f.startswith(("solutions/", "tests/", "autograder/graders/")) for f in files)



def small_release(tmp_path: Path, name: str = "release") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "README.md").write_text("the exercises\n")
    return folder


def test_publishing_to_a_fresh_bare_repository_gives_students_a_full_clone(tmp_path):
    # `git init --bare` names master as HEAD (git's default); the release goes to main
    from course.release import publish
    remote = tmp_path / "public.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "master", str(remote)], check=True)
    publish(small_release(tmp_path), str(remote))
    subprocess.run(["git", "clone", "-q", str(remote), str(tmp_path / "clone")], check=True, capture_output=True)
    assert (tmp_path / "clone" / "README.md").read_text() == "the exercises\n"
    from course.release import students_clone
    assert students_clone(str(remote), "main") == f"git clone {remote}"


def test_a_remote_whose_head_is_another_branch_is_cloned_with_the_branch_named(tmp_path):
    from course.release import publish, students_clone
    remote = tmp_path / "public.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "master", str(remote)], check=True)
    publish(small_release(tmp_path, "old"), str(remote), branch="master")  # the remote's own master: left alone
    publish(small_release(tmp_path), str(remote))
    assert students_clone(str(remote), "main") == f"git clone -b main {remote}"
    head = subprocess.run(["git", f"--git-dir={remote}", "symbolic-ref", "HEAD"], capture_output=True, text=True)
    assert head.stdout.strip() == "refs/heads/master"


def test_the_release_pins_ipywidgets_for_the_training_cells_progress_bars():
    # attnkit.train's tqdm.auto draws a widget in Jupyter; without ipywidgets it warns in every training cell
    from course.release import requirements
    pins = dict(line.split("==") for line in requirements().splitlines() if "==" in line and not line.startswith("#"))
    course = dict(re.match(r"([\w.-]+)==(\S+)", line).groups() for line in (ROOT / "requirements.txt").read_text()
                  .splitlines() if re.match(r"[\w.-]+==", line))
    assert "ipywidgets" in pins and pins["ipywidgets"] == course["ipywidgets"]
    assert pins["tqdm"] == course["tqdm"]
