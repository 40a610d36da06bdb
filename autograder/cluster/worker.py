"""What runs on a Dask worker: one warm grading process per worker, and the grading task.

The client registers a `GraderPlugin` with the scheduler, which installs it on
every worker, present and future (a worker restarted by its nanny gets it
again). On each worker the plugin

- computes that worker's course version (graders, reference, harness) and
  remembers the client's: a task on a worker whose version differs raises
  `CourseMismatch` instead of grading;
- starts one trusted grading process of the local pool
  (`python -m autograder.batch.worker FD`: torch, the graders and the reference
  loaded once, one `Sandbox` whose zygote forks a fresh, isolated student
  process per submission) and keeps it warm. Grading therefore runs the local
  pool's very code, in a process of its own: not in a thread of the Dask
  worker, whose event loop would share the GIL with it (that cost +25% per
  submission on the loaded 2-core machine). As in the local pool, a grading
  process that dies is replaced, and one that overruns the submission budget
  plus `kill_after` is killed (status timeout).

`grade_remote` is the task: the submission arrives as bytes (no shared file
system), is written to a private temporary folder under its own file name and
handed to the grading process. Student code runs only in the sandbox's
student process, never in the Dask worker.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from distributed import WorkerPlugin, get_worker

from autograder.batch.io import Job
from autograder.harness.scratch import owned_tempdir


class CourseMismatch(RuntimeError):
    """This worker's course (graders, reference, harness) is not the client's."""


class SandboxFailed(RuntimeError):
    """This worker's sandbox could not start (e.g. --isolation bwrap without bubblewrap)."""


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker needs of the client's settings (see `autograder.batch.Settings`)."""

    chapter: str | None
    isolation: str
    call_timeout: float
    submission_timeout: float
    kill_after: float = 120.0  # past submission_timeout, the grading process is killed (status timeout)
    threads: int = 0  # torch threads per worker; 0: the host's cores shared among its workers
    secret: str = ""  # the course secret, in hex (per-student hidden inputs); "" for none


