"""A real service grades the toy chapter: a student hands in a notebook with a known mistake (with
`python -m attnkit submit`, the release's command), reads the named mistake and the hint but never the
hidden test code, fixes it; both attempts are kept with their late penalty; the instructor's exports
and "regrade all" work on them (SQLite)."""
from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import httpx

from autograder.service import tokens
from autograder.service.store import open_db
from tests.batch.toy import CHAPTER, make_notebook
from tests.service.live import ROOT, Live, wait_done


def hand_in(live: Live, token_file, notebook) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnkit", "submit", str(notebook), "--url", live.url,
                           "--token-file", str(token_file), "--wait", "120"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def hidden_code_lines() -> list[str]:
    """The toy grader's code lines (not its docstrings, which name the tests on purpose)."""
    text = (ROOT / "tests" / "batch" / f"grader_{CHAPTER}.py").read_text()
    return [ln.strip() for ln in text.splitlines() if len(ln.strip()) > 20 and not ln.strip().startswith(('"""', "#"))]


def test_a_student_hands_in_reads_the_mistake_fixes_it_and_the_instructor_sees_both(toy_chapter, tmp_path):
    folder, url = tmp_path / "svc", f"sqlite:///{tmp_path / 'svc' / 'service.sqlite'}"
    folder.mkdir()
    db = open_db(url)
    token = tokens.issue(db, [("alice", "Alice A")])[0][2]
    teacher = {"Authorization": f"Bearer {tokens.issue_instructor(db)}"}
    (tmp_path / "token").write_text(token)
    due = (datetime.now(timezone.utc) - timedelta(minutes=30)).isoformat(timespec="seconds")
    subprocess.run([sys.executable, "-m", "autograder", "service", "deadline", CHAPTER, "--dir", str(folder),
                    "--due", due, "--late-policy", "per-hour:10"], cwd=ROOT, check=True, capture_output=True)
    live = Live(folder, url, [CHAPTER], "--graders", "1").start()
    try:
        wrong = hand_in(live, tmp_path / "token", make_notebook(tmp_path / "w" / f"{CHAPTER}.ipynb", "wrong"))
        assert wrong.returncode == 1, wrong.stderr
        # the named mistake leads the feedback, once for the function, in place of the test's hint
        assert "What went wrong, by function" in wrong.stdout and "known mistake: a - b" in wrong.stdout
        assert "Penalty: 0.4 points, so the score is 0.6 / 4" in wrong.stdout  # 1 started hour late: 10% of 4
        assert not [ln for ln in hidden_code_lines() if ln in wrong.stdout], "hidden test code in the feedback"
        fixed = hand_in(live, tmp_path / "token", make_notebook(tmp_path / "f" / f"{CHAPTER}.ipynb", "ok"))
        assert "so the score is 3.6 / 4 (before the penalty: 4)" in fixed.stdout, fixed.stdout

        get = lambda path: httpx.get(live.url + path, headers=teacher, timeout=120, trust_env=False)  # noqa: E731
        history = get("/instructor/students/alice").text
        assert history.count("/submissions/") == 2 and "0.6 / 4" in history and "3.6 / 4" in history
        assert list(csv.reader(io.StringIO(get(f"/instructor/{CHAPTER}/lms.csv").text))) == [
            ["student_id", "score"], ["alice", "3.6"]]  # the last attempt, late penalty applied
        grades = get(f"/instructor/{CHAPTER}/grades.csv").text
        assert "alice,98_batch_toy,3.6,4,graded,4,0.4" in grades
        (tmp_path / "gradebook.db").write_bytes(get(f"/instructor/{CHAPTER}/gradebook.db").content)
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
            assert gb.find_submission(CHAPTER, "alice").score == 4  # nbgrader's own score: before the penalty
        assert get(f"/instructor/{CHAPTER}/report").status_code == 200
        assert get(f"/instructor/{CHAPTER}/similarity").status_code == 200
        r = httpx.post(live.url + "/instructor/regrade", headers=teacher, trust_env=False)
        assert r.json() == {"queued": 2}
        for sub_id, score in ((1, "0.6 / 4"), (2, "3.6 / 4")):  # the same grades, in a second round
            done = wait_done(live.url, teacher["Authorization"][7:], sub_id)
            assert done["score"] == score
        assert get("/instructor/students/alice").text.count("<td>2</td>") == 2  # two gradings each
    finally:
        live.stop()
