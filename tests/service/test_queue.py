"""The queue in the database: a claim is atomic, an expired lease is claimed again, a result is written
once per round, "regrade all" starts a new round (SQLite and PostgreSQL)."""
from __future__ import annotations

import json
import threading
import time

from autograder.service import queue
from autograder.service.store import Result, open_db
from sqlalchemy import func, select

RESULT = {"score": 1.0, "max_score": 1.0, "output": "", "tests": [], "extra_data": {"status": "graded"}}


def students(db, *ids):
    from autograder.service import tokens
    tokens.issue(db, [(i, i) for i in ids])


def test_two_graders_never_hold_the_same_submission(db_url):
    db = open_db(db_url)
    students(db, "s")
    made = {queue.accept(db, "s", "98_batch_toy", "nb.ipynb", b"{}", "0") for _ in range(30)}
    claimed: list[int] = []

    def grader(name):
        while (c := queue.claim(db, name, 60)) is not None:
            claimed.append(c.id)

    threads = [threading.Thread(target=grader, args=(f"g{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(made)  # each once: none twice, none left


def test_an_expired_lease_is_claimed_again_and_a_round_has_one_result(db_url):
    db = open_db(db_url)
    students(db, "s")
    sub = queue.accept(db, "s", "98_batch_toy", "nb.ipynb", b"{}", "0")
    first = queue.claim(db, "dead", 0.5)
    assert first.id == sub and queue.claim(db, "other", 60) is None  # held
    time.sleep(0.8)
    second = queue.claim(db, "other", 60)
    assert second.id == sub and second.tries == 2
    assert queue.finish(db, second, RESULT, "other") is True
    assert queue.finish(db, first, {**RESULT, "score": 0.0}, "dead") is False  # the late one is not stored
    with db() as s:
        rows = s.scalars(select(Result).where(Result.submission_id == sub)).all()
    assert [(r.round, r.score) for r in rows] == [(1, 1.0)]


def test_regrade_all_grades_every_attempt_again_in_a_new_round(db_url):
    db = open_db(db_url)
    students(db, "s")
    subs = [queue.accept(db, "s", "98_batch_toy", "nb.ipynb", b"{}", "0") for _ in range(2)]
    for _ in subs:
        queue.finish(db, queue.claim(db, "g", 60), RESULT, "g")
    newer = queue.accept(db, "s", "98_batch_toy", "nb.ipynb", b"{}", "0")
    assert queue.regrade(db) == 2
    assert queue.claim(db, "g", 60).id == newer  # a new upload goes before the regrades
    again = queue.claim(db, "g", 60)
    assert again.round == 2
    queue.finish(db, again, {**RESULT, "score": 0.5}, "g")
    with db() as s:
        assert s.scalar(select(func.count()).select_from(Result)) == 3
        assert json.loads(queue.latest_result(s, again.id).result)["score"] == 0.5
