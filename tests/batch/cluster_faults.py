"""A Dask worker preload that misbehaves on purpose, for tests/test_cluster.py.

`dask worker ADDRESS --preload tests.batch.cluster_faults`: the worker process
dies (os._exit) on a submission whose name (or student folder) ends in "boom"; other submissions
are graded as usual.
"""
from __future__ import annotations

import os

from autograder.cluster import worker as cluster_worker

_grade = cluster_worker.grade_job


def grade_job(job, plugin) -> dict:
    if job.name.split("__")[0].endswith("boom"):
        os._exit(9)  # the Dask worker itself dies, as if the OOM killer had struck
    return _grade(job, plugin)


def dask_setup(worker) -> None:
    cluster_worker.grade_job = grade_job
