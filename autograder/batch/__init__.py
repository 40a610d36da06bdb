"""Grade a whole class: parallel, resumable, with a progress bar.

`python -m autograder grade DIR --out OUT --jobs N` comes here.

- The parent stays light (no torch). It starts N long-lived trusted workers
  (`autograder.batch.worker`), each of which imports torch, pytest and the
  autograder once and owns one `Sandbox`, whose zygote forks a fresh isolated
  student process for every submission, exactly as in the single case: no
  Python start-up and no import per submission.
- The parent hands out one submission at a time, keeps a wall-clock deadline
  per submission (a worker that overruns is killed and replaced) and is the
  only writer of results: OUT/<submission>/results.json, written atomically.
- A submission is finished when its results.json exists, has a final status
  (graded, error or timeout) and records the sha256 of the file it graded,
  and current when it was graded as the batch's chapter by today's graders,
  reference and harness (`autograder.version`). A rerun skips current
  submissions (unless `force`), regrades changed files and results that
  predate the graders (and says how many), and retries those whose grading
  crashed (status "crashed": the grader's fault, not the student's).
- OUT/grades.csv is rebuilt from every results.json in OUT at the end (those
  of students not graded in this run too), also after Ctrl-C or a failure,
  so no submission is lost or counted twice.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Callable, Iterator

from autograder.harness.atomic import write_json
from autograder.batch.io import (FINAL, Job, Report, failure_result, find_jobs, is_current, is_finished, locked,
                                 read_result, result_path, same_files_as_before, select_students, sha256_of, stamp,
                                 student_id,
                                 whole, write_grades_csv, write_lms_csv)

__all__ = ["FINAL", "Job", "Report", "Settings", "find_jobs", "plan", "record_alone", "run_batch",
           "same_files_as_before", "select_students", "sha256_of", "stamp", "write_lms_csv"]

STARTUP_SECONDS = 180.0  # for a new worker to start its sandbox


@dataclass
class Settings:
    """How a batch runs."""

    out: Path
    jobs: int = 1
    chapter: str | None = None
    isolation: str = "auto"
    call_timeout: float = 10.0
    submission_timeout: float = 600.0  # grading time of one submission; tests not started by then fail
    kill_after: float = 120.0  # past submission_timeout, the worker is killed (score 0, status timeout)
    force: bool = False
    progress: bool = True
    worker: str = "autograder.batch.worker"  # the module each worker runs (`python -m WORKER FD`)
    secret: bytes = b""  # the course secret: per-student hidden inputs (`autograder.harness.seeds`)

    def threads(self) -> int:
        """Torch threads per worker and per student process: the cores shared out."""
        return max(1, (os.cpu_count() or 1) // max(1, self.jobs))


# ---------------------------------------------------------------- the trusted workers
@dataclass(eq=False)
class Worker:
    """The parent's handle on one trusted worker process."""

    proc: subprocess.Popen
    conn: Connection
    ready: bool = False
    job: Job | None = None
    sha: str = ""
    deadline: float = field(default_factory=lambda: time.monotonic() + STARTUP_SECONDS)
    told: bool = False  # asked to exit

    def give(self, job: Job, sha: str, timeout: float) -> None:
        self.job, self.sha = job, sha
        self.deadline = time.monotonic() + timeout
        self.conn.send(job)

    def tell_to_stop(self) -> None:
        """Ask an idle worker to exit (it closes its sandbox), without waiting for it."""
        if not self.told:
            self.told = True
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(None)

    def stop(self, force: bool = False) -> None:
        """Tell an idle worker to exit and wait for it; kill a busy or stuck one."""
        if not force:
            self.tell_to_stop()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()  # its zygote dies with it (bwrap --die-with-parent)
        self.proc.wait()
        self.conn.close()


def start_worker(settings: Settings) -> Worker:
    """Start `python -m <settings.worker> FD` with a connection to it, and send it the settings."""
    ours, theirs = socket.socketpair()
    try:
        proc = subprocess.Popen([sys.executable, "-m", settings.worker, str(theirs.fileno())],
                                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                start_new_session=True)  # Ctrl-C reaches the parent only
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    conn.send(settings)
    return Worker(proc, conn)


