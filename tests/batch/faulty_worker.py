"""A batch worker that misbehaves on purpose, for tests/test_batch.py.

Run as `python -m tests.batch.faulty_worker FD` (Settings.worker): it dies on a
job whose name ends in "boom" and hangs on one ending in "hang"; other jobs
are graded as usual.
"""
from __future__ import annotations

import os
import sys
import time

from autograder.batch import worker as batch_worker


def grade(job, sandbox, settings) -> dict:
    if job.name.endswith("boom"):
        os._exit(9)  # the trusted worker itself dies
    if job.name.endswith("hang"):
        time.sleep(3600)  # the trusted worker hangs
    return batch_worker.grade_one(job, sandbox, settings)


if __name__ == "__main__":
    sys.exit(batch_worker.main(grade=grade))
