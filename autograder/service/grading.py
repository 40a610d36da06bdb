"""The service's graders: the batch engine's warm workers, fed from the database queue.

Each grader (`Grader.run`, a thread of the server or of `python -m autograder serve --graders-only`)
keeps N trusted workers warm (`autograder.batch.worker`: torch and the graders imported once, one
`Sandbox` each, a fresh sandboxed student process per submission) and hands each a claimed
submission. It renews its leases while they grade. A worker that dies gives its submission back to
the queue (graded again by a fresh worker; after `queue.MAX_TRIES`, a "crashed" result); a worker
that overruns the submission time is killed and the submission scores 0 (status "timeout"), as in a
batch. A result gets the chapter's late penalty (`autograder.late`, the deadline of
`autograder.batch.deadlines` in SERVICE/<chapter>/deadline.json) before it is stored.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from pathlib import Path

from autograder import late
from autograder.batch import Settings, Worker, start_worker
from autograder.batch import deadlines
from autograder.batch.io import Job, failure_result, stamp
from autograder.service import queue
from autograder.service.queue import Claim

SOURCE = "upload time (submission service)"


def notebook_path(folder: Path, claim: Claim) -> Path:
    """Where a claimed notebook is written for its worker: SERVICE/submissions/<id>/<chapter>.ipynb."""
    return Path(folder) / "submissions" / str(claim.id) / f"{claim.chapter}.ipynb"


def job_of(folder: Path, claim: Claim) -> Job:
    """The batch job of a claim: named <student>/<id>, graded as the chapter it was handed in for."""
    path = notebook_path(folder, claim)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(claim.notebook)
        os.replace(tmp, path)
    return Job(f"{claim.student_id}/{claim.id}", path, claim.student_id, claim.chapter, claim.chapter)


def settle(folder: Path, claim: Claim, job: Job, result: dict) -> dict:
    """The result as stored: the batch's bookkeeping, the attempt, and the chapter's late penalty."""
    result = stamp(result, job, claim.sha256)
    result["extra_data"].update(attempt=claim.id, round=claim.round, submitted_at=claim.submitted_at.isoformat())
    deadline = deadlines.load(Path(folder) / claim.chapter)
    if deadline is not None and result["extra_data"].get("status") != "crashed":
        due, extension = deadline.due_for(job)
        late.penalise(result, late.Lateness(due, claim.submitted_at, SOURCE, extension), deadline.policy)
    return result


class Grader:
    """Grades queued submissions with `settings.jobs` warm workers until `stop` is set."""

    def __init__(self, db, folder: Path, settings: Settings, lease: float = 60.0, poll: float = 0.2) -> None:
        self.db, self.folder, self.settings, self.lease, self.poll = db, Path(folder), settings, lease, poll
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.workers: list[Worker] = []
        self.held: dict[int, Claim] = {}  # id(worker) -> its claim
        self.renewed = 0.0
        self.stop = threading.Event()
        self.graded = 0

    def run(self) -> None:
        self.workers = [start_worker(self.settings) for _ in range(self.settings.jobs)]
        try:
            while not self.stop.is_set():
                try:
                    self._assign()
                    self._collect()
                    self._enforce_deadlines()
                    self._renew()
                except Exception:  # noqa: BLE001 - a database hiccup must not stop grading for good
                    traceback.print_exc()
                    time.sleep(1.0)  # what it held is claimed again when its lease expires
        finally:
            for w in self.workers:
                if self.held.pop(id(w), None) is None and w.ready:
                    w.tell_to_stop()
            for w in self.workers:
                w.stop(force=w.job is not None or not w.ready)

    # -------------------------------------------------------- handing out
    def _assign(self) -> None:
        for w in self.workers:
            if not (w.ready and w.job is None):
                continue
            c = queue.claim(self.db, self.name, self.lease)
            if c is None:
                return
            job = job_of(self.folder, c)
            if c.tries > queue.MAX_TRIES:
                self._store(c, job, failure_result(
                    job, c.chapter, "crashed", f"Grading this submission stopped the grading process "
                    f"{queue.MAX_TRIES} times, so it was given up; the instructor can regrade it."))
                continue
            self.held[id(w)] = c
            w.give(job, c.sha256, self.settings.submission_timeout + self.settings.kill_after)

    def _collect(self) -> None:
        conns = [w.conn for w in self.workers]
        ready = wait(conns, self.poll) if conns else []
        if not conns:
            time.sleep(self.poll)
        for w in list(self.workers):
            if w.conn not in ready:
                continue
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):
                self._died(w)
                continue
            if msg[0] == "ready":
                w.ready = True
            elif msg[0] == "failed":
                print(f"grader: a worker's sandbox could not start ({msg[1]}); starting another in 10 s",
                      file=sys.stderr)
                time.sleep(10)
                self._replace(w)
            else:
                c, job = self.held.pop(id(w)), w.job
                w.job = None
                self._store(c, job, msg[1])

    def _died(self, w: Worker) -> None:
        """A worker died (killed, out of memory): its submission goes back to the queue."""
        c = self.held.pop(id(w), None)
        if c is not None:
            queue.release(self.db, c, self.name)
        self._replace(w)

    def _enforce_deadlines(self) -> None:
        t = time.monotonic()
        for w in list(self.workers):
            if t <= w.deadline:
                continue
            c, job = self.held.pop(id(w), None), w.job
            if c is not None:
                limit = self.settings.submission_timeout + self.settings.kill_after
                self._store(c, job, failure_result(job, c.chapter, "timeout", f"Grading this submission took "
                                                   f"longer than {limit:g} s, so it was stopped. Score: 0."))
            self._replace(w)

    def _replace(self, w: Worker) -> None:
        self.held.pop(id(w), None)
        w.job = None
        w.stop(force=True)
        self.workers[self.workers.index(w)] = start_worker(self.settings)

    def _renew(self) -> None:
        if time.monotonic() - self.renewed < self.lease / 4:
            return
        self.renewed = time.monotonic()
        queue.renew(self.db, self.name, [c.id for c in self.held.values()], self.lease)

    def _store(self, c: Claim, job: Job, result: dict) -> None:
        queue.finish(self.db, c, settle(self.folder, c, job, result), self.name)
        self.graded += 1


def start_in_thread(grader: Grader) -> threading.Thread:
    """Run `grader` in a thread that lives as long as the process (its workers die with the process)."""
    thread = threading.Thread(target=grader.run, name="grader", daemon=True)
    thread.start()
    return thread


class DaskGrader(Grader):
    """Grades queued submissions on a Dask cluster (`serve --scheduler ADDRESS`): each Dask worker's
    warm sandbox (`autograder.cluster.worker`), as `grade --scheduler` uses them. A few submissions per
    worker thread are in flight; a worker that dies is the scheduler's to retry (then "crashed")."""

    def __init__(self, db, folder: Path, settings: Settings, address: str, lease: float = 60.0,
                 connect_timeout: float = 10.0, worker_wait: float = 60.0, threads: int = 0) -> None:
        super().__init__(db, folder, settings, lease)
        self.address, self.connect_timeout, self.worker_wait, self.threads = (
            address, connect_timeout, worker_wait, threads)
        self.running: dict = {}  # future -> (claim, job)

    def run(self) -> None:
        from autograder import cluster
        from autograder.cluster.version import course_version
        from autograder.cluster.worker import GraderPlugin, WorkerSettings
        s = self.settings
        ws = WorkerSettings(s.chapter, s.isolation, s.call_timeout, s.submission_timeout, s.kill_after,
                            self.threads, s.secret.hex())
        version = course_version()
        self.plugin = cluster.plugin_name(ws, version)
        client = cluster.connect(self.address, self.connect_timeout)
        try:
            client.wait_for_workers(1, timeout=self.worker_wait)
            client.register_plugin(GraderPlugin(ws, version, self.plugin), name=self.plugin)
            while not self.stop.is_set():
                try:
                    self._fill(client)
                    self._gather()
                    self.held = {id(f): c for f, (c, _) in self.running.items()}
                    self._renew()
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                    time.sleep(1.0)
        finally:
            for future in self.running:
                future.cancel()
            client.close()

    def _fill(self, client) -> None:
        from autograder.cluster.worker import grade_remote
        try:
            threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        except Exception:  # noqa: BLE001
            threads = 1
        while len(self.running) < max(2, 2 * threads):
            c = queue.claim(self.db, self.name, self.lease)
            if c is None:
                return
            job = job_of(self.folder, c)
            future = client.submit(grade_remote, self.plugin, job.name, f"{c.chapter}.ipynb", c.notebook,
                                   c.student_id, key=f"service-{c.id}-{c.round}-{time.time_ns()}", pure=False)
            self.running[future] = (c, job)

    def _gather(self) -> None:
        done = [f for f in self.running if f.done()]  # polled: the client is not Dask's default one
        if not done:
            time.sleep(self.poll)
        for future in done:
            c, job = self.running.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker and the like: this submission's
                result = failure_result(job, c.chapter, "crashed", "Grading this submission stopped every Dask "
                                        "worker that tried it; the instructor can regrade it.",
                                        f"{type(exc).__name__}: {exc}")
            self._store(c, job, result)