# ---------------------------------------------------------------- the parent's loop
class WorkerFailed(RuntimeError):
    """A worker could not start its sandbox: no submission can be graded."""


class Batch:
    """Hands out jobs to workers, collects results, replaces workers that die or overrun."""

    def __init__(self, settings: Settings, todo: list[tuple[Job, str]], report: Report,
                 on_result: Callable[[Job, dict], None]) -> None:
        self.settings, self.todo, self.report, self.on_result = settings, deque(todo), report, on_result
        self.workers: list[Worker] = []
        self.crashes_in_a_row = 0

    def run(self) -> None:
        self.workers = [start_worker(self.settings) for _ in range(min(self.settings.jobs, len(self.todo)))]
        try:
            while self.todo or any(w.job for w in self.workers):
                self._assign()
                self._collect(timeout=1.0)
                self._enforce_deadlines()
                if self.crashes_in_a_row >= max(3, 2 * self.settings.jobs):
                    raise WorkerFailed("grading crashed on every recent submission; see "
                                       "extra_data.grader_error in a crashed results.json")
        except WorkerFailed as exc:
            self.report.aborted = f"stopped: {exc}"
        finally:
            for w in self.workers:  # all at once: each worker's exit then overlaps the others'
                if w.job is None and w.ready:
                    w.tell_to_stop()
            for w in self.workers:
                w.stop(force=w.job is not None or not w.ready)  # busy or starting: killed

    def _assign(self) -> None:
        for w in self.workers:
            if w.ready and w.job is None and self.todo:
                job, sha = self.todo.popleft()
                w.give(job, sha, self.settings.submission_timeout + self.settings.kill_after)

    def _collect(self, timeout: float) -> None:
        ready = wait([w.conn for w in self.workers], timeout)  # a dead worker's connection reads as EOF
        for w in list(self.workers):
            if w.conn in ready:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    self._died(w)
                    continue
                if msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "failed":
                    raise WorkerFailed(f"the sandbox could not start: {msg[1]}")
                else:
                    self._done(w, msg[1])

    def _died(self, w: Worker) -> None:
        code = w.proc.wait()
        if not w.ready:
            raise WorkerFailed(f"a grading process died while starting (exit code {code})")
        self._replace(w, "crashed", "The grading process died while grading this submission; "
                      "it will be retried on the next run.", f"exit code {code}")

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for w in list(self.workers):
            if now <= w.deadline:
                continue
            if not w.ready:
                raise WorkerFailed(f"a grading process did not start within {STARTUP_SECONDS:g} s")
            if w.job:
                limit = self.settings.submission_timeout + self.settings.kill_after
                self._replace(w, "timeout", f"Grading this submission took longer than {limit:g} s, "
                              "so it was stopped. Score: 0.")

    def _done(self, w: Worker, result: dict) -> None:
        job, sha = w.job, w.sha
        w.job = None
        self._assign()  # its next submission first: the worker need not wait while this result is written
        status = result.get("extra_data", {}).get("status")
        self.crashes_in_a_row = self.crashes_in_a_row + 1 if status == "crashed" else 0
        self.on_result(job, stamp(result, job, sha))

    def _replace(self, w: Worker, status: str, message: str, detail: str = "") -> None:
        """Kill worker `w`, record its job (if any) as `status`, and start a fresh worker in its place."""
        job, sha = w.job, w.sha
        w.job = None
        w.stop(force=True)
        if len(self.todo) >= len(self.workers):  # still work for every worker: a fresh one
            self.workers[self.workers.index(w)] = start_worker(self.settings)
        else:
            self.workers.remove(w)
        if job is None:
            return
        result = failure_result(job, self.settings.chapter, status, message, detail)
        self.crashes_in_a_row = self.crashes_in_a_row + 1 if status == "crashed" else 0
        self.on_result(job, stamp(result, job, sha))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Let `kill PID` stop a batch as cleanly as Ctrl-C does (main thread only)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def progress_bar(settings: Settings, total: int, done: int):
    """A tqdm bar on stderr (a no-op stand-in when progress is off)."""
    from tqdm import tqdm
    return tqdm(total=total, initial=done, unit="nb", desc="grading", file=sys.stderr,
                disable=not settings.progress, dynamic_ncols=True, smoothing=0.1)


