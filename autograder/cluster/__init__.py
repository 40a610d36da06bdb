"""Grade a class on a Dask cluster: `python -m autograder grade DIR --out OUT --scheduler ADDRESS`.

The client (this module) is the batch's parent, as in `autograder.batch`: it
plans (resume), keeps the progress bar and is the only writer of results
(OUT/<submission>/results.json, atomically, once each; grades.csv at the
end). Only the engine differs: instead of N local worker processes it sends
each submission, as bytes, to a Dask worker, which grades it in its own warm
sandbox (`autograder.cluster.worker`).

- Connecting: a scheduler that cannot be reached is an error within
  `connect_timeout` seconds. The client then waits up to `worker_wait`
  seconds for a first worker (Slurm jobs may queue).
- Course version: every worker must have the client's course version (graders,
  reference solutions, harness, torch/numpy/pytest); otherwise the batch stops
  at once, naming the worker, before (or as soon as) it grades anything.
- Faults: a worker that dies mid-submission (killed, out of memory) loses
  nothing: the scheduler gives its submissions to other workers, and the
  client writes each result once. A submission that kills every worker it
  reaches is given up after the scheduler's `allowed-failures` (3 by default:
  4 tries) and recorded as "crashed", with the reason, so a rerun retries it.
  A killed client resumes from OUT like the local pool.
- At most a few submissions per worker thread are in flight at a time, so a
  class of 10,000 notebooks is never all in memory.
"""
from __future__ import annotations

import hashlib
import json
import socket
import time
from collections import deque
from dataclasses import asdict
from typing import Callable
from urllib.parse import urlsplit

from autograder.batch import Settings
from autograder.batch.io import Job, Report, failure_result, stamp

__all__ = ["ClusterBatch", "ClusterError", "connect", "runner", "start_jobqueue"]

IN_FLIGHT_PER_THREAD = 2  # submissions queued per worker thread: no worker waits for the client


class ClusterError(RuntimeError):
    """The cluster cannot grade: no scheduler, no worker, or a worker of another course version."""


