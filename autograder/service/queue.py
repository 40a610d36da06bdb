"""The grading queue, kept in the database: claims with leases, results written once.

- `accept` commits a submission (status "queued") before the upload is acknowledged.
- `claim` takes the oldest queued submission, or one whose lease has expired (its grader died), with
  a compare-and-set UPDATE: two graders never hold the same submission, on SQLite or PostgreSQL.
- The grader renews its lease while it grades (`renew`); a grader killed with `kill -9` stops renewing,
  and its submission is claimed again once the lease expires.
- `finish` stores the result and marks the submission done in one transaction. The results table is
  unique on (submission, round), so a second grader that finishes the same round late writes nothing:
  every accepted submission gets exactly one result per round.
- New uploads go before regrades ("regrade all" queues every submission again, in a new round).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from autograder.service.store import Result, Submission, aware, now

ACTIVE = ("queued", "grading")
MAX_TRIES = 3  # a submission that killed its grader this often gets a "crashed" result


@dataclass(frozen=True)
class Claim:
    """A submission a grader holds: what it needs to grade it, without the database."""

    id: int
    round: int
    student_id: str
    chapter: str
    filename: str
    notebook: bytes
    sha256: str
    submitted_at: datetime
    tries: int


def accept(db: sessionmaker, student_id: str, chapter: str, filename: str, notebook: bytes, sha256: str,
           when: datetime | None = None) -> int:
    """Store a submission (committed when this returns); its id."""
    with db.begin() as s:
        sub = Submission(student_id=student_id, chapter=chapter, filename=filename, notebook=notebook,
                         sha256=sha256, submitted_at=when or now(), status="queued", round=1, worker="", tries=0)
        s.add(sub)
        s.flush()
        return sub.id


def _claimable(t: datetime):
    return or_(Submission.status == "queued", and_(Submission.status == "grading", Submission.lease_until < t))


def claim(db: sessionmaker, worker: str, lease: float) -> Claim | None:
    """The next submission to grade, now held by `worker` for `lease` seconds; None if there is none."""
    for _ in range(20):  # another grader may win a candidate: try the next one
        with db.begin() as s:
            t = now()
            query = (select(Submission.id).where(_claimable(t))
                     .order_by(Submission.round > 1, Submission.id).limit(1))
            if s.bind.dialect.name == "postgresql":
                query = query.with_for_update(skip_locked=True)
            sub_id = s.scalar(query)
            if sub_id is None:
                return None
            won = s.execute(update(Submission).where(Submission.id == sub_id, _claimable(t))
                            .values(status="grading", lease_until=t + timedelta(seconds=lease), worker=worker,
                                    tries=Submission.tries + 1)).rowcount
            if won != 1:
                continue
            sub = s.get(Submission, sub_id)
            return Claim(sub.id, sub.round, sub.student_id, sub.chapter, sub.filename, sub.notebook, sub.sha256,
                         aware(sub.submitted_at), sub.tries)
    return None


def renew(db: sessionmaker, worker: str, ids: list[int], lease: float) -> None:
    """Extend `worker`'s leases on the submissions it is grading."""
    if not ids:
        return
    with db.begin() as s:
        s.execute(update(Submission).where(Submission.id.in_(ids), Submission.worker == worker,
                                           Submission.status == "grading")
                  .values(lease_until=now() + timedelta(seconds=lease)))


def release(db: sessionmaker, claim: Claim, worker: str) -> None:
    """Give a claimed submission back to the queue (its grader died; it is graded again)."""
    with db.begin() as s:
        s.execute(update(Submission).where(Submission.id == claim.id, Submission.worker == worker,
                                           Submission.status == "grading", Submission.round == claim.round)
                  .values(status="queued", lease_until=None))


def finish(db: sessionmaker, claim: Claim, result: dict, worker: str) -> bool:
    """Store `claim`'s result and mark it done; False if this round already had a result (kept)."""
    row = Result(submission_id=claim.id, round=claim.round, status=result["extra_data"].get("status", "?"),
                 score=float(result["score"]), max_score=float(result["max_score"]), result=json.dumps(result),
                 graded_at=now(), worker=worker)
    try:
        with db.begin() as s:
            s.add(row)
            s.flush()
            _mark_done(s, claim)
        return True
    except IntegrityError:
        with db.begin() as s:
            _mark_done(s, claim)
        return False


def _mark_done(s, claim: Claim) -> None:
    s.execute(update(Submission).where(Submission.id == claim.id, Submission.round == claim.round)
              .values(status="done", lease_until=None))


def regrade(db: sessionmaker, chapter: str | None = None) -> int:
    """Queue every submission (of `chapter`) again, in a new round; how many."""
    with db.begin() as s:
        query = update(Submission).where(Submission.status == "done")
        if chapter:
            query = query.where(Submission.chapter == chapter)
        return s.execute(query.values(status="queued", round=Submission.round + 1, lease_until=None,
                                      tries=0)).rowcount


def place(s, sub: Submission) -> int:
    """How many submissions are graded before this one (0: it is being graded, or next), in session `s`."""
    if sub.status not in ACTIVE:
        return 0
    mine_is_regrade = sub.round > 1
    same_class = (Submission.round > 1) if mine_is_regrade else (Submission.round == 1)
    before = s.scalar(select(func.count()).select_from(Submission).where(
        Submission.status == "queued", same_class, Submission.id < sub.id))
    if mine_is_regrade:
        before += s.scalar(select(func.count()).select_from(Submission).where(
            Submission.status == "queued", Submission.round == 1))
    return int(before or 0)


def latest_result(s, sub_id: int) -> Result | None:
    """The newest round's result of a submission."""
    return s.scalar(select(Result).where(Result.submission_id == sub_id).order_by(Result.round.desc()).limit(1))


def pending(db: sessionmaker) -> int:
    with db() as s:
        return int(s.scalar(select(func.count()).select_from(Submission).where(Submission.status.in_(ACTIVE))))