def plan(jobs: list[Job], out: Path, force: bool = False, chapter: str | None = None,
         secret: bytes = b"") -> tuple[Report, list[tuple[Job, str]]]:
    """What is already done (in the report, as `skipped`) and what to grade: (job, sha256) pairs.

    A finished result is done when it is current (`is_current`): graded as the job's chapter (the
    job's own, else `chapter`) by today's graders; the others are counted in `report.stale`.
    """
    report, todo, versions = Report(list(jobs), {}), [], {}
    for job in jobs:
        sha, stored = sha256_of(job.path), read_result(out, job)
        report.results[job.name] = stored if stored and stored["extra_data"].get("sha256") == sha else None
        if not force and is_finished(stored, sha):
            if is_current(stored, job.chapter or chapter, versions, expected_inputs(job, secret)):
                report.skipped += 1
                continue
            graded_as = stored["extra_data"].get("chapter") or "?"
            report.stale[graded_as] = report.stale.get(graded_as, 0) + 1
        todo.append((job, sha))
    return report, todo


def expected_inputs(job: Job, secret: bytes) -> str | None:
    """The `inputs_id` a current result of `job` records: its student's, under a course secret."""
    if not secret:
        return None
    from autograder.harness.seeds import inputs_id, student_key
    return inputs_id(student_key(secret, student_id(job)))


def stale_message(report: Report) -> str:
    """E.g. "22 results predate the graders (22 of 02_attention: ...): regrading them" ("" when none do)."""
    if not report.stale:
        return ""
    parts = ", ".join(f"{n} of {chapter}" for chapter, n in sorted(report.stale.items()))
    total = sum(report.stale.values())
    return (f"{total} result{'s' if total > 1 else ''} predate the graders ({parts}: graders, reference or "
            f"harness changed since, graded as another chapter, or under another course secret): regrading {'them' if total > 1 else 'it'}")


def record_alone(out: Path, job: Job, result: dict) -> Report:
    """Store one result graded outside a batch (a notebook given alone), then rebuild grades.csv from
    every result in OUT; returns the whole class's report."""
    with locked(out):
        write_json(result_path(out, job), result)
        report = whole(Report([job], {job.name: result}, graded=1), out)
        write_grades_csv(out, report)
    return report


def run_batch(jobs: list[Job], settings: Settings,
              on_result: Callable[[Job, dict], None] | None = None, runner: Callable | None = None) -> Report:
    """Grade `jobs` into settings.out; skip finished ones unless settings.force; write grades.csv.

    `runner(settings, todo, report, record)` is the engine (`.run()`): this module's local pool by
    default, `autograder.cluster.runner(...)` for a Dask cluster.
    """
    out = Path(settings.out)
    with locked(out), sigterm_as_interrupt():
        report, todo = plan(jobs, out, settings.force, settings.chapter, settings.secret)
        if report.stale:
            print(stale_message(report), file=sys.stderr)
        bar = progress_bar(settings, len(jobs), report.skipped)

        def record(job: Job, result: dict) -> None:
            write_json(result_path(out, job), result)
            report.results[job.name] = result
            report.graded += 1
            bar.update(1)
            bar.set_postfix(report.counts(), refresh=False)
            if on_result:
                on_result(job, result)

        try:
            if todo:
                (runner or Batch)(settings, todo, report, record).run()
        except KeyboardInterrupt:
            report.interrupted = True
        finally:
            bar.close()
            write_grades_csv(out, whole(report, out))  # every result in OUT: no row lost to a subset
    return report
