"""The docs hold: the instructor quickstart's commands run against a toy class, the README is short and
its links lead somewhere, benchmarks/README.md holds the tables benchmarks/tables.py prints, and the
rule that finds commands in a document (tests/doc_commands.py) finds them all.

The student page's and the release README's commands run in `make test-book`
(tests/docs/test_student_commands.py): they install packages into a new environment.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import class02
from tests.batch.toy import CHAPTER as TOY, make_notebook, toy_folders
from tests.doc_commands import Command, commands, failed_command, session_script

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "book" / "instructors" / "quickstart.md"


def test_the_rule_finds_every_command_and_refuses_unlabelled_fences():
    doc = """Text `not run`.

```bash
make setup   # a comment stays
# a comment line is not a command
.venv/bin/python -m autograder grade a \\
    --out b
```

- a list item:
  ```ipython
  !python -m attnkit check 02_attention.ipynb
  x = 1
  ```

````{note}
```sh
echo nested
```
````

```python
print("not run")
```
"""
    assert commands(doc) == [Command("bash", "make setup   # a comment stays", 3),
                             Command("bash", ".venv/bin/python -m autograder grade a --out b", 3),
                             Command("ipython", "python -m attnkit check 02_attention.ipynb", 11),
                             Command("bash", "echo nested", 17)]
    with pytest.raises(ValueError, match="without a language"):
        commands("```\nrm -rf /\n```\n")
    with pytest.raises(ValueError, match="is it run or not"):
        commands("```zsh\nls\n```\n")


def test_the_student_docs_label_every_fence():
    from course.release import README
    for text in ((ROOT / "book" / "using.md").read_text(), README, QUICKSTART.read_text()):
        assert commands(text)


def test_the_instructors_pages_label_every_fence_and_hold_no_placeholder():
    """Every page of the guide: its commands can be found (no unlabelled fence), and no section is
    still to be written."""
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [c["file"] for p in toc["parts"] if p["caption"] == "For instructors" for c in p["chapters"]]
    assert len(pages) >= 10, pages
    for page in pages:
        text = (ROOT / f"{page}.md").read_text()
        assert commands(text), f"{page}: no command"
        for mark in ("To be written", "placeholder:"):
            assert mark not in text, f"{page}: {mark!r} left"


def test_the_instructor_quickstart_grades_a_toy_class_in_five_commands(tmp_path):
    """Every command of book/instructors/quickstart.md, in order, in one session, in a folder that
    looks like the instructor repository (its Makefile, requirements, .venv and exercises linked),
    with the toy chapter (tests/batch/) and chapter 02 as the course's chapters and a toy class in
    submissions/hw2, as the page's text says to put it there."""
    cmds = commands(QUICKSTART.read_text())
    assert len(cmds) == 5, [c.text for c in cmds]  # the page promises five
    work = tmp_path / "course"
    work.mkdir()
    for name in ("Makefile", "requirements.txt", "pyproject.toml", ".venv", "exercises"):
        (work / name).symlink_to(ROOT / name)
    sol, graders = toy_folders(tmp_path / "chapters")
    shutil.copy(ROOT / "solutions" / "02_attention.py", sol)
    shutil.copy(ROOT / "autograder" / "graders" / "test_02_attention.py", graders)
    hw = work / "submissions" / "hw2"
    class02.write(hw / "alice.ipynb", "ok")
    class02.write(hw / "bob.ipynb", "mistake")
    class02.write(hw / "carol" / "anything.ipynb", "ok")
    make_notebook(hw / "dave.ipynb", "garbage")
    make_notebook(hw / "erin.ipynb", "ok")  # another chapter's notebook (the toy's), handed in for 02
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(AUTOGRADER_SOLUTIONS=str(sol), AUTOGRADER_GRADERS=str(graders), PYTHONPATH=str(ROOT))  # this checkout's code
    done = subprocess.run(["bash", "-c", session_script(cmds)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"failed at {failed_command(done.stdout)}\n{out[-5000:]}"
    tried = json.loads((work / "try" / "02_attention" / "results.json").read_text())
    assert tried["score"] == 0 < tried["max_score"] and all("Hint:" in t["output"] for t in tried["tests"])
    rows = {r["submission"]: (float(r["score"]), r["max"], r["status"])
            for r in csv.DictReader(open(work / "grades" / "hw2" / "grades.csv"))}
    top = tried["max_score"]
    # an error keeps the chapter's total (the assignment's); bob's known mistake costs dot_score's points
    assert rows["alice"] == rows["carol__anything"] == (top, f"{top:g}", "graded"), rows
    assert 0 < rows["bob"][0] < top and rows["bob"][2] == "graded", rows
    assert rows["dave"] == rows["erin"] == (0, f"{top:g}", "error"), rows
    assert f"notebook of chapter {TOY}, not of 02_attention" in (work / "grades" / "hw2" / "erin" /
                                                                  "results.json").read_text()
    assert f"alice,02_attention,{top:g},{top:g},graded" in out  # step 4 showed the table
    lms = {r["student_id"]: float(r["score"]) for r in csv.DictReader(open(work / "grades" / "hw2" / "lms.csv"))}
    assert lms == {"alice": top, "bob": rows["bob"][0], "carol": top, "dave": 0, "erin": 0}, lms
    assert "grading as 02_attention, the chapter kept in grades/hw2/assignment.json" in out  # step 5
    assert "0 graded now, 5 already done" in out  # step 5 regraded nothing unchanged


README = ROOT / "README.md"


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
    for heading in ("## The two commands", "## Where to go next", "## Layout", "## Dependencies"):
        assert heading in text
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    instructors = [c["file"] for p in toc["parts"] if p["caption"] == "For instructors" for c in p["chapters"]]
    assert instructors and all(f"({page}.md)" in text for page in instructors), \
        "every page of the instructors' guide is linked from the README"


def test_every_dependency_pin_is_explained_in_the_readme():
    text = README.read_text()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name = line.split("#")[0].split("==")[0].strip()
        if name:
            assert f"`{name}" in text, f"{name} is pinned in requirements.txt but the README does not say why"


def test_benchmarks_readme_holds_the_tables_the_script_prints():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
