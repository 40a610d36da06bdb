"""What runs on a Dask worker: one warm sandbox per worker process, and the grading task.

The client registers a `GraderPlugin` with the scheduler, which installs it on
every worker, present and future (a worker restarted by its nanny gets it
again). On each worker the plugin

- computes that worker's course version (graders, reference, harness) and
  remembers the client's: a task on a worker whose version differs raises
  `CourseMismatch` instead of grading;
- starts one `Sandbox` in a background thread (the zygote that forks a
  fresh, isolated student process per submission) and preloads torch, the
  graders and the chapter's reference, exactly as a worker of the local pool
  does (`autograder.batch.worker`), so that a submission costs the same.

`grade_remote` is the task: the submission arrives as bytes (no shared file
system), is written to a private temporary folder under its own file name
and graded by `autograder.batch.worker.grade_one`. Student code runs only in
the sandbox's student process, never in the Dask worker.
"""
from __future__ import annotations

import gc
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
    threads: int = 0  # torch threads per worker; 0: the host's cores shared among its workers


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
        self.sandbox, self.failure, self.batch_settings, self.thread = None, "", None, None
        if self.worker_version != self.version:
            self.ready.set()
            return
        self.batch_settings = self._batch_settings(await self._workers_on_this_host(worker))
        # One long-lived thread starts the sandbox and grades: bubblewrap's --die-with-parent is a
        # parent-death signal, sent when the *thread* that started the zygote ends, so a zygote
        # started in a passing thread (a task's, this setup's) would die with it.
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
        settings = Settings(Path(tempfile.gettempdir()), jobs=jobs, chapter=s.chapter, isolation=s.isolation,
                            call_timeout=s.call_timeout, submission_timeout=s.submission_timeout, progress=False)
        if s.threads:
            settings.threads = lambda: s.threads  # type: ignore[method-assign]
        return settings

    def _warm(self) -> None:
        from autograder.batch import worker as batch_worker
        try:
            self.sandbox = batch_worker.start_sandbox(self.batch_settings)
            batch_worker.preload(self.batch_settings)  # while the zygote imports torch too
            batch_worker.prove(self.sandbox)
            gc.collect()
            gc.freeze()  # as the local pool's workers: pytest's gc.collect() then skips torch's objects
        except Exception as exc:  # noqa: BLE001 - e.g. bwrap asked for but missing
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def teardown(self, worker) -> None:
        if getattr(self, "thread", None) is not None:
            self.thread.submit(self._close)
            self.thread.shutdown(wait=True)

    def _close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()

    def grade(self, job: Job) -> dict:
        """Grade one submission in this worker's sandbox (started again if its zygote died)."""
        if self.worker_version != self.version:
            raise CourseMismatch(
                f"worker {self.address} on {socket.gethostname()} has course version "
                f"{self.worker_version[:12]}, the client has {self.version[:12]}: the graders, reference "
                "solutions, harness or torch/numpy/pytest versions differ. Install the same course "
                "checkout (and requirements.txt) on the workers and on the client.")
        self.ready.wait()
        if self.failure:
            raise SandboxFailed(f"the sandbox could not start on worker {self.address}: {self.failure}")
        return self.thread.submit(self._grade, job).result()  # one at a time, whatever --nthreads says

    def _grade(self, job: Job) -> dict:
        from autograder.batch import worker as batch_worker
        if self.sandbox.proc.poll() is not None:  # the zygote is gone for good: a new sandbox
            self.sandbox.close()
            self.sandbox = batch_worker.start_sandbox(self.batch_settings)
        return grade_job(job, self.sandbox, self.batch_settings)


def grade_job(job: Job, sandbox, settings) -> dict:
    """The grading itself; a separate function so that tests can inject faults (a Dask preload)."""
    from autograder.batch import worker as batch_worker
    return batch_worker.grade_one(job, sandbox, settings)


def grade_remote(plugin_name: str, name: str, filename: str, data: bytes | None) -> dict:
    """The task: grade the submission `data` (the bytes of file `filename`) on this worker."""
    plugin = get_worker().plugins[plugin_name]
    folder = Path(tempfile.mkdtemp(prefix="autograder-sub-"))
    try:
        path = folder / (Path(filename).name or "submission.ipynb")
        if data is not None:  # None: the client could not read the file; grading says so
            path.write_bytes(data)
        return plugin.grade(Job(name, path, name, path.stem))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def worker_state(plugin_name: str, dask_worker=None) -> dict:
    """For the client's check: this worker's course version and pid (`Client.run` passes dask_worker)."""
    from autograder.cluster.version import course_version
    plugin = dask_worker.plugins.get(plugin_name)
    return {"version": getattr(plugin, "worker_version", None) or course_version(), "pid": os.getpid(),
            "host": socket.gethostname()}