class GraderPlugin(WorkerPlugin):
    """One warm sandbox per Dask worker process, checked against the client's course version."""

    def __init__(self, settings: WorkerSettings, version: str, name: str) -> None:
        self.settings, self.version, self.name = settings, version, name

    # ------------------------------------------------------------ on the worker
    async def setup(self, worker) -> None:
        from autograder.cluster.version import course_version
        self.worker_version = course_version()
        self.address = worker.address
        self.ready = threading.Event()
        self.local, self.failure, self.batch_settings, self.thread = None, "", None, None
        if self.worker_version != self.version:
            self.ready.set()
            return
        threads = self.settings.threads
        jobs = max(1, (os.cpu_count() or 1) // threads) if threads else await self._workers_on_this_host(worker)
        self.batch_settings = self._batch_settings(jobs)  # Settings.threads(): cores // jobs
        # One long-lived thread starts the grading process and talks to it: that process asks for a
        # parent-death signal (PR_SET_PDEATHSIG), which the kernel sends when the *thread* that
        # started it ends, so a process started in a passing thread would die with that thread.
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="autograder-sandbox")
        self.thread.submit(self._warm)

    async def _workers_on_this_host(self, worker) -> int:
        """How many workers share this host's cores (1 if the scheduler cannot say)."""
        try:
            info = await worker.scheduler.identity()
            host = worker.address.rsplit(":", 1)[0]
            return max(1, sum(1 for a in info.get("workers", {}) if a.rsplit(":", 1)[0] == host))
        except Exception:  # noqa: BLE001 - a guess is enough: it only sets thread counts
            return 1

    def _batch_settings(self, jobs: int):
        from autograder.batch import Settings
        s = self.settings
        return Settings(Path(tempfile.gettempdir()), jobs=jobs, chapter=s.chapter, isolation=s.isolation,
                        call_timeout=s.call_timeout, submission_timeout=s.submission_timeout,
                        kill_after=s.kill_after, progress=False, secret=bytes.fromhex(s.secret))

    def _warm(self) -> None:
        try:
            self.failure = self._start()
        except Exception as exc:  # noqa: BLE001
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def _start(self) -> str:
        """Start the grading process and wait until it serves; "" or why it could not start."""
        from autograder.batch import STARTUP_SECONDS, start_worker
        self.local = start_worker(self.batch_settings)
        if not self.local.conn.poll(STARTUP_SECONDS):
            self.local.stop(force=True)
            return f"the grading process did not start within {STARTUP_SECONDS:g} s"
        try:
            msg = self.local.conn.recv()
        except (EOFError, OSError):
            return f"the grading process died while starting (exit code {self.local.proc.wait()})"
        return "" if msg[0] == "ready" else f"the sandbox could not start: {msg[1]}"

    def teardown(self, worker) -> None:
        if getattr(self, "thread", None) is not None:
            self.thread.submit(self._close)
            self.thread.shutdown(wait=True)

    def _close(self) -> None:
        if self.local is not None:
            self.local.stop(force=self.local.job is not None)

    def grade(self, job: Job) -> dict:
        """Grade one submission in this worker's grading process (started again if it died)."""
        if self.worker_version != self.version:
            raise CourseMismatch(
                f"worker {self.address} on {socket.gethostname()} has course version "
                f"{self.worker_version[:12]}, the client has {self.version[:12]}: the graders, reference "
                "solutions, harness or torch/numpy/pytest versions differ. Install the same course "
                "checkout (and requirements.txt) on the workers and on the client.")
        self.ready.wait()
        if self.failure:
            raise SandboxFailed(f"the sandbox could not start on worker {self.address}: {self.failure}")
        return self.thread.submit(grade_job, job, self).result()  # one at a time, whatever --nthreads says

    def dispatch(self, job: Job) -> dict:
        """Send `job` to the grading process and wait for its result, as the local pool's parent does."""
        from autograder.batch.io import failure_result
        if self.local.proc.poll() is not None:  # died between submissions: a fresh one
            if failure := self._start():
                raise SandboxFailed(f"the sandbox could not start again on worker {self.address}: {failure}")
        limit = self.settings.submission_timeout + self.settings.kill_after
        self.local.job = job
        self.local.conn.send(job)
        if self.local.conn.poll(limit):
            try:
                result = self.local.conn.recv()[1]
                self.local.job = None
                return result
            except (EOFError, OSError):
                code = self.local.proc.wait()
                self.local.stop(force=True)
                return failure_result(job, self.settings.chapter, "crashed", "The grading process died while "
                                      "grading this submission; it will be retried on the next run.",
                                      f"exit code {code}")
        self.local.stop(force=True)
        return failure_result(job, self.settings.chapter, "timeout", f"Grading this submission took longer "
                              f"than {limit:g} s, so it was stopped. Score: 0.")


def grade_job(job: Job, plugin: GraderPlugin) -> dict:
    """The grading itself; a separate function so that tests can inject faults (a Dask preload)."""
    return plugin.dispatch(job)


def grade_remote(plugin_name: str, name: str, filename: str, data: bytes | None, student: str | None = None) -> dict:
    """The task: grade the submission `data` (the bytes of file `filename`, by `student`) on this worker."""
    plugin = get_worker().plugins[plugin_name]
    folder = Path(owned_tempdir("autograder-sub-"))
    try:
        path = folder / (Path(filename).name or "submission.ipynb")
        if data is not None:  # None: the client could not read the file; grading says so
            path.write_bytes(data)
        return plugin.grade(Job(name, path, student or name, path.stem))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def worker_state(plugin_name: str, dask_worker=None) -> dict:
    """For the client's check: this worker's course version and pid (`Client.run` passes dask_worker)."""
    from autograder.cluster.version import course_version
    plugin = dask_worker.plugins.get(plugin_name)
    return {"version": getattr(plugin, "worker_version", None) or course_version(), "pid": os.getpid(),
            "host": socket.gethostname()}
