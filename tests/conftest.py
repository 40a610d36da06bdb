"""The test run leaves no temporary folders of the processes it killed (autograder/harness/scratch.py)."""
from __future__ import annotations

PREFIXES = ("autograder-sandbox-", "autograder-sub-", "autograder-student-")


def pytest_sessionfinish(session, exitstatus) -> None:
    from autograder.harness.scratch import sweep
    for prefix in PREFIXES:
        sweep(prefix)
