"""A long-lived trusted worker of a batch: `python -m autograder.batch.worker FD`.

The batch's parent starts N of these. Each imports torch, pytest and the
autograder once, starts one `Sandbox` (whose zygote forks a fresh, isolated
student process per submission) and then grades the submissions the parent
sends over the connection on file descriptor FD, one at a time:

    parent -> worker: Settings, then a Job per submission, then None (exit)
    worker -> parent: ("ready",) or ("failed", why), then ("result", results.json object) per Job

It is a fresh Python, not a fork of the parent: forking a process that has
already used torch's thread pool can deadlock the child (GNU OpenMP).
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from autograder.batch.io import Job, failure_result, student_id

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to kill this process when the batch's parent dies (kill -9 included)."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def start_sandbox(settings):
    """This worker's sandbox; its zygote starts importing torch at once, alongside this process."""
    from autograder.harness.sandbox import Limits, Sandbox
    return Sandbox(Limits(call_seconds=settings.call_timeout, submission_seconds=settings.submission_timeout,
                          threads=settings.threads()), isolation=settings.isolation)


def prove(sandbox) -> None:
    """Wait until the zygote serves: start one throwaway student process and end it."""
    sock, pid = sandbox.spawn()
    sock.close()
    sandbox.kill(pid)


def preload(settings) -> None:
    """What grading imports, and the reference of the batch's chapter when it is known."""
    import torch
    import autograder.grade  # noqa: F401 - pytest, the plugin, the student proxy
    torch.set_num_threads(settings.threads())
    if settings.chapter:
        from autograder.reference import load_reference
        with contextlib.suppress(Exception):  # a broken reference is reported per submission
            load_reference(settings.chapter)


def inputs_key(job: Job, settings) -> bytes | None:
    """The student's key of their own hidden inputs, with a course secret (None without one)."""
    from autograder.harness.seeds import student_key
    return student_key(settings.secret, student_id(job)) if settings.secret else None


def grade_one(job: Job, sandbox, settings) -> dict:
    """Grade one submission; a failure of the grader itself becomes a "crashed" result."""
    from autograder.grade import grade_submission
    try:
        return grade_submission(job.path, sandbox, job.chapter or settings.chapter,
                                inputs_key=inputs_key(job, settings))
    except Exception as exc:  # noqa: BLE001 - one submission must never stop the batch
        return failure_result(job, settings.chapter, "crashed",
                              f"The grader failed on this submission ({type(exc).__name__}); "
                              "it will be retried on the next run.", traceback.format_exc())


def serve(conn: Connection, grade=grade_one) -> None:
    """The worker's life: set up, say ready, grade jobs until told to stop."""
    settings, sandbox = conn.recv(), None
    try:
        sandbox = start_sandbox(settings)
        preload(settings)  # while the zygote imports torch too
        prove(sandbox)
    except Exception as exc:  # noqa: BLE001 - e.g. bwrap asked for but missing
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        if sandbox is not None:
            sandbox.close()
        return
    gc.collect()
    gc.freeze()  # torch, pytest and the reference: long-lived, kept out of every later collection
    conn.send(("ready",))
    try:
        while (job := conn.recv()) is not None:
            conn.send(("result", grade(job, sandbox, settings)))
            if sandbox.proc.poll() is not None:  # the zygote is gone for good: a new sandbox
                sandbox.close()
                sandbox = start_sandbox(settings)
    except (EOFError, OSError):
        pass  # the parent went away
    finally:
        sandbox.close()


def main(argv: list[str] | None = None, grade=grade_one) -> int:
    """Entry point; `grade` is replaceable by a wrapper module (the tests inject faults this way)."""
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    serve(Connection(int(argv[0])), grade)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # its sandbox is closed: skip the interpreter's teardown (0.35 s with torch)
