"""Every command of the student page (book/using.md) and of the release's README, run as a student
would: in a fresh clone of a release, with the instructor repository off every path.

How (tests/doc_commands.py has the extraction rule and the session script):
- a one-chapter release (02_attention; `make release` builds all of them with the same code) is
  published into a local bare repository, and git is told to fetch
  https://github.com/attention-course/attention-course from there (`url.<local>.insteadOf`), so
  `git clone` runs as written;
- the page's commands run in order in one bash session (`set -e`), from an empty folder, with an
  environment of the machine's own (PATH without this repository or its .venv, no PYTHONPATH, a new
  HOME; pip keeps its index, its cache and its options such as find-links); `python3` is the
  machine's own, as a student's would be;
- `jupyter lab NB` is run until it serves NB and its kernel runs `import torch, attnkit`, then
  stopped (tests/docs/serve_check.py);
- before each `python -m attnkit check NB`, NB is replaced by the solved notebook (the student's work:
  each check must then exit 0); the Colab cell's `!` command runs in a folder where NB was "uploaded";
- the release README's commands then run in the same clone, in a new session started in its folder
  (the README says "in this folder"; its `python3 -m venv .venv` finds the environment made there).
The first run installs torch and JupyterLab into a new environment (several minutes on the shared
2-core machine); pip's cache makes later runs faster.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import pytest
import yaml

from course.release import README, build_release, publish
from tests.doc_commands import commands, failed_command, session_script

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "02_attention"
PAGE = ROOT / "book" / "using.md"
SERVE = Path(__file__).resolve().parent / "serve_check.py"
URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


def student_env(tmp: Path, remote: Path) -> dict:
    """The machine's environment without this repository: see the module docstring."""
    repo = str(ROOT.resolve())
    keep = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if p and not os.path.realpath(p).startswith(repo) and not p.startswith(sys.prefix)]
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("PIP_", "PYENV", "LANG", "LC_", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                            "no_proxy", "NO_PROXY", "SSL_CERT", "REQUESTS_CA_BUNDLE", "TMPDIR"))}
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env.update(PATH=os.pathsep.join(keep), HOME=str(tmp / "home"), PIP_CACHE_DIR=cache,
               GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0=f"url.{remote}.insteadOf", GIT_CONFIG_VALUE_0=URL,
               GIT_TERMINAL_PROMPT="0", DOC_PY=sys.executable, DOC_SERVE=str(SERVE),
               DOC_SOLVED=str(tmp / "solved"), DOC_COLAB=str(tmp / "colab"))
    (tmp / "home").mkdir()
    return env


def run_session(script: str, cwd: Path, env: dict, name: str) -> str:
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=3000)
    out = done.stdout + done.stderr
    assert done.returncode == 0, (f"{name}: failed at {failed_command(done.stdout)} (exit {done.returncode})\n"
                                  + out[-6000:])
    assert "@@ all commands succeeded" in done.stdout
    print(f"{name}: {time.monotonic() - started:.0f} s")
    return out


def test_the_student_page_and_the_release_readme_work_in_a_fresh_release(tmp_path):
    page, readme = commands(PAGE.read_text()), commands(README)
    assert any(c.text.startswith("git clone ") for c in page), "the page no longer says how to get the exercises"
    assert [c for c in page if "attnkit check" in c.text] and [c for c in readme if "attnkit check" in c.text]

    release = build_release(tmp_path / "release", only=[CHAPTER], log=lambda *a: None)
    remote = tmp_path / "public.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    publish(release, str(remote))
    env = student_env(tmp_path, remote)
    solved = tmp_path / "solved"
    solved.mkdir()
    jupytext.write(jupytext.read(ROOT / "solutions" / f"{CHAPTER}.py"), solved / f"{CHAPTER}.ipynb")

    work = tmp_path / "student"
    work.mkdir()
    out = run_session(session_script(page, solve=True), work, env, "book/using.md")
    clone = work / URL.rsplit("/", 1)[1]
    assert (clone / ".venv").is_dir(), "the page's commands made no .venv in the clone"
    assert out.count("public checks passed") == sum("attnkit check" in c.text for c in page), out[-3000:]
    assert "its kernel ran `import torch, attnkit`" in out

    out = run_session(session_script(readme, solve=True), clone, env, "the release README")
    assert "public checks passed" in out

    # The student's environment holds the release's packages, and nothing of the instructor's side.
    probe = ("import importlib.util as u, attnkit, autograder.harness; "
             "print(attnkit.__file__); print(autograder.harness.__file__); "
             "print([m for m in ('course', 'solutions', 'autograder.grade', 'autograder.graders') if u.find_spec(m)])")
    seen = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert all(line.startswith(str(clone)) for line in seen[:2]), seen
    assert seen[2] == "[]", f"the instructor's modules are importable: {seen[2]}"


def test_the_rules_catch_a_broken_command(tmp_path):
    """The session fails, naming the command, when one fails: the tests above can fail."""
    from tests.doc_commands import Command
    script = session_script([Command("bash", "true", 1), Command("bash", "python3 -m no_such_module_here", 2),
                             Command("bash", "true", 3)])
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and failed_command(done.stdout) == "@@ 2: python3 -m no_such_module_here"
