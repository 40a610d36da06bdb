"""kill -9 of the server, then of a grading worker, during a burst of uploads: every acknowledged upload
is in the database, and every accepted submission gets exactly one result, graded right (SQLite and
PostgreSQL). A real service in a subprocess grades the toy chapter."""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import func, select

from autograder.service import tokens
from autograder.service.store import Result, Submission, open_db
from tests.batch.toy import CHAPTER, make_notebook
from tests.service.live import Live, submit

BURST = 24
WARM = 4  # uploads before the burst, so that the workers are grading when the kills come


def test_kill_9_of_server_and_worker_loses_nothing_and_grades_nothing_twice(toy_chapter, db_url, tmp_path):
    db = open_db(db_url)
    issued = {sid: tok for sid, _, tok in tokens.issue(db, [(f"s{i:02d}", "") for i in range(BURST)])}
    notebooks = {v: make_notebook(tmp_path / v / f"{CHAPTER}.ipynb", v) for v in ("ok", "wrong")}
    live = Live(tmp_path / "svc", db_url, [CHAPTER], "--graders", "2", "--lease", "3", "--rate", "100/60")
    (tmp_path / "svc").mkdir()
    acked: dict[int, str] = {}  # submission id -> variant
    failed: list[str] = []

    def hand_in(i: int) -> None:
        variant = "ok" if i % 2 == 0 else "wrong"
        try:
            r = submit(live.url, issued[f"s{i:02d}"], notebooks[variant], CHAPTER, timeout=20)
        except httpx.HTTPError:
            failed.append(f"s{i:02d}")
            return
        if r.status_code == 201:
            acked[r.json()["id"]] = variant
        else:
            failed.append(f"s{i:02d}")

    def grading_now(by_pid: int | None = None) -> bool:
        query = select(func.count()).select_from(Submission).where(Submission.status == "grading")
        if by_pid is not None:  # claimed by this server process's graders (not an expiring older claim)
            query = query.where(Submission.worker.endswith(f":{by_pid}"))
        with db() as s:
            return bool(s.scalar(query))

    live.start()
    try:
        for i in range(WARM):  # the workers warm up on a first wave
            hand_in(i)
        deadline = time.monotonic() + 400
        while not grading_now() and time.monotonic() < deadline:
            time.sleep(0.05)
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(hand_in, i) for i in range(WARM, BURST)]
            while (len(acked) < BURST // 2 or not grading_now()) and time.monotonic() < deadline:
                time.sleep(0.02)
            live.kill()  # mid-burst and mid-grading: uploads in flight fail, some graded, some queued
            for f in futures:
                f.result()
        assert failed, "the kill came too late to test anything"
        live.start()
        for sid in failed:  # the students whose upload failed hand in again
            hand_in(int(sid[1:]))
        while not (grading_now(live.proc.pid) and (pids := live.workers())) and time.monotonic() < deadline:
            time.sleep(0.02)
        for pid in pids:  # the grading workers, while they grade
            os.kill(pid, signal.SIGKILL)
        while time.monotonic() < deadline:
            with db() as s:
                if not s.scalar(select(func.count()).select_from(Submission).where(Submission.status != "done")):
                    break
            time.sleep(0.5)
    finally:
        live.stop()
    with db() as s:
        subs = {sub.id: sub for sub in s.scalars(select(Submission))}
        per = dict(s.execute(select(Result.submission_id, func.count()).group_by(Result.submission_id)).all())
        scores = dict(s.execute(select(Result.submission_id, Result.score)).all())
    assert set(acked) <= set(subs), "an acknowledged upload is not in the database"
    assert len(acked) == BURST, f"{BURST - len(acked)} students never got an acknowledgement"
    assert all(sub.status == "done" for sub in subs.values()), f"the queue did not drain: {[(i, sub.status) for i, sub in subs.items() if sub.status != 'done']}"
    assert per == {i: 1 for i in subs}, f"a submission has no result, or more than one: {per}"
    assert sum(sub.tries - 1 for sub in subs.values()) >= 2, f"no grading was cut off by the kills: {[(i, sub.tries) for i, sub in subs.items()]}"
    assert {i: scores[i] for i in acked} == {i: 4.0 if v == "ok" else 1.0 for i, v in acked.items()}