def check_reachable(address: str, timeout: float) -> None:
    """A plain TCP connection to the scheduler, so that a wrong address fails at once, not after retries."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls"):
        return  # inproc:// and others: left to Dask
    host, port = parts.hostname, parts.port or 8786
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} ({exc.strerror or exc}); "
                           "is `dask scheduler` running there, and is the port open to this host?") from None


def connect(address, connect_timeout: float = 10.0):
    """A `distributed.Client` for a scheduler address (or a cluster object, e.g. a SLURMCluster).

    TLS: a tls:// address uses the `distributed.comm.tls` settings of the Dask
    configuration (~/.config/dask/*.yaml or DASK_* variables); see
    "TLS (hosts on a shared network)" in book/instructors/cluster.md.
    """
    from distributed import Client
    if isinstance(address, str):
        check_reachable(address, connect_timeout)
    try:
        return Client(address, timeout=connect_timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot connect to the Dask scheduler at {address}: {exc}") from None


def plugin_name(settings, version: str) -> str:
    """One plugin (one sandbox per worker) per course version and grading settings."""
    key = json.dumps(asdict(settings), sort_keys=True)
    return f"autograder-{version[:12]}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


class ClusterBatch:
    """The Dask engine of `autograder.batch.run_batch`: same inputs, same results, other workers."""

    def __init__(self, settings: Settings, todo: list[tuple[Job, str]], report: Report,
                 on_result: Callable[[Job, dict], None], *, address, connect_timeout: float = 10.0,
                 worker_wait: float = 60.0, threads: int = 0) -> None:
        self.settings, self.todo, self.report, self.on_result = settings, deque(todo), report, on_result
        self.address, self.connect_timeout, self.worker_wait, self.threads = (
            address, connect_timeout, worker_wait, threads)
        self.written: set[str] = set()

    def run(self) -> None:
        from autograder.cluster.version import course_version
        from autograder.cluster.worker import GraderPlugin, WorkerSettings
        try:
            client = connect(self.address, self.connect_timeout)
        except ClusterError as exc:
            self.report.aborted = f"stopped: {exc}"
            return
        try:
            version = course_version()
            s = self.settings
            ws = WorkerSettings(s.chapter, s.isolation, s.call_timeout, s.submission_timeout, s.kill_after,
                                self.threads, s.secret.hex())
            self.name = plugin_name(ws, version)
            self._wait_for_workers(client)
            client.register_plugin(GraderPlugin(ws, version, self.name), name=self.name)
            self._check_versions(client, version)
            self._grade(client)
        except ClusterError as exc:
            self.report.aborted = f"stopped: {exc}"
        finally:
            client.close()

    def _wait_for_workers(self, client) -> None:
        try:
            client.wait_for_workers(1, timeout=self.worker_wait)
        except (TimeoutError, OSError):
            raise ClusterError(f"no Dask worker joined the scheduler at {client.scheduler.address} within "
                               f"{self.worker_wait:g} s (start some with `dask worker ADDRESS`)") from None

    def _check_versions(self, client, version: str) -> None:
        from autograder.cluster.worker import worker_state
        states = client.run(worker_state, self.name)
        wrong = {a: s for a, s in states.items() if s["version"] != version}
        if wrong:
            names = ", ".join(f"{a} on {s['host']} ({s['version'][:12]})" for a, s in sorted(wrong.items()))
            raise ClusterError(f"refused {len(wrong)} of {len(states)} workers whose course version differs "
                               f"from this client's ({version[:12]}): {names}. The graders, reference "
                               "solutions, harness or torch/numpy/pytest versions differ; install the same "
                               "course checkout and requirements.txt on the workers and on the client.")

    def _window(self, client) -> int:
        try:
            threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        except Exception:  # noqa: BLE001
            threads = 1
        return max(2, IN_FLIGHT_PER_THREAD * threads)

    def _submit(self, client, job: Job, sha: str):
        from autograder.cluster.worker import grade_remote
        try:
            data = job.path.read_bytes()
        except OSError:
            data = None
        return client.submit(grade_remote, self.name, job.name, job.path.name, data, job.student,
                             key=f"grade-{job.name}-{sha[:12]}-{time.time_ns()}", pure=False)

    def _grade(self, client) -> None:
        from distributed import as_completed
        pending, running = as_completed(loop=client.loop), {}
        try:
            while self.todo or running:
                while self.todo and len(running) < self._window(client):
                    job, sha = self.todo.popleft()
                    future = self._submit(client, job, sha)
                    running[future.key] = (job, sha)
                    pending.add(future)
                future = next(pending)
                job, sha = running.pop(future.key)
                self._finish(future, job, sha)
        finally:
            for future in list(pending.futures):
                future.cancel()

    def _finish(self, future, job: Job, sha: str) -> None:
        from autograder.cluster.worker import CourseMismatch, SandboxFailed
        try:
            result = future.result()
        except CourseMismatch as exc:
            raise ClusterError(f"refused: {exc}") from None
        except SandboxFailed as exc:  # as in the local pool: no submission could be graded there
            raise ClusterError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the submission failed, not the batch
            result = self._failed(job, exc)
        if job.name in self.written:
            return  # never twice
        self.written.add(job.name)
        self.on_result(job, stamp(result, job, sha))

    def _failed(self, job: Job, exc: Exception) -> dict:
        from distributed.scheduler import KilledWorker
        if isinstance(exc, KilledWorker):
            message = ("Grading this submission stopped every Dask worker that tried it (each worker "
                       "process died), so it was given up; it will be retried on the next run.")
        else:
            message = (f"The grader failed on this submission on a Dask worker ({type(exc).__name__}); "
                       "it will be retried on the next run.")
        return failure_result(job, self.settings.chapter, "crashed", message, f"{type(exc).__name__}: {exc}")


def runner(address, **options) -> Callable[..., ClusterBatch]:
    """The engine for `autograder.batch.run_batch(..., runner=...)`."""
    def make(settings, todo, report, on_result):
        return ClusterBatch(settings, todo, report, on_result, address=address, **options)
    return make

